#pragma once
// Thread setup shared by the gmlp program, the tests and the benchmarks.
#include <string>

namespace gmlp {

// How OpenMP's idle threads wait, chosen once per process (libgomp reads the policy when
// it loads, so this re-executes the program, argv as given, before any thread exists).
//
// A training step is dozens of parallel regions; on an idle machine, workers that spin
// between them are 1.3-1.6x faster than sleeping ones (wake-up latency). When another
// process holds a core, spinning workers take the time the working ones need and a step
// takes 2x longer than with sleeping ones. So: unless the user has set OMP_WAIT_POLICY or
// GOMP_SPINCOUNT, count the other processes running right now (the kernel's
// procs_running, sampled a few times over ~20 ms); if the threads asked for (--threads N,
// else OMP_NUM_THREADS, else all cores) fit on the cores they leave free, spin
// (GOMP_SPINCOUNT below), else wait passively. The choice and its reason are left in
// GMLP_OMP_WAIT for `gmlp bench` to report. Returns only if nothing was done or the
// re-exec failed.
//
// The count is what a run lives with when load arrives after it started. libgomp's
// default, 300,000 spins (milliseconds here), made a spinning run 1.4-1.7x slower than
// a passive one once another process took a core, and 2-3.6x with two; 10,000 spins
// keeps the idle speed (within 6% of 300,000 in bench/spin_sweep.py's rounds) and
// halves that loss (1.2-1.5x). Fewer spins cost idle speed: 3,000 was up to 16% slower.
// docs/bench.md, "How long to spin".
constexpr const char* kSpinCount = "10000";
void choose_omp_wait_policy(char** argv);
// The choice alone, for a process that cannot re-execute itself (the Python package
// calls it before the engine loads): sets the variables and returns true, or returns
// false when the user has set one. threads <= 0: OMP_NUM_THREADS, else all cores.
bool choose_omp_wait_env(int threads);

// What choose_omp_wait_policy decided in this process ("" if the user chose).
std::string omp_wait_choice();

// The pure rule, for tests: spin iff threads fit on the cores that other running
// processes leave free, and there is more than one thread to wait.
bool spin_fits(int threads, int others_running, int cores);

// Sets the thread count of OpenMP and of OpenBLAS (one pool: the OpenMP build of
// OpenBLAS runs on libgomp's threads). n <= 0 leaves the defaults.
void set_threads(int n);

}  // namespace gmlp
