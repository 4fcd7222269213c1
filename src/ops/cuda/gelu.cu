// GELU on the device, exact (erf) or tanh-approximated, with the bias of the projection
// before it fused into the forward.
#include "ops/cuda/common.cuh"
#include "ops/cuda/gelu.cuh"

namespace gmlp::cuda {
namespace {

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
  GMLP_LAUNCH(k_gelu, blocks_for(n), kThreads)(x, y, n, tanh_approx);
  check_launch("gelu");
}

void bias_gelu_forward(float* u, const float* b, int M, int n, float* y, bool tanh_approx) {
  const int64_t total = int64_t(M) * n;
  if (total <= 0) return;
  GMLP_LAUNCH(k_bias_gelu, blocks_for(total), kThreads)(u, b, total, n, y, tanh_approx);
  check_launch("bias + gelu");
}

void gelu_backward(const float* x, const float* dy, float* dx, int64_t n, bool tanh_approx) {
  if (n <= 0) return;
  GMLP_LAUNCH(k_gelu_backward, blocks_for(n), kThreads)(x, dy, dx, n, tanh_approx);
  check_launch("gelu backward");
}

}  // namespace gmlp::cuda
