#pragma once
// GELU and its derivative on the device, exact (erf) or tanh-approximated: the GELU op
// (gelu.cu) and the SGU, which takes Z = GELU(U) as it reads U (sgu.cu), share them.
#include "ops/fast_math.h"
#include "ops/ops.h"

namespace gmlp::cuda {

// erf(u) given e = exp(-u * u): the CPU engine's series (ops/fast_math.h, within
// 1.5e-7 of erf), its reciprocal and exponential the GPU's approximate ones (the
// special function unit's: __expf within 2 + 1.2|x| ulp, a few ulp wherever e is large
// enough to matter, well under the series' error). GELU and GELU' together take 22 PTX
// instructions so, where erff and expf took 53: the SGU's gate kernels are bound by
// the instructions they issue (about 130 a value on an H100, docs/bench-gpu.md), and
// their GELU and GELU' were the largest share.
__device__ inline float erf_given_exp(float u, float e) {
  return copysignf(1.f - ops::fast::erf_tail(__fdividef(1.f, 1.f + ops::fast::kErfT * fabsf(u)), e), u);
}

__device__ inline float gelu(float x, bool t) {
  using ops::fast::kInvSqrt2, ops::fast::kSqrt2OverPi, ops::fast::kTanhCoef;
  if (t) return 0.5f * x * (1.f + tanhf(kSqrt2OverPi * (x + kTanhCoef * x * x * x)));
  const float u = x * kInvSqrt2;
  return 0.5f * x * (1.f + erf_given_exp(u, __expf(-u * u)));
}

// GELU at v and its derivative together, the exact form's exponential taken once, for
// its erf and the normal density both.
struct GeluGrad {
  float z, dz;
};
__device__ inline GeluGrad gelu_and_grad(float v, bool t) {
  using ops::fast::kInvSqrt2, ops::fast::kInvSqrt2Pi, ops::fast::kSqrt2OverPi, ops::fast::kTanhCoef;
  if (t) {
    // With e = exp(-2|u|) (at most 1: no overflow), 1 - tanh^2 u = 4e/(1 + e)^2 and
    // 1 + tanh u = 2/(1 + e) for u >= 0, 2e/(1 + e) below: 1 - th * th and 1 + th cancel
    // in the negative tail (v near -5 gave 0 for -5e-7), these do not.
    const float u = kSqrt2OverPi * (v + kTanhCoef * v * v * v);
    const float e = expf(-2.f * fabsf(u)), inv = 1.f / (1.f + e);
    const float one_plus_th = 2.f * (u < 0.f ? e : 1.f) * inv;
    const float dt = 4.f * e * inv * inv * kSqrt2OverPi * (1.f + 3.f * kTanhCoef * v * v);
    return {gelu(v, true), 0.5f * one_plus_th + 0.5f * v * dt};
  }
  const float u = v * kInvSqrt2, e = __expf(-u * u), erf_u = erf_given_exp(u, e);
  return {0.5f * v * (1.f + erf_u), 0.5f * (1.f + erf_u) + v * (kInvSqrt2Pi * e)};
}

// The derivative alone (the unused value dropped when inlined).
__device__ inline float gelu_grad(float v, bool t) { return gelu_and_grad(v, t).dz; }

// Z's value from what an SGU op was given (ops.h's ZInput): z itself, or GELU(u).
__device__ inline float z_from(ops::ZInput zin, float u) { return zin.gelu ? gelu(u, zin.form == Gelu::tanh) : u; }

}  // namespace gmlp::cuda
