// Dropout on the device (dropout.cpp): each mask value is computed from its counter as
// the kernel reads it (ops/dropout_mask.h), the same function the CPU runs, so a GPU
// run drops what a CPU run drops and nothing is drawn on the host or uploaded. A block
// takes a row: its threads share the row's key and walk its channels.
#include "ops/cuda/common.cuh"

namespace gmlp::cuda {
namespace {

constexpr int kRowThreads = 128;

// y = x * mask over B rows of d at position 0 (a classifier's pooled input).
__global__ void k_dropout_apply(const float* x, ops::DropMask mask, int d, float* y) {
  const int b = blockIdx.x;
  const uint64_t R = mask.row_key(b, 0);
  const int64_t base = int64_t(b) * d;
  for (int c = threadIdx.x; c < d; c += blockDim.x) y[base + c] = x[base + c] * mask.value(R, c);
}

// out = (x or 0) + keep[b] * mask * h over M = T * B rows of d (row r is batch row r % B
// at position r / B); x null gives the branch's backward.
__global__ void k_residual_dropout(const float* x, const float* h, const float* keep, ops::DropMask mask, int B, int d,
                                   float* out) {
  const int r = blockIdx.x, b = r % B;
  const float k = keep ? keep[b] : 1.f;
  const uint64_t R = mask.active() ? mask.row_key(b, r / B) : 0;
  const int64_t base = int64_t(r) * d;
  for (int c = threadIdx.x; c < d; c += blockDim.x) {
    const float m = mask.active() ? mask.value(R, c) : 1.f;
    const float v = k * m * h[base + c];
    out[base + c] = x ? x[base + c] + v : v;
  }
}

}  // namespace

void dropout_apply(const float* x, const ops::DropMask& mask, int B, int d, float* y) {
  if (B <= 0 || d <= 0) return;
  GMLP_LAUNCH(k_dropout_apply, unsigned(B), kRowThreads)(x, mask, d, y);
  check_launch("dropout");
}

void residual_dropout(const float* x, const float* h, const float* keep, const ops::DropMask& mask, int M, int B,
                      int d, float* out) {
  if (M <= 0 || d <= 0) return;
  GMLP_LAUNCH(k_residual_dropout, unsigned(M), kRowThreads)(x, h, keep, mask, B, d, out);
  check_launch("residual dropout");
}

void residual_dropout_backward(const float* dout, const float* keep, const ops::DropMask& mask, int M, int B, int d,
                               float* dh) {
  if (M <= 0 || d <= 0) return;
  GMLP_LAUNCH(k_residual_dropout, unsigned(M), kRowThreads)(nullptr, dout, keep, mask, B, d, dh);
  check_launch("residual dropout backward");
}

}  // namespace gmlp::cuda
