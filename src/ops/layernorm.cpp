// LayerNorm over channels. The backward recomputes x-hat from (x, mean, rstd) so the
// forward need not keep a normalised copy of every activation.
#include <omp.h>

#include <cmath>
#include <vector>

#include "ops/ops.h"

namespace gmlp::ops {

void layernorm_forward(const float* x, int ldx, int M, int C, const float* w, const float* b, float eps, float* y,
                       int ldy, float* mean, float* rstd) {
#pragma omp parallel for schedule(static)
  for (int r = 0; r < M; ++r) {
    const float* xr = x + int64_t(r) * ldx;
    float* yr = y + int64_t(r) * ldy;
    float s = 0.f;
    for (int c = 0; c < C; ++c) s += xr[c];
    const float mu = s / float(C);
    float v = 0.f;  // two passes: the one-pass E[x^2]-E[x]^2 loses precision on large means
    for (int c = 0; c < C; ++c) {
      const float d = xr[c] - mu;
      v += d * d;
    }
    const float rs = 1.f / std::sqrt(v / float(C) + eps);
    for (int c = 0; c < C; ++c) yr[c] = (xr[c] - mu) * rs * w[c] + b[c];
    if (mean) mean[r] = mu;
    if (rstd) rstd[r] = rs;
  }
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
      float sum_g = 0.f, sum_gx = 0.f;  // g = dy * w = d loss / d xhat
      for (int c = 0; c < C; ++c) {
        const float xh = (xr[c] - mu) * rs;
        const float g = dyr[c] * w[c];
        sum_g += g;
        sum_gx += g * xh;
        pw[c] += dyr[c] * xh;
        pb[c] += dyr[c];
      }
      const float mg = sum_g / float(C), mgx = sum_gx / float(C);
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
