// The process's CPU backend (the class is in cpu_backend.h).
#include "backend/cpu_backend.h"

#include <cpuid.h>

#include <string>

#include "gmlp/error.h"

namespace gmlp {

// The CPU's bf16 matrix instructions, from CPUID leaf 7: AVX512-BF16 (subleaf 1, EAX
// bit 5) and AMX-BF16 (subleaf 0, EDX bit 22).
void CpuBackend::set_precision(Precision p) {
  if (p == Precision::fp32) return;
  unsigned a = 0, b = 0, c = 0, d = 0;
  bool avx512_bf16 = false, amx_bf16 = false;
  if (__get_cpuid_count(7, 0, &a, &b, &c, &d)) {
    amx_bf16 = (d >> 22) & 1u;
    if (a >= 1 && __get_cpuid_count(7, 1, &a, &b, &c, &d)) avx512_bf16 = (a >> 5) & 1u;
  }
  if (!avx512_bf16 && !amx_bf16)
    throw Error("--precision bf16 on the CPU: this CPU has no bf16 matrix instructions (neither AVX512-BF16 nor "
                "AMX-BF16); use --precision fp32, or --device cuda");
  throw Error(std::string("--precision bf16 on the CPU: this CPU has ") + (amx_bf16 ? "AMX-BF16" : "AVX512-BF16") +
              ", but gmlp's bf16 path for the CPU is not written yet; use --precision fp32, or --device cuda");
}

Backend& cpu_backend() {
  static CpuBackend be;
  return be;
}

}  // namespace gmlp
