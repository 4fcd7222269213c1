#pragma once
// GELU and its derivative on the device, exact (erf) or tanh-approximated: the GELU op
// (gelu.cu) and the SGU, which takes Z = GELU(U) as it reads U (sgu.cu), share them.
#include "ops/fast_math.h"
#include "ops/ops.h"

namespace gmlp::cuda {

__device__ inline float gelu(float x, bool t) {
  using ops::fast::kInvSqrt2, ops::fast::kSqrt2OverPi, ops::fast::kTanhCoef;
  return t ? 0.5f * x * (1.f + tanhf(kSqrt2OverPi * (x + kTanhCoef * x * x * x)))
           : 0.5f * x * (1.f + erff(x * kInvSqrt2));
}

__device__ inline float gelu_grad(float v, bool t) {
  using ops::fast::kInvSqrt2, ops::fast::kInvSqrt2Pi, ops::fast::kSqrt2OverPi, ops::fast::kTanhCoef;
  if (t) {
    // With e = exp(-2|u|) (at most 1: no overflow), 1 - tanh^2 u = 4e/(1 + e)^2 and
    // 1 + tanh u = 2/(1 + e) for u >= 0, 2e/(1 + e) below: 1 - th * th and 1 + th cancel
    // in the negative tail (v near -5 gave 0 for -5e-7), these do not.
    const float u = kSqrt2OverPi * (v + kTanhCoef * v * v * v);
    const float e = expf(-2.f * fabsf(u)), inv = 1.f / (1.f + e);
    const float one_plus_th = 2.f * (u < 0.f ? e : 1.f) * inv;
    const float dt = 4.f * e * inv * inv * kSqrt2OverPi * (1.f + 3.f * kTanhCoef * v * v);
    return 0.5f * one_plus_th + 0.5f * v * dt;
  }
  return 0.5f * (1.f + erff(v * kInvSqrt2)) + v * kInvSqrt2Pi * expf(-0.5f * v * v);
}

// GELU at v and its derivative together, the same values as gelu and gelu_grad apart
// but the exact form's erf taken once: the SGU's gate passes need both at each value,
// and nvcc inlined two erf evaluations there (their constants twice over in the PTX).
struct GeluGrad {
  float z, dz;
};
__device__ inline GeluGrad gelu_and_grad(float v, bool t) {
  using ops::fast::kInvSqrt2, ops::fast::kInvSqrt2Pi;
  if (t) return {gelu(v, true), gelu_grad(v, true)};
  const float e = erff(v * kInvSqrt2);
  return {0.5f * v * (1.f + e), 0.5f * (1.f + e) + v * kInvSqrt2Pi * expf(-0.5f * v * v)};
}

// Z's value from what an SGU op was given (ops.h's ZInput): z itself, or GELU(u).
__device__ inline float z_from(ops::ZInput zin, float u) { return zin.gelu ? gelu(u, zin.form == Gelu::tanh) : u; }

}  // namespace gmlp::cuda
