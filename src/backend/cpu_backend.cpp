// The process's CPU backend (the class is in cpu_backend.h).
#include "backend/cpu_backend.h"

#include <cstdlib>
#include <string>

#include "gmlp/error.h"

namespace gmlp {

// bf16 runs on the CPU's bf16 instructions (through oneDNN) and is refused where there
// are none; GMLP_CPU_BF16=emulate asks for bf16's rounding on fp32 instructions instead,
// on any CPU: the accuracy of bf16 without its speed, for studies and tests.
void CpuBackend::set_precision(Precision p) {
  if (p == Precision::fp32) {
    ops::set_products(ops::Products::fp32);
    return;
  }
  if (const char* env = std::getenv("GMLP_CPU_BF16"); env && *env) {
    require(std::string(env) == "emulate",
            std::string("GMLP_CPU_BF16: '") + env + "' is not 'emulate', its one value (or leave it unset)");
    ops::set_products(ops::Products::bf16_emulated);
    return;
  }
  if (const char* why = ops::bf16_unavailable())
    throw Error(std::string("--precision bf16 on the CPU: ") + why +
                "; use --precision fp32, or --device cuda (GMLP_CPU_BF16=emulate gives bf16's rounding at fp32's "
                "speed, for accuracy studies)");
  ops::set_products(ops::Products::bf16);
}

Backend& cpu_backend() {
  static CpuBackend be;
  return be;
}

}  // namespace gmlp
