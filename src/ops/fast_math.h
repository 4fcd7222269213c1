#pragma once
// Branch-free exp and erf that GCC vectorises inside `omp simd` loops. glibc's vector
// versions are only declared under -ffast-math, and the scalar libm calls made GELU
// about 30% of a training step. Accuracy: exp within 2 ulp over the float range used
// here; erf within 1.5e-7 absolute (Abramowitz & Stegun 7.1.26), far below the
// rounding noise of the GEMMs around it. The libm forms are the test oracle
// (tests/oracles.cpp) the fast path is compared against.
#include <cstdint>
#include <cstring>

#if defined(__CUDACC__)
#define GMLP_MATH_FN __host__ __device__ inline
#else
#define GMLP_MATH_FN inline
#endif

namespace gmlp::ops::fast {

// GELU's constants, shared by the fast path and the test oracle.
constexpr float kInvSqrt2 = 0.70710678118654752f;
constexpr float kInvSqrt2Pi = 0.39894228040143268f;
constexpr float kSqrt2OverPi = 0.79788456080286536f;
constexpr float kTanhCoef = 0.044715f;

#pragma omp declare simd
inline float exp(float x) {
  // Clamp to the range where 2^n stays a normal float; exp(-87) is ~1e-38.
  x = x < -87.f ? -87.f : (x > 88.f ? 88.f : x);
  // Round to nearest by adding and subtracting 1.5 * 2^23 (|x log2 e| < 2^22 here):
  // roundf would be a libm call, which stops the loop from vectorising.
  constexpr float kShift = 12582912.f;
  const float n = (x * 1.44269504088896341f + kShift) - kShift;
  // r = x - n ln2 in two parts (Cody-Waite) to keep r exact to float precision.
  const float r = (x - n * 0.693359375f) + n * 2.12194440e-4f;
  // exp(r) for |r| <= ln2/2, degree-6 Taylor: error < 2e-8 relative.
  float p = 1.f / 720.f;
  p = p * r + 1.f / 120.f;
  p = p * r + 1.f / 24.f;
  p = p * r + 1.f / 6.f;
  p = p * r + 0.5f;
  p = p * r + 1.f;
  p = p * r + 1.f;
  const int32_t bits = (int32_t(n) + 127) << 23;
  float scale;
  std::memcpy(&scale, &bits, sizeof scale);
  return p * scale;
}

// Abramowitz & Stegun 7.1.26: erf(a) = 1 - erf_tail(t, e) for a >= 0, with
// t = 1 / (1 + kErfT a) and e = exp(-a * a). The CUDA backend takes the same series,
// with the GPU's own reciprocal and exponential (ops/cuda/gelu.cuh).
constexpr float kErfT = 0.3275911f;
#pragma omp declare simd
GMLP_MATH_FN float erf_tail(float t, float e) {
  float p = 1.061405429f;
  p = p * t - 1.453152027f;
  p = p * t + 1.421413741f;
  p = p * t - 0.284496736f;
  p = p * t + 0.254829592f;
  return p * t * e;
}

// erf(x) given e = exp(-x * x), which GELU's backward also needs for the normal
// density: it computes the exponential once for both.
#pragma omp declare simd
inline float erf_given_exp(float x, float e) {
  // fabs, not a select: GCC turned the select into the whole polynomial (and its
  // division) computed for both signs.
  const float a = __builtin_fabsf(x);
  const float t = 1.f / (1.f + kErfT * a);
  const float y = 1.f - erf_tail(t, e);
  return x < 0.f ? -y : y;
}

#pragma omp declare simd
inline float erf(float x) { return erf_given_exp(x, exp(-x * x)); }

#pragma omp declare simd
inline float tanh(float x) {
  // 1 - 2 / (exp(2x) + 1): exact limits at +-inf through the clamped exp.
  return 1.f - 2.f / (exp(2.f * x) + 1.f);
}

// GELU on one value: exact (x * Phi(x)) and PyTorch's tanh approximation. Every fast
// GELU loop (the op, the fused bias+GELU, the decoder's step) calls these.
#pragma omp declare simd
inline float gelu_erf(float x) { return 0.5f * x * (1.f + erf(x * kInvSqrt2)); }

#pragma omp declare simd
inline float gelu_tanh(float x) {
  return 0.5f * x * (1.f + tanh(kSqrt2OverPi * (x + kTanhCoef * x * x * x)));
}

// GELU and its derivative from one exponential (and one erf): the SGU's backward needs
// both for every value (sgu.cpp), and the exponential and erf are most of the cost. The
// value is the same expression, so the same bits, as gelu_erf / gelu_tanh above.
struct GeluAndGrad {
  float y, dy;
};

inline GeluAndGrad gelu_erf_and_grad(float v) {
  const float u = v * kInvSqrt2;
  const float e = exp(-u * u);  // exp(-v^2 / 2): erf's and the density's
  const float erf_u = erf_given_exp(u, e);
  return {0.5f * v * (1.f + erf_u), 0.5f * (1.f + erf_u) + v * (kInvSqrt2Pi * e)};
}

inline GeluAndGrad gelu_tanh_and_grad(float v) {
  // With e = exp(2u): tanh u = 1 - 2/(e+1) and 1 - tanh^2 u = 4e/(e+1)^2; the latter
  // avoids the cancellation of 1 - t*t in the tails.
  const float e = exp(2.f * kSqrt2OverPi * (v + kTanhCoef * v * v * v));
  const float inv = 1.f / (e + 1.f);
  const float t = 1.f - 2.f * inv;
  const float dt = 4.f * (e * inv) * inv * kSqrt2OverPi * (1.f + 3.f * kTanhCoef * v * v);
  return {0.5f * v * (1.f + t), 0.5f * (1.f + t) + 0.5f * v * dt};
}

// The derivatives alone (GELU's backward); the unused value is dropped when inlined.
#pragma omp declare simd
inline float gelu_erf_grad(float v) { return gelu_erf_and_grad(v).dy; }

#pragma omp declare simd
inline float gelu_tanh_grad(float v) { return gelu_tanh_and_grad(v).dy; }

}  // namespace gmlp::ops::fast
