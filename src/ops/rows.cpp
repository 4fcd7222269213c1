// Row-wise glue of the block and the heads: the residual seeded with a bias, the
// stochastic-depth residual, mean pooling over real tokens, and row selection for the
// sparse masked-LM head.
#include <algorithm>

#include "ops/ops.h"

namespace gmlp::ops {

void residual_bias(const float* x, const float* b, int M, int d, float* out) {
#pragma omp parallel for schedule(static)
  for (int r = 0; r < M; ++r)
    for (int ch = 0; ch < d; ++ch) out[size_t(r) * d + ch] = x[size_t(r) * d + ch] + b[ch];
}

void residual_keep(const float* x, const float* keep, const float* h, int M, int B, int d, float* out) {
#pragma omp parallel for schedule(static)
  for (int r = 0; r < M; ++r)
    for (int ch = 0; ch < d; ++ch) out[size_t(r) * d + ch] = x[size_t(r) * d + ch] + keep[r % B] * h[size_t(r) * d + ch];
}

void scale_rows(const float* keep, const float* dx, int M, int B, int d, float* out) {
#pragma omp parallel for schedule(static)
  for (int r = 0; r < M; ++r)
    for (int ch = 0; ch < d; ++ch) out[size_t(r) * d + ch] = keep[r % B] * dx[size_t(r) * d + ch];
}

void mean_pool_forward(const float* h, int T, int B, int d, const int32_t* lengths, float* pooled) {
  std::fill(pooled, pooled + size_t(B) * d, 0.f);
  for (int b = 0; b < B; ++b) {
    const int len = lengths ? lengths[b] : T;
    float* pb = pooled + size_t(b) * d;
    for (int t = 0; t < len; ++t) {
      const float* hr = h + (size_t(t) * B + b) * d;
      for (int c = 0; c < d; ++c) pb[c] += hr[c];
    }
    for (int c = 0; c < d; ++c) pb[c] /= float(len);
  }
}

void mean_pool_backward(const float* dpooled, int T, int B, int d, const int32_t* lengths, float* dh) {
#pragma omp parallel for schedule(static)
  for (int t = 0; t < T; ++t)
    for (int b = 0; b < B; ++b) {
      const int len = lengths ? lengths[b] : T;
      float* dr = dh + (size_t(t) * B + b) * d;
      for (int c = 0; c < d; ++c) dr[c] = t < len ? dpooled[size_t(b) * d + c] / float(len) : 0.f;
    }
}

void gather_rows(const float* src, const int32_t* rows, int K, int d, float* dst) {
  for (int k = 0; k < K; ++k)
    std::copy(src + size_t(rows[k]) * d, src + size_t(rows[k] + 1) * d, dst + size_t(k) * d);
}

void scatter_rows(const float* src, const int32_t* rows, int K, int M, int d, float* dst) {
  std::fill(dst, dst + size_t(M) * d, 0.f);
  for (int k = 0; k < K; ++k) std::copy(src + size_t(k) * d, src + size_t(k + 1) * d, dst + size_t(rows[k]) * d);
}

}  // namespace gmlp::ops
