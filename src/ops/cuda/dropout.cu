// Dropout on the device (dropout.cpp): the masks are inputs, drawn by the trainer on the
// host from its RNG (so a GPU run draws the masks a CPU run draws) and uploaded with
// the batch; here they are only applied.
#include "ops/cuda/common.cuh"

namespace gmlp::cuda {
namespace {

__global__ void k_dropout_apply(const float* x, const float* mask, int64_t n, float* y) {
  const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n) y[i] = x[i] * mask[i];
}

// out = x + keep[b] * mask * h, over M = T * B rows of d (row r is batch row r % B).
__global__ void k_residual_dropout(const float* x, const float* h, const float* keep, const float* mask, int64_t n,
                                   int B, int d, float* out) {
  const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= n) return;
  const float k = keep ? keep[(i / d) % B] : 1.f;
  out[i] = x[i] + k * (mask ? mask[i] : 1.f) * h[i];
}

__global__ void k_residual_dropout_backward(const float* dout, const float* keep, const float* mask, int64_t n, int B,
                                            int d, float* dh) {
  const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= n) return;
  const float k = keep ? keep[(i / d) % B] : 1.f;
  dh[i] = k * (mask ? mask[i] : 1.f) * dout[i];
}

}  // namespace

void dropout_apply(const float* x, const float* mask, int64_t n, float* y) {
  if (n <= 0) return;
  k_dropout_apply<<<blocks_for(n), kThreads>>>(x, mask, n, y);
  check_launch("dropout");
}

void residual_dropout(const float* x, const float* h, const float* keep, const float* mask, int M, int B, int d,
                      float* out) {
  const int64_t n = int64_t(M) * d;
  if (n <= 0) return;
  k_residual_dropout<<<blocks_for(n), kThreads>>>(x, h, keep, mask, n, B, d, out);
  check_launch("residual dropout");
}

void residual_dropout_backward(const float* dout, const float* keep, const float* mask, int M, int B, int d,
                               float* dh) {
  const int64_t n = int64_t(M) * d;
  if (n <= 0) return;
  k_residual_dropout_backward<<<blocks_for(n), kThreads>>>(dout, keep, mask, n, B, d, dh);
  check_launch("residual dropout backward");
}

}  // namespace gmlp::cuda
