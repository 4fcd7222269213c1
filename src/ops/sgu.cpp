// The spatial gating unit, split form: S = Z1 * (tril(W) LayerNorm(Z2) + b).
#include "ops/ops.h"

namespace gmlp::ops {

void sgu_forward(const SguParams& p, const float* Z, int T, int B, int dh, float* S, float* gmean, float* grstd,
                 float* F, float* G) {
  const int M = T * B, dz = 2 * dh;
  layernorm_forward(Z + dh, dz, M, dh, p.norm_w, p.norm_b, p.eps, G, dh, gmean, grstd);
  // Rows are t-major, so G is a [T, B*dh] matrix and the token mixing is one product.
  spatial_causal_forward(p.spatial_w, p.n, p.spatial_b, T, int64_t(B) * dh, G, F);
#pragma omp parallel for schedule(static)
  for (int r = 0; r < M; ++r) {
    const float* z1 = Z + int64_t(r) * dz;
    const float* f = F + int64_t(r) * dh;
    float* s = S + int64_t(r) * dh;
    for (int c = 0; c < dh; ++c) s[c] = z1[c] * f[c];
  }
}

void sgu_backward(const SguParams& p, const SguGrads& g, const float* dS, const float* Z, int T, int B, int dh,
                  const float* gmean, const float* grstd, const float* F, float* dZ, float* G, float* dF,
                  float* dG) {
  const int M = T * B, dz = 2 * dh;
#pragma omp parallel for schedule(static)
  for (int r = 0; r < M; ++r) {
    const float* z1 = Z + int64_t(r) * dz;
    const float* f = F + int64_t(r) * dh;
    const float* ds = dS + int64_t(r) * dh;
    float* dz1 = dZ + int64_t(r) * dz;
    float* df = dF + int64_t(r) * dh;
    for (int c = 0; c < dh; ++c) {
      df[c] = ds[c] * z1[c];  // read z1 before dz1 overwrites it (dZ may alias Z)
      dz1[c] = ds[c] * f[c];
    }
  }
  // The normalised gate was not kept: recompute it from Z2 (cheaper than storing it).
  // From here dS is dead (dG may reuse it) and Z2 is read only by the LayerNorm
  // backward, which writes each element of dZ2 after reading the same element of Z2.
  layernorm_apply(Z + dh, dz, M, dh, p.norm_w, p.norm_b, gmean, grstd, G, dh);
  spatial_causal_backward(p.spatial_w, p.n, T, int64_t(B) * dh, G, dF, dG, g.spatial_w, g.spatial_b);
  layernorm_backward(dG, dh, Z + dh, dz, gmean, grstd, p.norm_w, M, dh, dZ + dh, dz, false, g.norm_w, g.norm_b);
}

}  // namespace gmlp::ops
