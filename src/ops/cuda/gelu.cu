// GELU on the device, exact (erf) or tanh-approximated, with the bias of the projection
// before it fused into the forward.
#include "ops/cuda/common.cuh"
#include "ops/fast_math.h"

namespace gmlp::cuda {
namespace {
using ops::fast::kInvSqrt2, ops::fast::kInvSqrt2Pi, ops::fast::kSqrt2OverPi, ops::fast::kTanhCoef;

__device__ inline float gelu(float x, bool t) {
  return t ? 0.5f * x * (1.f + tanhf(kSqrt2OverPi * (x + kTanhCoef * x * x * x)))
           : 0.5f * x * (1.f + erff(x * kInvSqrt2));
}

__device__ inline float gelu_grad(float v, bool t) {
  if (t) {
    const float th = tanhf(kSqrt2OverPi * (v + kTanhCoef * v * v * v));
    const float dt = (1.f - th * th) * kSqrt2OverPi * (1.f + 3.f * kTanhCoef * v * v);
    return 0.5f * (1.f + th) + 0.5f * v * dt;
  }
  return 0.5f * (1.f + erff(v * kInvSqrt2)) + v * kInvSqrt2Pi * expf(-0.5f * v * v);
}

__global__ void k_gelu(const float* x, float* y, int64_t n, bool t) {
  const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n) y[i] = gelu(x[i], t);
}

// y may be u (a forward without gradients): each thread writes u, then y, of its own value.
__global__ void k_bias_gelu(float* u, const float* b, int64_t total, int n, float* y, bool t) {
  const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= total) return;
  const float v = u[i] + b[i % n];
  u[i] = v;
  y[i] = gelu(v, t);
}

__global__ void k_gelu_backward(const float* x, const float* dy, float* dx, int64_t n, bool t) {
  const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n) dx[i] = dy[i] * gelu_grad(x[i], t);
}

}  // namespace

void gelu_forward(const float* x, float* y, int64_t n, bool tanh_approx) {
  if (n <= 0) return;
  k_gelu<<<blocks_for(n), kThreads>>>(x, y, n, tanh_approx);
  check_launch("gelu");
}

void bias_gelu_forward(float* u, const float* b, int M, int n, float* y, bool tanh_approx) {
  const int64_t total = int64_t(M) * n;
  if (total <= 0) return;
  k_bias_gelu<<<blocks_for(total), kThreads>>>(u, b, total, n, y, tanh_approx);
  check_launch("bias + gelu");
}

void gelu_backward(const float* x, const float* dy, float* dx, int64_t n, bool tanh_approx) {
  if (n <= 0) return;
  k_gelu_backward<<<blocks_for(n), kThreads>>>(x, dy, dx, n, tanh_approx);
  check_launch("gelu backward");
}

}  // namespace gmlp::cuda
