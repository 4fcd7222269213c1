#pragma once
// Sums whose result depends on nothing but their input (and, for ordered_sum, the
// thread count): never on timing, never on the vector width of the machine.
#include <omp.h>

#include <cstdint>
#include <vector>

namespace gmlp::ops {

// Sum of term(c) for c in [0, n) in kSumLanes interleaved partials of type Acc (term c
// goes to lane c % kSumLanes), folded in halves at the end. A single accumulator is a
// chain of dependent adds that the compiler may not reorder (strict IEEE order): a row
// sum of LayerNorm over 128 channels cost ~4 cycles a value. The lanes are the
// algorithm's, not the vector unit's, so AVX2 and AVX-512 machines give the same bits.
constexpr int kSumLanes = 32;
template <typename Acc = float, typename Index, typename Term>
inline Acc lane_sum(Index n, Term term) {
  Acc acc[kSumLanes] = {};
  Index c = 0;
  for (; c + kSumLanes <= n; c += kSumLanes) {
#pragma omp simd
    for (int j = 0; j < kSumLanes; ++j) acc[j] += term(c + j);
  }
  for (int j = 0; c + j < n; ++j) acc[j] += term(c + j);
  for (int w = kSumLanes / 2; w > 0; w /= 2) {
#pragma omp simd
    for (int j = 0; j < w; ++j) acc[j] += acc[j + w];
  }
  return acc[0];
}

// A parallel sum whose result depends only on the thread count, never on timing.
// OpenMP's reduction(+) combines the threads' partials in the order they finish, so
// with 3 or more threads the last bits of a loss or a gradient norm changed from run
// to run, and a resumed run could not reproduce an uninterrupted one.
// Sum of term(i) for i in [0, n): each thread sums one fixed contiguous range (static
// schedule) and the partials are added in thread order.
template <typename Term>
double ordered_sum(int64_t n, Term term) {
  std::vector<double> partial(size_t(omp_get_max_threads()), 0.0);
#pragma omp parallel
  {
    double s = 0.0;
#pragma omp for schedule(static)
    for (int64_t i = 0; i < n; ++i) s += term(i);
    partial[size_t(omp_get_thread_num())] = s;
  }
  double total = 0.0;
  for (double p : partial) total += p;
  return total;
}

// The same, each thread's contiguous range summed by lane_sum<double> (thread t takes
// [n t / T, n (t+1) / T)): for long sums of cheap terms, where ordered_sum's one chain of
// dependent adds per thread is the bottleneck (clipping's sum of squares over the
// annotated model's 9.9 M gradients ran at 15 GB/s, 2.7 ms of a step).
template <typename Term>
double ordered_lane_sum(int64_t n, Term term) {
  std::vector<double> partial(size_t(omp_get_max_threads()), 0.0);
#pragma omp parallel
  {
    const int64_t nt = omp_get_num_threads(), t = omp_get_thread_num();
    const int64_t lo = n * t / nt, hi = n * (t + 1) / nt;
    partial[size_t(t)] = lane_sum<double>(hi - lo, [&](int64_t i) { return term(lo + i); });
  }
  double total = 0.0;
  for (double p : partial) total += p;
  return total;
}

}  // namespace gmlp::ops
