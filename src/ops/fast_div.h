#pragma once
// n / d for a divisor known before a kernel runs, by a multiply and a shift (Granlund and
// Montgomery's method): the CUDA kernels' divisions of each value's row or channel by a
// runtime divisor (the SGU bias's position r / B and head c / gh, per value read) were
// some twenty instructions each, a third of the SGU gate pass's work.
#include <cstdint>

#if defined(__CUDACC__)
#define GMLP_DIV_FN __host__ __device__ inline
#else
#define GMLP_DIV_FN inline
#endif

namespace gmlp::ops {

struct FastDiv {
  uint32_t m = 1, s = 0, d = 1;  // n / 1 until set
  FastDiv() = default;
  // 1 <= d <= 2^31 (s, at most 31, shifts a 32-bit word). s = ceil(log2 d),
  // m = floor(2^32 (2^s - d) / d) + 1 (below 2^32).
  explicit FastDiv(uint32_t divisor) : d(divisor) {
    while ((uint64_t(1) << s) < d) ++s;
    m = uint32_t(((uint64_t(1) << 32) * ((uint64_t(1) << s) - d)) / d + 1);
  }
  // Exact for n < 2^31 (the high word of n m is below n, so the sum stays in 32 bits).
  GMLP_DIV_FN uint32_t div(uint32_t n) const { return (uint32_t((uint64_t(n) * m) >> 32) + n) >> s; }
  GMLP_DIV_FN uint32_t mod(uint32_t n) const { return n - div(n) * d; }
};

}  // namespace gmlp::ops
