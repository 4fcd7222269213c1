// LayerNorm over channels. The backward recomputes x-hat from (x, mean, rstd) so the
// forward need not keep a normalised copy of every activation.
#include <cmath>

#include "ops/layernorm_rows.h"
#include "ops/ops.h"
#include "ops/reduce.h"

namespace gmlp::ops {

void layernorm_row(const float* x, int C, const float* w, const float* b, float eps, float* y, float* mean,
                   float* rstd) {
  const float mu = lane_sum(C, [x](int c) { return x[c]; }) / float(C);
  // Two passes: the one-pass E[x^2]-E[x]^2 loses precision on large means.
  const float v = lane_sum(C, [x, mu](int c) { return (x[c] - mu) * (x[c] - mu); });
  const float rs = 1.f / std::sqrt(v / float(C) + eps);
#pragma omp simd
  for (int c = 0; c < C; ++c) y[c] = (x[c] - mu) * rs * w[c] + b[c];
  if (mean) *mean = mu;
  if (rstd) *rstd = rs;
}

void layernorm_forward(const float* x, int ldx, int M, int C, const float* w, const float* b, float eps, float* y,
                       int ldy, float* mean, float* rstd) {
#pragma omp parallel for schedule(static)
  for (int r = 0; r < M; ++r)
    layernorm_row(x + int64_t(r) * ldx, C, w, b, eps, y + int64_t(r) * ldy, mean ? mean + r : nullptr,
                  rstd ? rstd + r : nullptr);
}

void layernorm_apply_row(const float* x, int C, const float* w, const float* b, float mean, float rstd, float* y) {
  for (int c = 0; c < C; ++c) y[c] = (x[c] - mean) * rstd * w[c] + b[c];
}

void layernorm_apply(const float* x, int ldx, int M, int C, const float* w, const float* b, const float* mean,
                     const float* rstd, float* y, int ldy) {
#pragma omp parallel for schedule(static)
  for (int r = 0; r < M; ++r) layernorm_apply_row(x + int64_t(r) * ldx, C, w, b, mean[r], rstd[r], y + int64_t(r) * ldy);
}

void layernorm_backward(const float* dy, int lddy, const float* x, int ldx, const float* mean, const float* rstd,
                        const float* w, int M, int C, float* dx, int lddx, bool accumulate_dx, float* dw,
                        float* db) {
  // Each row's x is read whole (the sums) before any of its dx is written, so dx may alias x.
  const auto x_row = [x, ldx](int r, float*) { return x + int64_t(r) * ldx; };
  if (accumulate_dx)
    layernorm_backward_rows(dy, lddy, mean, rstd, w, M, C, dw, db, x_row,
                            [dx, lddx](int r) { return [o = dx + int64_t(r) * lddx](int c, float d) { o[c] += d; }; });
  else
    layernorm_backward_rows(dy, lddy, mean, rstd, w, M, C, dw, db, x_row,
                            [dx, lddx](int r) { return [o = dx + int64_t(r) * lddx](int c, float d) { o[c] = d; }; });
}

}  // namespace gmlp::ops
