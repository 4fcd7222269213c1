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
// Why no CUDA device can be used ("" when one can): no CUDA in this build, no NVIDIA
// driver, the backend module not loading, the CUDA runtime failing, or no device. broken,
// when given, says whether the machine has the driver (or GMLP_CUDA_EMULATOR is set) and
// CUDA still failed: a fault to report, not an absence.
std::string cuda_unusable_reason(bool* broken = nullptr);

// The precision of the matrix products. fp32: every product in float32 (the reference).
// bf16: mixed precision, the products' inputs rounded to bfloat16 and accumulated in
// float32 on tensor cores; weights, gradients, AdamW, norms and reductions stay float32,
// and so do checkpoints.
enum class Precision { fp32, bf16 };
std::string name_of(Precision p);
// "fp32" or "bf16"; error for another word.
Precision parse_precision(const std::string& s);
// Which library multiplies fp32 matrices on the CPU, its kernels and why (OpenBLAS, or
// oneDNN on AVX-512 CPUs where OpenBLAS runs narrower kernels; src/ops/ops.h). Error for
// a GMLP_CPU_GEMM other than openblas or onednn: the gmlp program and the Python module
// ask once at start, so that a misspelling stops them before they do anything.
std::string cpu_gemm();

// Sets the precision of the device's backend for the rest of the process. Error naming
// why when the device cannot do it (bf16 on the CPU).
void use_precision(Device d, Precision p);

}  // namespace gmlp
