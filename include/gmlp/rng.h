#pragma once
// A small, portable, serialisable PRNG (PCG32). Its whole state is two integers,
// so a checkpoint can store it and a resumed run draws the same numbers.
#include <cmath>
#include <cstdint>

namespace gmlp {

class Rng {
 public:
  explicit Rng(uint64_t seed = 0x853c49e6748fea9bULL, uint64_t stream = 0xda3e39cb94b95bdbULL) {
    seed_with(seed, stream);
  }
  void seed_with(uint64_t seed, uint64_t stream) {
    state_ = 0;
    inc_ = (stream << 1u) | 1u;
    next_u32();
    state_ += seed;
    next_u32();
  }
  uint32_t next_u32() {
    uint64_t old = state_;
    state_ = old * 6364136223846793005ULL + inc_;
    uint32_t xorshifted = static_cast<uint32_t>(((old >> 18u) ^ old) >> 27u);
    uint32_t rot = static_cast<uint32_t>(old >> 59u);
    return (xorshifted >> rot) | (xorshifted << ((-rot) & 31));
  }
  uint64_t next_u64() { return (uint64_t(next_u32()) << 32) | next_u32(); }
  // Uniform in [0, 1) with 24 random bits (exactly representable as float).
  float uniform() { return float(next_u32() >> 8) * (1.0f / 16777216.0f); }
  float uniform(float lo, float hi) { return lo + (hi - lo) * uniform(); }
  // Uniform integer in [0, n), unbiased (rejection sampling).
  uint64_t below(uint64_t n) {
    if (n <= 1) return 0;
    uint64_t limit = UINT64_MAX - UINT64_MAX % n;
    uint64_t r;
    do r = next_u64(); while (r >= limit);
    return r % n;
  }
  // Standard normal by Box-Muller; no cached second value, so the state stays two words.
  float normal() {
    double u1 = (double(next_u32()) + 1.0) / 4294967296.0;  // (0, 1]
    double u2 = double(next_u32()) / 4294967296.0;
    return float(std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586 * u2));
  }
  // The logarithm of a Gamma(shape, 1) draw, by Marsaglia and Tsang's method in double (a
  // shape below 1 boosted to shape + 1 and scaled back by a uniform's power, added as
  // logarithms: a tiny shape's draws underflow a double, their logarithms do not).
  double log_gamma_draw(double shape) {
    if (shape < 1.0) {
      const double u = (double(next_u32()) + 1.0) / 4294967296.0;  // (0, 1]
      return log_gamma_draw(shape + 1.0) + std::log(u) / shape;
    }
    const double d = shape - 1.0 / 3.0, c = 1.0 / std::sqrt(9.0 * d);
    for (;;) {
      double x, v;
      do {
        x = normal();
        v = 1.0 + c * x;
      } while (v <= 0.0);
      v = v * v * v;
      const double u = (double(next_u32()) + 1.0) / 4294967296.0;
      if (std::log(u) < 0.5 * x * x + d - d * v + d * std::log(v)) return std::log(d * v);
    }
  }
  // Beta(a, b): X / (X + Y) of two Gamma draws, taken from their logarithms.
  double beta(double a, double b) {
    const double lx = log_gamma_draw(a), ly = log_gamma_draw(b);
    return 1.0 / (1.0 + std::exp(ly - lx));
  }
  uint64_t state() const { return state_; }
  uint64_t inc() const { return inc_; }
  void restore(uint64_t state, uint64_t inc) { state_ = state; inc_ = inc; }

 private:
  uint64_t state_ = 0, inc_ = 1;
};

}  // namespace gmlp
