// The spatial gating unit and its s(Z) ablations (docs/variants.md):
//   G = LayerNorm(gate), F = spatial(G) + b (+ extra), S = combine(Z, F)
// with gate = Z2 and S = Z1 * F for the split form, gate = Z for the others.
// Several heads mix their own channel groups with their own W and b; padded rows of
// a bidirectional batch are zeroed in G (the columns of W they would feed are masked).
#include <algorithm>
#include <vector>

#include "ops/ops.h"
#include "ops/parallel.h"
#include "ops/reduce.h"

namespace gmlp::ops {
namespace {

struct Dims {
  int g, goff;  // gate channels and their offset inside Z
  int gh;       // channels per head
};
Dims dims(const SguParams& p, int f) {
  const int g = p.kind == Sgu::split ? f / 2 : f;
  return {g, p.kind == Sgu::split ? f / 2 : 0, g / p.heads};
}

// Zeroes rows t >= lengths[b] of X [T, B, C] (no-op without lengths).
void zero_padding(const int32_t* lengths, int T, int B, int C, float* X) {
  if (!lengths) return;
#pragma omp parallel for schedule(static)
  for (int t = 0; t < T; ++t)
    for (int b = 0; b < B; ++b)
      if (t >= lengths[b]) std::fill(X + (int64_t(t) * B + b) * C, X + (int64_t(t) * B + b + 1) * C, 0.f);
}

// Runs fn(W_k, dW_k (or null), column offset) for every head k and, with several heads,
// every batch row b: the head's [T, gh] slice of one row is a strided matrix.
template <typename Fn>
void for_each_slice(const SguParams& p, float* dW, int B, const Dims& d, Fn fn) {
  if (p.heads == 1) {
    fn(p.W, dW, 0, B * d.g);
    return;
  }
  for (int k = 0; k < p.heads; ++k)
    for (int b = 0; b < B; ++b)
      fn(p.W + k * p.w_head_stride, dW ? dW + k * p.w_head_stride : nullptr, b * d.g + k * d.gh, d.gh);
}

}  // namespace

void sgu_forward(const SguParams& p, const float* Z, int T, int B, int f, float* S, float* gmean, float* grstd,
                 float* F, float* G, const float* extra) {
  const Dims d = dims(p, f);
  const int M = T * B, ld = B * d.g;
  layernorm_forward(Z + d.goff, f, M, d.g, p.norm_w, p.norm_b, p.eps, G, d.g, gmean, grstd);
  zero_padding(p.lengths, T, B, d.g, G);
  // Rows are t-major, so G is a [T, B*g] matrix and one head's mixing is one product.
  for_each_slice(p, nullptr, B, d, [&](const float* W, float*, int off, int cols) {
    spatial_mix_forward(W, p.ldw, p.causal, T, cols, G + off, ld, F + off);
  });
#pragma omp parallel for schedule(static)
  for (int r = 0; r < M; ++r) {
    const int t = r / B, bi = std::min(t, p.n - 1);  // Toeplitz runs past n on the last bias
    const float* z = Z + int64_t(r) * f;
    float* fr = F + int64_t(r) * d.g;
    float* s = S + int64_t(r) * d.g;
    for (int k = 0; k < p.heads; ++k) {  // per head: one bias, no division per channel
      const float bk = p.bias[k * p.n + bi];
      float* fk = fr + k * d.gh;
      if (extra) {
        const float* ek = extra + int64_t(r) * d.g + k * d.gh;
#pragma omp simd
        for (int c = 0; c < d.gh; ++c) fk[c] += bk + ek[c];
      } else {
#pragma omp simd
        for (int c = 0; c < d.gh; ++c) fk[c] += bk;
      }
    }
    sgu_combine_row(p.kind, z, fr, s, d.g);
  }
}

void sgu_combine(Sgu kind, const float* Z, int ldz, const float* F, int M, int g, float* S) {
  // A few rows (the cached decoder's) stay off the OpenMP runtime (parallel.h).
  parallel_for_if(M, int64_t(M) * g, kParallelValues, [&](int r) {
    sgu_combine_row(kind, Z + int64_t(r) * ldz, F + int64_t(r) * g, S + int64_t(r) * g, g);
  });
}

void sgu_backward(const SguParams& p, const SguGrads& g, const float* dS, const float* Z, int T, int B, int f,
                  const float* gmean, const float* grstd, const float* F, float* dZ, float* G, float* dF,
                  float* dG) {
  const Dims d = dims(p, f);
  const int M = T * B, ld = B * d.g;
  const bool split = p.kind == Sgu::split;
#pragma omp parallel for schedule(static)
  for (int r = 0; r < M; ++r) {
    const float* z = Z + int64_t(r) * f;
    const float* fr = F + int64_t(r) * d.g;
    const float* ds = dS + int64_t(r) * d.g;
    float* dz = dZ + int64_t(r) * f;
    float* df = dF + int64_t(r) * d.g;
    if (p.kind == Sgu::split || p.kind == Sgu::multiplicative) {
      for (int c = 0; c < d.g; ++c) df[c] = ds[c] * z[c];
    } else {
      for (int c = 0; c < d.g; ++c) df[c] = ds[c];
    }
    // Split: Z1 is not the gate, so dZ1 can be written now (over Z1 when dZ aliases Z).
    if (split)
      for (int c = 0; c < d.g; ++c) dz[c] = ds[c] * fr[c];
  }
  // The normalised gate was not kept: recompute it from the gate (cheaper than storing it).
  layernorm_apply(Z + d.goff, f, M, d.g, p.norm_w, p.norm_b, gmean, grstd, G, d.g);
  zero_padding(p.lengths, T, B, d.g, G);
  for_each_slice(p, g.W, B, d, [&](const float* W, float* dW, int off, int cols) {
    spatial_mix_backward(W, p.ldw, p.causal, T, cols, G + off, dF + off, ld, dG + off, dW);
  });
  zero_padding(p.lengths, T, B, d.g, dG);  // the mask's own derivative
  // Bias: per head and row, summed over a fixed order; rows past n share the last bias.
  std::vector<double> rows(size_t(T) * p.heads);
#pragma omp parallel for schedule(static)
  for (int t = 0; t < T; ++t)
    for (int b = 0; b < B; ++b) {
      const float* df = dF + (int64_t(t) * B + b) * d.g;
      for (int k = 0; k < p.heads; ++k)
        rows[size_t(t) * p.heads + k] += lane_sum<double>(d.gh, [df, k, &d](int c) { return df[k * d.gh + c]; });
    }
  for (int t = 0; t < T; ++t)
    for (int k = 0; k < p.heads; ++k) g.bias[k * p.n + std::min(t, p.n - 1)] += float(rows[size_t(t) * p.heads + k]);
  // LayerNorm backward into the gate's part of dZ (reading each element of the gate
  // before writing it, so dZ may alias Z). For the non-split forms the gate is all of
  // Z, and the direct path of S = Z + F or Z * F is added afterwards.
  layernorm_backward(dG, d.g, Z + d.goff, f, gmean, grstd, p.norm_w, M, d.g, dZ + d.goff, f, false, g.norm_w,
                     g.norm_b);
  if (p.kind == Sgu::additive || p.kind == Sgu::multiplicative) {
    const bool mult = p.kind == Sgu::multiplicative;
#pragma omp parallel for schedule(static)
    for (int r = 0; r < M; ++r) {
      const float* ds = dS + int64_t(r) * d.g;
      const float* fr = F + int64_t(r) * d.g;
      float* dz = dZ + int64_t(r) * f;
      for (int c = 0; c < d.g; ++c) dz[c] += mult ? ds[c] * fr[c] : ds[c];
    }
  }
}

}  // namespace gmlp::ops
