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
  if (!ops::cpu_has_bf16())
    throw Error("--precision bf16 on the CPU: this CPU has no bf16 matrix instructions (neither AVX512-BF16 nor "
                "AMX-BF16); use --precision fp32, or --device cuda (GMLP_CPU_BF16=emulate gives bf16's rounding "
                "at fp32's speed, for accuracy studies)");
  if (!ops::have_onednn())
    throw Error("--precision bf16 on the CPU: this CPU has bf16 instructions, but this build of gmlp has no oneDNN; "
                "run scripts/setup.sh (it installs libdnnl-dev) and rebuild");
  ops::set_products(ops::Products::bf16);
}

Backend& cpu_backend() {
  static CpuBackend be;
  return be;
}

}  // namespace gmlp
