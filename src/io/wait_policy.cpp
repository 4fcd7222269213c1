// How OpenMP's idle threads wait (include/gmlp/threads.h). Kept apart from threads.cpp
// and free of OpenMP and BLAS, so that the Python package can run it (as gmlp._policy)
// before the engine's libraries load and read the environment.
#include <sched.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>
#include <thread>

#include "gmlp/threads.h"

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

}  // namespace

bool spin_fits(int threads, int others, int cores) { return threads > 1 && threads + others <= cores; }

bool choose_omp_wait_env(int threads) {
  if (std::getenv("OMP_WAIT_POLICY") || std::getenv("GOMP_SPINCOUNT")) return false;
  const int cores = usable_cores();
  if (threads <= 0) {
    const char* env = std::getenv("OMP_NUM_THREADS");
    threads = env && std::atoi(env) > 0 ? std::atoi(env) : cores;
  }
  const int others = others_running();
  const bool spin = spin_fits(threads, others, cores);
  if (spin)
    setenv("GOMP_SPINCOUNT", kSpinCount, 1);
  else
    setenv("OMP_WAIT_POLICY", "PASSIVE", 1);
  const std::string why = std::string(spin ? "spin" : "passive") + ": " + std::to_string(threads) + " threads, " +
                          std::to_string(others) + " other running, " + std::to_string(cores) + " cores";
  setenv("GMLP_OMP_WAIT", why.c_str(), 1);
  return true;
}

std::string omp_wait_choice() {
  const char* c = std::getenv("GMLP_OMP_WAIT");
  return c ? c : "";
}

}  // namespace gmlp
