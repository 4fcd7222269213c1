#pragma once
// A loop that goes to the OpenMP team only when its work repays it. Below that it runs
// on the calling thread outside any parallel region: even a region whose `if` clause is
// false builds a team of one, a few microseconds that were a tenth of a small model's
// generated token. (On `parallel for simd` an unqualified `if` would also turn off
// vectorisation when false.)
#include <cstdint>

namespace gmlp::ops {

// Values a pass of elementwise work needs before it is threaded.
constexpr int64_t kParallelValues = int64_t(1) << 16;
// Multiply-adds a product needs before it is threaded (with 2 threads, 17 small BLAS
// GEMVs per token took 0.8 ms against 0.06 ms on one thread).
constexpr int64_t kParallelMacs = int64_t(1) << 18;

// body(i) for i in [0, n), on the team (static schedule) when work >= threshold.
template <typename Body>
void parallel_for_if(int n, int64_t work, int64_t threshold, Body body) {
  if (work < threshold) {
    for (int i = 0; i < n; ++i) body(i);
    return;
  }
#pragma omp parallel for schedule(static)
  for (int i = 0; i < n; ++i) body(i);
}

}  // namespace gmlp::ops
