// The cached decoder's one-token work (ops.h, decode.cpp): plain loops over a few rows,
// threaded only where a matrix is large enough to repay waking the team (parallel.h).
#include <algorithm>
#include <cmath>
#include <vector>

#include "ops/ops.h"
#include "ops/parallel.h"

namespace gmlp::ops {
namespace {

// F[c] = bias + sum_{j < rows} w[j] G[j, c] for c < cols: the cached gates (rows ldg
// apart) weighted by row i of W. One head's channel group is a column slice of G.
void mix_history(const float* G, int ldg, int rows, int cols, const float* w, float bias, float* F) {
  const auto chunk = [&](int k) {  // columns [64 k, 64 k + 64)
    const int c0 = 64 * k, c1 = std::min(cols, c0 + 64);
    for (int c = c0; c < c1; ++c) F[c] = bias;
    for (int j = 0; j < rows; ++j) {
      const float wj = w[j];
      const float* g = G + size_t(j) * ldg;
#pragma omp simd
      for (int c = c0; c < c1; ++c) F[c] += wj * g[c];
    }
  };
  parallel_for_if((cols + 63) / 64, int64_t(rows) * cols, kParallelMacs, chunk);
}

}  // namespace

void decode_embed(const float* E, int d, const int32_t* tokens, const int32_t* pos, int R, const float* pe,
                  float* x) {
  for (int r = 0; r < R; ++r) {
    const float* e = E + size_t(tokens[r]) * d;
    float* xr = x + size_t(r) * d;
    for (int c = 0; c < d; ++c) xr[c] = e[c] + (pe ? pe[size_t(pos[r]) * d + c] : 0.f);
  }
}

// Each weight row is read once for every row of X, and each dot product is summed in
// the same order whatever R is.
void decode_linear(const float* W, int out, int in, const float* X, int R, const float* b, float* Y,
                   bool accumulate) {
  if (products() != Products::fp32) {  // the rows as one product, rounded as training's are
    for (int r = 0; r < R; ++r) {
      float* y = Y + size_t(r) * out;
      for (int o = 0; o < out; ++o) y[o] = (accumulate ? y[o] : 0.f) + b[o];
    }
    gemm(false, true, R, out, in, 1.f, X, in, W, in, 1.f, Y, out);
    return;
  }
  const auto output = [&](int o) {
    const float* w = W + size_t(o) * in;
    for (int r = 0; r < R; ++r) {
      const float* x = X + size_t(r) * in;
      float acc = 0.f;
#pragma omp simd reduction(+ : acc)
      for (int i = 0; i < in; ++i) acc += w[i] * x[i];
      float& y = Y[size_t(r) * out + o];
      y = (accumulate ? y : 0.f) + b[o] + acc;
    }
  };
  parallel_for_if(out, int64_t(out) * in * R, kParallelMacs, output);
}

void decode_layernorm(const float* x, int ldx, int R, int C, const float* w, const float* b, float eps, float* y,
                      int ldy, const int32_t* rows) {
  for (int r = 0; r < R; ++r)
    layernorm_row(x + size_t(r) * ldx, C, w, b, eps, y + size_t(rows ? rows[r] : r) * ldy);
}

void decode_mix(const float* G, int n, int g, int heads, const float* W, int64_t wsz, bool toeplitz,
                const float* bias, const int32_t* stream, const int32_t* pos, int R, float* F) {
  const int gh = g / heads;
  thread_local std::vector<float> row;  // a Toeplitz head's row i, expanded
  if (toeplitz && row.size() < size_t(n)) row.resize(size_t(n));
  for (int r = 0; r < R; ++r) {
    const int i = pos[r];
    const float* Gs = G + size_t(stream[r]) * n * g;
    for (int k = 0; k < heads; ++k) {
      const float* wrow = row.data();
      if (toeplitz)
        toeplitz_row(W + k * wsz, n, true, i, i + 1, row.data());
      else
        wrow = W + k * wsz + size_t(i) * n;
      mix_history(Gs + k * gh, g, i + 1, gh, wrow, bias[size_t(k) * n + i], F + size_t(r) * g + k * gh);
    }
  }
}

void decode_attention(const AttnParams& p, const float* h, const int32_t* stream, const int32_t* pos, int R, int n,
                      float* qkv, float* P, float* O, float* A, float* F) {
  const int da = p.da, q3 = 3 * da;
  const float scale = 1.f / std::sqrt(float(da));
  for (int r = 0; r < R; ++r) {
    const int i = pos[r];
    const float* K = qkv + size_t(stream[r]) * n * q3;
    float* row = qkv + (size_t(stream[r]) * n + i) * q3;
    float* Pr = P + size_t(r) * n;
    float* Or = O + size_t(r) * da;
    float* Ar = A + size_t(r) * p.dout;
    decode_linear(p.qkv_w, q3, p.d, h + size_t(r) * p.d, 1, p.qkv_b, row, false);
    for (int j = 0; j <= i; ++j) {
      const float* k = K + size_t(j) * q3 + da;
      float acc = 0.f;
#pragma omp simd reduction(+ : acc)
      for (int c = 0; c < da; ++c) acc += row[c] * k[c];
      Pr[j] = scale * acc;
    }
    softmax_row(Pr, i + 1);
    std::fill(Or, Or + da, 0.f);
    for (int j = 0; j <= i; ++j) {
      const float pj = Pr[j];
      const float* v = K + size_t(j) * q3 + 2 * da;
#pragma omp simd
      for (int c = 0; c < da; ++c) Or[c] += pj * v[c];
    }
    decode_linear(p.out_w, p.dout, da, Or, 1, p.out_b, Ar, false);
    float* Fr = F + size_t(r) * p.dout;
    for (int c = 0; c < p.dout; ++c) Fr[c] += Ar[c];
  }
}

}  // namespace gmlp::ops
