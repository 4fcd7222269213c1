// Choosing a device: what --device means, and which backend serves it.
//
// The CUDA backend is a module of its own (libgmlp_cuda.so), opened the first time a
// command asks about CUDA. Linking the CUDA runtime and cuBLAS into every process cost
// each CPU run about 160 MB of resident memory and a tenth of a second at start, and a
// machine without the CUDA libraries could not start gmlp at all.
#include "backend/backend.h"
#include "gmlp/comm.h"
#include "gmlp/error.h"
#include "ops/ops.h"

#include <cstdio>

#ifdef GMLP_HAVE_CUDA
#include <dlfcn.h>
#include <unistd.h>

#include <cstdlib>
#include <mutex>
#include <string>

#include "io/module.h"
#endif

namespace gmlp {

#ifdef GMLP_HAVE_CUDA
namespace {

struct CudaModule {
  int (*device_count)(char* err, size_t cap) = nullptr;
  Backend* (*backend)() = nullptr;
  // NCCL (src/ops/cuda/nccl.cpp); null in a module from before it existed.
  size_t (*nccl_id)(unsigned char* out, size_t cap, char* err, size_t err_cap) = nullptr;
  DeviceReducer* (*nccl_open)(const unsigned char* id, size_t len, int rank, int size, char* err,
                              size_t err_cap) = nullptr;
  std::string error;  // why it did not load
};

// GMLP_CUDA_EMULATOR: the path of the CUDA emulator's module (tests/cuda_emu), which runs
// the CUDA backend's kernels on the CPU; the CUDA tests use it where there is no GPU.
const char* emulator_module() {
  const char* e = std::getenv("GMLP_CUDA_EMULATOR");
  return e && *e ? e : nullptr;
}

const CudaModule& cuda_module() {
  static CudaModule m;
  static std::once_flag once;
  std::call_once(once, [] {
    const char* emu = emulator_module();
    std::string file = "libgmlp_cuda.so", path = GMLP_CUDA_MODULE_PATH;
    if (emu) {
      path = emu;
      file = path.substr(path.rfind('/') + 1);
    }
    void* h = open_module(file, path, {"gmlp_cuda_backend", "gmlp_cuda_device_count"}, m.error);
    if (!h) return;
    m.backend = reinterpret_cast<Backend* (*)()>(dlsym(h, "gmlp_cuda_backend"));
    m.device_count = reinterpret_cast<int (*)(char*, size_t)>(dlsym(h, "gmlp_cuda_device_count"));
    m.nccl_id = reinterpret_cast<decltype(m.nccl_id)>(dlsym(h, "gmlp_cuda_nccl_id"));
    m.nccl_open = reinterpret_cast<decltype(m.nccl_open)>(dlsym(h, "gmlp_cuda_nccl_open"));
  });
  return m;
}

// Without the NVIDIA driver's control device no CUDA call can find a GPU; checking it
// first keeps `--device auto` on a machine without one from loading the module at all.
bool nvidia_driver_present() { return emulator_module() || access("/dev/nvidiactl", F_OK) == 0; }

// What the module says once: the device count, or why it cannot give one.
struct Devices {
  int count = 0;
  std::string error;
};
const Devices& devices() {
  static const Devices d = [] {
    Devices r;
    const CudaModule& m = cuda_module();
    if (!m.device_count) {
      r.error = "cannot load the CUDA backend module: " + m.error;
      return r;
    }
    char err[512] = "";
    r.count = m.device_count(err, sizeof err);
    r.error = err;
    return r;
  }();
  return d;
}

}  // namespace

bool cuda_built() { return true; }
int cuda_device_count() { return nvidia_driver_present() ? devices().count : 0; }
std::string cuda_unusable_reason(bool* broken) {
  if (broken) *broken = false;
  if (!nvidia_driver_present())
    return "no CUDA device is visible on this machine (no NVIDIA driver: /dev/nvidiactl does not exist)";
  if (devices().count > 0) return "";
  if (!devices().error.empty()) {
    if (broken) *broken = true;
    return devices().error;
  }
  return "no CUDA device is visible on this machine (the NVIDIA driver is there, but the CUDA runtime lists none)";
}
#else
bool cuda_built() { return false; }
int cuda_device_count() { return 0; }
std::string cuda_unusable_reason(bool* broken) {
  if (broken) *broken = false;
  return "this gmlp was built without the CUDA backend (no nvcc at build time, or -DGMLP_CUDA=OFF)";
}
#endif

std::string name_of(Device d) { return d == Device::cuda ? "cuda" : "cpu"; }
std::string name_of(Precision p) { return p == Precision::bf16 ? "bf16" : "fp32"; }

Precision parse_precision(const std::string& s) {
  if (s == "fp32") return Precision::fp32;
  if (s == "bf16") return Precision::bf16;
  throw Error("--precision: '" + s + "' is not one of fp32, bf16");
}

void use_precision(Device d, Precision p) { backend_for(d).set_precision(p); }

std::string cpu_gemm() { return ops::fp32_engine_description(); }

Device parse_device(const std::string& s) {
  if (s == "cpu") return Device::cpu;
  if (s == "auto") {
    bool broken = false;
    const std::string why = cuda_unusable_reason(&broken);
    if (why.empty()) return Device::cuda;
    // A machine with the driver whose CUDA fails runs on the CPU, but says why once.
    static bool warned = false;
    if (broken && !warned) {
      std::fprintf(stderr, "gmlp: warning: --device auto: running on the CPU: %s\n", why.c_str());
      warned = true;
    }
    return Device::cpu;
  }
  if (s == "cuda") {
    const std::string why = cuda_unusable_reason();
    require(why.empty(), "--device cuda: " + why);
    return Device::cuda;
  }
  throw Error("--device: '" + s + "' is not one of cpu, cuda, auto");
}

Backend& backend_for(Device device) {
  if (device == Device::cpu) return cpu_backend();
#ifdef GMLP_HAVE_CUDA
  const std::string why = cuda_unusable_reason();
  require(why.empty(), "the CUDA backend cannot run: " + why);
  return *cuda_module().backend();
#else
  throw Error("this gmlp was built without the CUDA backend");
#endif
}

DeviceReducer& device_reducer(Device device, Communicator& host) {
  require(device == Device::cuda, "internal: the CPU reduces host memory through its communicator");
#ifdef GMLP_HAVE_CUDA
  static DeviceReducer* reducer = nullptr;
  if (reducer) return *reducer;
  backend_for(device);  // chooses this rank's GPU before NCCL binds to the current one
  const CudaModule& m = cuda_module();
  require(m.nccl_id && m.nccl_open, "the CUDA module has no NCCL entry points (rebuild it)");
  // Every rank takes part in each collective below, also when rank 0 failed, so that an
  // error ends every rank with its message instead of leaving some waiting.
  char err[512] = "";
  unsigned char id[512] = {};
  uint64_t len = 0;
  if (host.rank() == 0) len = m.nccl_id(id, sizeof id, err, sizeof err);
  host.broadcast(&len, sizeof len, 0);
  host.broadcast(err, sizeof err, 0);
  require(len > 0, std::string("data-parallel training on GPUs needs NCCL: ") + err);
  host.broadcast(id, sizeof id, 0);
  DeviceReducer* r = m.nccl_open(id, size_t(len), host.rank(), host.size(), err, sizeof err);
  int64_t failed = r == nullptr;
  host.allreduce_sum(&failed, 1);
  require(r != nullptr, std::string("NCCL on rank ") + std::to_string(host.rank()) + ": " + err);
  require(failed == 0, std::to_string(failed) + " of " + std::to_string(host.size()) +
                           " ranks could not join the NCCL communicator (their messages say why)");
  reducer = r;
  return *reducer;
#else
  (void)host;
  throw Error("this gmlp was built without the CUDA backend");
#endif
}

}  // namespace gmlp
