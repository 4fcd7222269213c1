#pragma once
// A parallel sum whose result depends only on the thread count, never on timing.
// OpenMP's reduction(+) combines the threads' partials in the order they finish, so
// with 3 or more threads the last bits of a loss or a gradient norm changed from run
// to run, and a resumed run could not reproduce an uninterrupted one.
#include <omp.h>

#include <cstdint>
#include <vector>

namespace gmlp::ops {

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

}  // namespace gmlp::ops
