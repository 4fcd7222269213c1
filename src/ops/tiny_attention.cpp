// aMLP's tiny attention (docs/variants.md): one head of size da over the block's
// normalised input H [T*B, d], sequence-major.
//   [Q K V] = H Wqkv^T + bqkv;  P_b = softmax(Q_b K_b^T / sqrt(da) + mask);  A = (P V) Wo^T + bo
// Row b's Q, K and V are strided views (every B-th row of qkv), so each score matrix is
// one GEMM with no copies. Masked scores (future keys when causal, padded keys) get
// probability exactly 0.
#include <algorithm>
#include <cmath>
#include <limits>

#include "ops/ops.h"

namespace gmlp::ops {

void softmax_row(float* row, int keys) {
  float mx = -std::numeric_limits<float>::infinity();
  for (int j = 0; j < keys; ++j) mx = std::max(mx, row[j]);
  double sum = 0.0;
  for (int j = 0; j < keys; ++j) {
    row[j] = std::exp(row[j] - mx);
    sum += row[j];
  }
  const float inv = float(1.0 / sum);
  for (int j = 0; j < keys; ++j) row[j] *= inv;
}

void tiny_attention_forward(const AttnParams& p, const float* H, int T, int B, float* qkv, float* P, float* O,
                            float* A) {
  const int M = T * B, da = p.da, q3 = 3 * da;
  linear_forward(H, M, p.d, p.qkv_w, p.qkv_b, q3, qkv);
  const float scale = 1.f / std::sqrt(float(da));
  for (int b = 0; b < B; ++b) {
    const float* Q = qkv + int64_t(b) * q3;
    float* Pb = P + int64_t(b) * T * T;
    gemm(false, true, T, T, da, scale, Q, B * q3, Q + da, B * q3, 0.f, Pb, T);
    const int len = p.lengths ? p.lengths[b] : T;
#pragma omp parallel for schedule(static)
    for (int i = 0; i < T; ++i) {
      float* row = Pb + int64_t(i) * T;
      const int keys = p.causal ? std::min(i + 1, len) : len;
      softmax_row(row, keys);
      std::fill(row + keys, row + T, 0.f);
    }
    gemm(false, false, T, da, T, 1.f, Pb, T, Q + 2 * da, B * q3, 0.f, O + int64_t(b) * da, B * da);
  }
  linear_forward(O, M, da, p.out_w, p.out_b, p.dout, A);
}

void tiny_attention_backward(const AttnParams& p, const AttnGrads& g, const float* dA, const float* H, int T, int B,
                             const float* qkv, const float* P, const float* O, float* dH, float* dO, float* dP,
                             float* dqkv) {
  const int M = T * B, da = p.da, q3 = 3 * da;
  linear_backward(dA, O, M, da, p.out_w, p.dout, dO, false, g.out_w, g.out_b);
  const float scale = 1.f / std::sqrt(float(da));
  for (int b = 0; b < B; ++b) {
    const float* Q = qkv + int64_t(b) * q3;
    const float* Pb = P + int64_t(b) * T * T;
    const float* dOb = dO + int64_t(b) * da;
    float* dQ = dqkv + int64_t(b) * q3;
    // dV = P^T dO;  dP = dO V^T;  dS = P * (dP - rowsum(dP * P)) * scale.
    gemm(true, false, T, da, T, 1.f, Pb, T, dOb, B * da, 0.f, dQ + 2 * da, B * q3);
    gemm(false, true, T, T, da, 1.f, dOb, B * da, Q + 2 * da, B * q3, 0.f, dP, T);
#pragma omp parallel for schedule(static)
    for (int i = 0; i < T; ++i) {
      const float* pr = Pb + int64_t(i) * T;
      float* dr = dP + int64_t(i) * T;
      double dot = 0.0;
      for (int j = 0; j < T; ++j) dot += double(pr[j]) * dr[j];
      for (int j = 0; j < T; ++j) dr[j] = pr[j] * (dr[j] - float(dot)) * scale;
    }
    // dQ = dS K;  dK = dS^T Q.
    gemm(false, false, T, da, T, 1.f, dP, T, Q + da, B * q3, 0.f, dQ, B * q3);
    gemm(true, false, T, da, T, 1.f, dP, T, Q, B * q3, 0.f, dQ + da, B * q3);
  }
  linear_backward(dqkv, H, M, p.d, p.qkv_w, q3, dH, true, g.qkv_w, g.qkv_b);
}

}  // namespace gmlp::ops
