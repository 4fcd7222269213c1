#pragma once
// LayerNorm's backward over rows whose input and result the caller supplies: the
// generic op (layernorm.cpp) reads x and writes dx as they are; the SGU's gate
// (sgu.cpp) normalised GELU(U), which it recomputes per row, and folds GELU's
// derivative into the result, so neither Z nor dZ is ever stored.
#include <omp.h>

#include <vector>

#include "ops/reduce.h"

namespace gmlp::ops {

// x_row(r, buf) gives row r of x (C floats: its own, or computed into buf); put(r), called
// after it, gives a store for the row: store(c, d) takes d = dL/dx[r, c]. dw += sum dy *
// xhat and db += sum dy over the rows: each thread sums its rows into a private slice
// and the slices are added in thread order (deterministic for a fixed thread count).
template <typename XRow, typename Put>
void layernorm_backward_rows(const float* dy, int lddy, const float* mean, const float* rstd, const float* w, int M,
                             int C, float* dw, float* db, XRow x_row, Put put) {
  static thread_local std::vector<float> partial;
  const int nt = omp_get_max_threads();
  partial.assign(size_t(nt) * 2 * C, 0.f);
  float* part = partial.data();
#pragma omp parallel
  {
    float* pw = part + size_t(omp_get_thread_num()) * 2 * C;
    float* pb = pw + C;
    std::vector<float> buf(static_cast<size_t>(C));
#pragma omp for schedule(static)
    for (int r = 0; r < M; ++r) {
      const float* xr = x_row(r, buf.data());
      const float* dyr = dy + int64_t(r) * lddy;
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
      const auto store = put(r);
#pragma omp simd
      for (int c = 0; c < C; ++c) {
        const float xh = (xr[c] - mu) * rs;
        store(c, rs * (dyr[c] * w[c] - mg - xh * mgx));
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
