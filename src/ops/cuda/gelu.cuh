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
    const float th = tanhf(kSqrt2OverPi * (v + kTanhCoef * v * v * v));
    const float dt = (1.f - th * th) * kSqrt2OverPi * (1.f + 3.f * kTanhCoef * v * v);
    return 0.5f * (1.f + th) + 0.5f * v * dt;
  }
  return 0.5f * (1.f + erff(v * kInvSqrt2)) + v * kInvSqrt2Pi * expf(-0.5f * v * v);
}

// Z's value from what an SGU op was given (ops.h's ZInput): z itself, or GELU(u).
__device__ inline float z_from(ops::ZInput zin, float u) { return zin.gelu ? gelu(u, zin.form == Gelu::tanh) : u; }

}  // namespace gmlp::cuda
