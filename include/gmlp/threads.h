#pragma once
// Thread setup shared by the gmlp program, the tests and the benchmarks.

namespace gmlp {

// libgomp's default lets idle threads spin before sleeping. On small virtual machines a
// spinning vCPU is descheduled by the hypervisor and a training step of the default
// model took 1.1 s instead of 0.13 s. libgomp reads the policy once, when it loads, so
// when the user has chosen none this sets OMP_WAIT_POLICY=PASSIVE and re-executes the
// program (argv as given) before any thread exists. Returns only if nothing was done
// or the re-exec failed.
void reexec_with_passive_omp_wait(char** argv);

// Sets the thread count of OpenMP and of OpenBLAS (one pool: the OpenMP build of
// OpenBLAS runs on libgomp's threads). n <= 0 leaves the defaults.
void set_threads(int n);

}  // namespace gmlp
