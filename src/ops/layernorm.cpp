// LayerNorm over channels. The backward recomputes x-hat from (x, mean, rstd) so the
// forward need not keep a normalised copy of every activation.
#include <omp.h>

#include <cmath>
#include <vector>

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

void layernorm_apply(const float* x, int ldx, int M, int C, const float* w, const float* b, const float* mean,
                     const float* rstd, float* y, int ldy) {
#pragma omp parallel for schedule(static)
  for (int r = 0; r < M; ++r) {
    const float* xr = x + int64_t(r) * ldx;
    float* yr = y + int64_t(r) * ldy;
    const float mu = mean[r], rs = rstd[r];
    for (int c = 0; c < C; ++c) yr[c] = (xr[c] - mu) * rs * w[c] + b[c];
  }
}

void layernorm_backward(const float* dy, int lddy, const float* x, int ldx, const float* mean, const float* rstd,
                        const float* w, int M, int C, float* dx, int lddx, bool accumulate_dx, float* dw,
                        float* db) {
  // dw and db are sums over rows: each thread sums its rows into a private slice of
  // `partial`, and the slices are added at the end (deterministic for a fixed thread count).
  static thread_local std::vector<float> partial;
  const int nt = omp_get_max_threads();
  partial.assign(size_t(nt) * 2 * C, 0.f);
  float* part = partial.data();
#pragma omp parallel
  {
    float* pw = part + size_t(omp_get_thread_num()) * 2 * C;
    float* pb = pw + C;
#pragma omp for schedule(static)
    for (int r = 0; r < M; ++r) {
      const float* xr = x + int64_t(r) * ldx;
      const float* dyr = dy + int64_t(r) * lddy;
      float* dxr = dx + int64_t(r) * lddx;
      const float mu = mean[r], rs = rstd[r];
      // g = dy * w = d loss / d xhat
      const float sum_g = lane_sum(C, [dyr, w](int c) { return dyr[c] * w[c]; });
      const float sum_gx = lane_sum(C, [=](int c) { return dyr[c] * w[c] * ((xr[c] - mu) * rs); });
#pragma omp simd
      for (int c = 0; c < C; ++c) {
        const float xh = (xr[c] - mu) * rs;
        pw[c] += dyr[c] * xh;
        pb[c] += dyr[c];
      }
      const float mg = sum_g / float(C), mgx = sum_gx / float(C);
#pragma omp simd
      for (int c = 0; c < C; ++c) {
        const float xh = (xr[c] - mu) * rs;
        const float d = rs * (dyr[c] * w[c] - mg - xh * mgx);
        dxr[c] = accumulate_dx ? dxr[c] + d : d;
      }
    }
  }
  for (int t = 0; t < nt; ++t) {
    const float* pw = part + size_t(t) * 2 * C;
    for (int c = 0; c < C; ++c) {
      dw[c] += pw[c];
      db[c] += pw[C + c];
    }
  }
}

}  // namespace gmlp::ops
