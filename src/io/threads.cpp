#include "gmlp/threads.h"

#include <cblas.h>
#include <omp.h>
#include <unistd.h>

#include <cstdlib>

namespace gmlp {

void reexec_with_passive_omp_wait(char** argv) {
  if (std::getenv("OMP_WAIT_POLICY") || std::getenv("GOMP_SPINCOUNT")) return;
  setenv("OMP_WAIT_POLICY", "PASSIVE", 1);
  execv("/proc/self/exe", argv);
}

void set_threads(int n) {
  if (n <= 0) return;
  omp_set_num_threads(n);
  openblas_set_num_threads(n);
}

}  // namespace gmlp
