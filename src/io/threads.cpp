#include "gmlp/threads.h"

#include <cblas.h>
#include <omp.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>

namespace gmlp {
namespace {

// The thread count this run will use: the global --threads option (0: not given).
int threads_option(char** argv) {
  for (int i = 1; argv[i]; ++i) {
    const char* a = argv[i];
    if (!std::strcmp(a, "--threads") && argv[i + 1]) return std::max(0, std::atoi(argv[i + 1]));
    if (!std::strncmp(a, "--threads=", 10)) return std::max(0, std::atoi(a + 10));
  }
  return 0;
}

}  // namespace

void choose_omp_wait_policy(char** argv) {
  if (choose_omp_wait_env(threads_option(argv))) execv("/proc/self/exe", argv);
}

void set_threads(int n) {
  if (n <= 0) return;
  omp_set_num_threads(n);
  openblas_set_num_threads(n);
}

}  // namespace gmlp
