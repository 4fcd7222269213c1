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

// The precision of the matrix products. fp32: every product in float32 (the reference).
// bf16: mixed precision, the products' inputs rounded to bfloat16 and accumulated in
// float32 on tensor cores; weights, gradients, AdamW, norms and reductions stay float32,
// and so do checkpoints.
enum class Precision { fp32, bf16 };
std::string name_of(Precision p);
// "fp32" or "bf16"; error for another word.
Precision parse_precision(const std::string& s);
// Sets the precision of the device's backend for the rest of the process. Error naming
// why when the device cannot do it (bf16 on the CPU).
void use_precision(Device d, Precision p);

}  // namespace gmlp
