#pragma once
// Where a model runs: the CPU, or a CUDA GPU when the build has the CUDA backend and
// the machine has a device. A model's weights() stay host memory on every device
// (gmlp/model.h says how they follow the device copy).
#include <string>

namespace gmlp {

enum class Device { cpu, cuda };

std::string name_of(Device d);
// "cpu", "cuda" or "auto" (cuda when usable, else cpu). Error for another word, and for
// "cuda" when this build has no CUDA backend or this machine no CUDA device, saying which.
Device parse_device(const std::string& s);
// Whether this build has the CUDA backend, and how many devices it sees (0 without).
bool cuda_built();
int cuda_device_count();

}  // namespace gmlp
