// The process's CPU backend (the class is in cpu_backend.h).
#include "backend/cpu_backend.h"

namespace gmlp {

Backend& cpu_backend() {
  static CpuBackend be;
  return be;
}

}  // namespace gmlp
