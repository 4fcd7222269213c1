// Choosing a device: what --device means, and which backend serves it.
#include "backend/backend.h"
#include "gmlp/error.h"

namespace gmlp {

#ifdef GMLP_HAVE_CUDA
// src/ops/cuda/cuda_backend.cpp.
int cuda_runtime_device_count();
Backend& cuda_backend();
bool cuda_built() { return true; }
int cuda_device_count() { return cuda_runtime_device_count(); }
#else
bool cuda_built() { return false; }
int cuda_device_count() { return 0; }
#endif

std::string name_of(Device d) { return d == Device::cuda ? "cuda" : "cpu"; }

Device parse_device(const std::string& s) {
  if (s == "cpu") return Device::cpu;
  if (s == "auto") return cuda_built() && cuda_device_count() > 0 ? Device::cuda : Device::cpu;
  if (s == "cuda") {
    require(cuda_built(), "--device cuda: this gmlp was built without the CUDA backend (no nvcc at build time, or "
                          "-DGMLP_CUDA=OFF)");
    require(cuda_device_count() > 0, "--device cuda: no CUDA device is visible on this machine");
    return Device::cuda;
  }
  throw Error("--device: '" + s + "' is not one of cpu, cuda, auto");
}

Backend& backend_for(Device device) {
  if (device == Device::cpu) return cpu_backend();
#ifdef GMLP_HAVE_CUDA
  require(cuda_device_count() > 0, "the CUDA backend needs a CUDA device; none is visible on this machine");
  return cuda_backend();
#else
  throw Error("this gmlp was built without the CUDA backend");
#endif
}

}  // namespace gmlp
