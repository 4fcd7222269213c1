#include "gmlp/threads.h"

#include <cblas.h>
#include <omp.h>
#include <sched.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>
#include <thread>

namespace gmlp {
namespace {

// Runnable tasks in the whole system (/proc/stat), this process's thread included.
int procs_running() {
  std::ifstream in("/proc/stat");
  std::string key;
  long value = 0;
  while (in >> key) {
    if (key == "procs_running" && in >> value) return int(value);
    in.ignore(1 << 20, '\n');
  }
  return -1;
}

// Other processes that keep a core busy: the fewest seen over a few samples, so that a
// process that merely flickers past (a shell, a daemon waking up) does not count.
int others_running() {
  int fewest = -1;
  for (int i = 0; i < 5; ++i) {
    if (i) std::this_thread::sleep_for(std::chrono::milliseconds(4));
    const int n = procs_running();
    if (n < 0) return 0;  // no /proc: assume an idle machine
    fewest = fewest < 0 ? n : std::min(fewest, n);
  }
  return std::max(0, fewest - 1);
}

int usable_cores() {
  cpu_set_t set;
  if (sched_getaffinity(0, sizeof set, &set) == 0) return std::max(1, CPU_COUNT(&set));
  return std::max(1L, sysconf(_SC_NPROCESSORS_ONLN));
}

// The thread count this run will use: the global --threads option, else OMP_NUM_THREADS.
int threads_asked(char** argv, int cores) {
  for (int i = 1; argv[i]; ++i) {
    const char* a = argv[i];
    if (!std::strcmp(a, "--threads") && argv[i + 1]) return std::atoi(argv[i + 1]) > 0 ? std::atoi(argv[i + 1]) : cores;
    if (!std::strncmp(a, "--threads=", 10)) return std::atoi(a + 10) > 0 ? std::atoi(a + 10) : cores;
  }
  if (const char* env = std::getenv("OMP_NUM_THREADS"); env && std::atoi(env) > 0) return std::atoi(env);
  return cores;
}

}  // namespace

bool spin_fits(int threads, int others, int cores) { return threads > 1 && threads + others <= cores; }

void choose_omp_wait_policy(char** argv) {
  if (std::getenv("OMP_WAIT_POLICY") || std::getenv("GOMP_SPINCOUNT")) return;
  const int cores = usable_cores();
  const int threads = threads_asked(argv, cores);
  const int others = others_running();
  const bool spin = spin_fits(threads, others, cores);
  if (spin)
    setenv("GOMP_SPINCOUNT", kSpinCount, 1);
  else
    setenv("OMP_WAIT_POLICY", "PASSIVE", 1);
  const std::string why = std::string(spin ? "spin" : "passive") + ": " + std::to_string(threads) + " threads, " +
                          std::to_string(others) + " other running, " + std::to_string(cores) + " cores";
  setenv("GMLP_OMP_WAIT", why.c_str(), 1);
  execv("/proc/self/exe", argv);
}

std::string omp_wait_choice() {
  const char* c = std::getenv("GMLP_OMP_WAIT");
  return c ? c : "";
}

void set_threads(int n) {
  if (n <= 0) return;
  omp_set_num_threads(n);
  openblas_set_num_threads(n);
}

}  // namespace gmlp
