// Dropout as an op: the mask is computed where it is read, from its counter
// (dropout_mask.h), never stored. A mask entry is 0 or 1/(1 - p).
//
// The block's residual branch carries both regularisers: stochastic depth's per-row
// keep[b] and dropout's per-element mask, so x' = x + keep[b] * mask[r, c] * y, written
// once here for the forward and once for the backward.
#include "ops/ops.h"

namespace gmlp::ops {

// The loops read the mask's threshold and scale from locals: read through the mask, they
// could change with every store to the output, and the loops would not vectorise.
void dropout_apply(const float* x, const DropMask& mask, int B, int d, float* y) {
#pragma omp parallel for schedule(static)
  for (int b = 0; b < B; ++b) {
    const uint64_t R = mask.row_key(b, 0);
    const uint32_t threshold = mask.threshold;
    const float scale = mask.scale;
    const float* xr = x + int64_t(b) * d;
    float* yr = y + int64_t(b) * d;
    for (int c = 0; c < d; ++c) yr[c] = xr[c] * drop_value(R, c, threshold, scale);
  }
}

// out[r, c] = base[r, c] + keep[r % B] * mask(r % B, r / B, c) * y[r, c], base null = 0.
static void residual_rows(const float* base, const float* y, const float* keep, const DropMask& mask, int M, int B,
                          int d, float* out) {
#pragma omp parallel for schedule(static)
  for (int r = 0; r < M; ++r) {
    const float k = keep ? keep[r % B] : 1.f;
    const float* yr = y + int64_t(r) * d;
    float* orow = out + int64_t(r) * d;
    if (mask.active()) {
      const uint64_t R = mask.row_key(r % B, r / B);
      const uint32_t threshold = mask.threshold;
      const float scale = mask.scale;
      if (base) {
        const float* xr = base + int64_t(r) * d;
        for (int c = 0; c < d; ++c) orow[c] = xr[c] + k * drop_value(R, c, threshold, scale) * yr[c];
      } else {
        for (int c = 0; c < d; ++c) orow[c] = k * drop_value(R, c, threshold, scale) * yr[c];
      }
    } else if (base) {
      const float* xr = base + int64_t(r) * d;
      for (int c = 0; c < d; ++c) orow[c] = xr[c] + k * yr[c];
    } else {
      for (int c = 0; c < d; ++c) orow[c] = k * yr[c];
    }
  }
}

void residual_add(const float* x, const float* y, const float* keep, const DropMask& mask, int M, int B, int d,
                  float* out) {
  residual_rows(x, y, keep, mask, M, B, d, out);
}

void residual_branch_backward(const float* dout, const float* keep, const DropMask& mask, int M, int B, int d,
                              float* dy) {
  residual_rows(nullptr, dout, keep, mask, M, B, d, dy);
}

}  // namespace gmlp::ops
