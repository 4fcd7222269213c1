// Dropout as an op: the mask is an input (drawn by the trainer from its RNG, so a resumed
// run draws the same masks), never drawn here. A mask entry is 0 or 1/(1 - p).
//
// The block's residual branch carries both regularisers: stochastic depth's per-row
// keep[b] and dropout's per-element mask, so x' = x + keep[b] * mask[r, c] * y, written
// once here for the forward and once for the backward.
#include "ops/ops.h"

namespace gmlp::ops {

void dropout_apply(const float* x, const float* mask, int64_t n, float* y) {
#pragma omp parallel for simd schedule(static)
  for (int64_t i = 0; i < n; ++i) y[i] = x[i] * mask[i];
}

void residual_add(const float* x, const float* y, const float* keep, const float* mask, int M, int B, int d,
                  float* out) {
#pragma omp parallel for schedule(static)
  for (int r = 0; r < M; ++r) {
    const float k = keep ? keep[r % B] : 1.f;
    const float* xr = x + int64_t(r) * d;
    const float* yr = y + int64_t(r) * d;
    float* orow = out + int64_t(r) * d;
    if (mask) {
      const float* mr = mask + int64_t(r) * d;
      for (int c = 0; c < d; ++c) orow[c] = xr[c] + k * mr[c] * yr[c];
    } else {
      for (int c = 0; c < d; ++c) orow[c] = xr[c] + k * yr[c];
    }
  }
}

void residual_branch_backward(const float* dout, const float* keep, const float* mask, int M, int B, int d,
                              float* dy) {
#pragma omp parallel for schedule(static)
  for (int r = 0; r < M; ++r) {
    const float k = keep ? keep[r % B] : 1.f;
    const float* gr = dout + int64_t(r) * d;
    float* dr = dy + int64_t(r) * d;
    if (mask) {
      const float* mr = mask + int64_t(r) * d;
      for (int c = 0; c < d; ++c) dr[c] = k * mr[c] * gr[c];
    } else {
      for (int c = 0; c < d; ++c) dr[c] = k * gr[c];
    }
  }
}

}  // namespace gmlp::ops
