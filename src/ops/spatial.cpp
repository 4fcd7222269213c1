// The causal spatial projection F = tril(W) G + b, the SGU's token mixing.
//
// W is [T, T] but only its lower triangle counts. Rows are cut into blocks of kBlock:
// for block [i0, i1) the part left of the diagonal is one GEMM over rows [0, i0) of G
// and the diagonal block is a triangular multiply (TRMM). No FLOP is spent on the
// masked half except inside the diagonal blocks of the dW product, where the strict
// upper part is computed and then cleared (kBlock^2 / 2 per block, small next to T^2).
#include <cblas.h>

#include <algorithm>
#include <cstring>

#include "ops/ops.h"

namespace gmlp::ops {
namespace {
constexpr int kBlock = 64;

void add_row_bias(const float* b, int T, int64_t cols, float* F) {
#pragma omp parallel for schedule(static)
  for (int i = 0; i < T; ++i) {
    float* Fi = F + int64_t(i) * cols;
    const float bi = b[i];
    for (int64_t c = 0; c < cols; ++c) Fi[c] += bi;
  }
}

void row_sums_into(const float* X, int T, int64_t cols, float* out) {
#pragma omp parallel for schedule(static)
  for (int i = 0; i < T; ++i) {
    const float* Xi = X + int64_t(i) * cols;
    double s = 0.0;
    for (int64_t c = 0; c < cols; ++c) s += Xi[c];
    out[i] += float(s);
  }
}
}  // namespace

void spatial_causal_forward(const float* W, int ldw, const float* b, int T, int64_t cols, const float* G, float* F) {
  const int nc = int(cols);
  for (int i0 = 0; i0 < T; i0 += kBlock) {
    const int i1 = std::min(T, i0 + kBlock), m = i1 - i0;
    float* Fb = F + int64_t(i0) * cols;
    std::memcpy(Fb, G + int64_t(i0) * cols, sizeof(float) * size_t(m) * size_t(cols));
    cblas_strmm(CblasRowMajor, CblasLeft, CblasLower, CblasNoTrans, CblasNonUnit, m, nc, 1.f,
                W + int64_t(i0) * ldw + i0, ldw, Fb, nc);
    if (i0 > 0) gemm(false, false, m, nc, i0, 1.f, W + int64_t(i0) * ldw, ldw, G, nc, 1.f, Fb, nc);
  }
  add_row_bias(b, T, cols, F);
}

void spatial_causal_backward(const float* W, int ldw, int T, int64_t cols, const float* G, const float* dF,
                             float* dG, float* dW, float* db) {
  const int nc = int(cols);
  for (int j0 = 0; j0 < T; j0 += kBlock) {
    const int j1 = std::min(T, j0 + kBlock), m = j1 - j0;
    float* dGb = dG + int64_t(j0) * cols;
    // dG[j] = sum_{i >= j} W[i, j] dF[i]: the diagonal block transposed, then the rows below it.
    std::memcpy(dGb, dF + int64_t(j0) * cols, sizeof(float) * size_t(m) * size_t(cols));
    cblas_strmm(CblasRowMajor, CblasLeft, CblasLower, CblasTrans, CblasNonUnit, m, nc, 1.f,
                W + int64_t(j0) * ldw + j0, ldw, dGb, nc);
    if (j1 < T)
      gemm(true, false, m, nc, T - j1, 1.f, W + int64_t(j1) * ldw + j0, ldw, dF + int64_t(j1) * cols, nc, 1.f, dGb,
           nc);
    // dW[i, j] += dF[i] . G[j] for j <= i: rows [j0, j1), columns [0, j1).
    gemm(false, true, m, j1, nc, 1.f, dF + int64_t(j0) * cols, nc, G, nc, 1.f, dW + int64_t(j0) * ldw, ldw);
    for (int r = j0; r < j1; ++r) std::fill(dW + int64_t(r) * ldw + r + 1, dW + int64_t(r) * ldw + j1, 0.f);
  }
  row_sums_into(dF, T, cols, db);
}

void spatial_causal_forward_naive(const float* W, int ldw, const float* b, int T, int64_t cols, const float* G,
                                  float* F) {
  for (int i = 0; i < T; ++i)
    for (int64_t c = 0; c < cols; ++c) {
      double s = b[i];
      for (int j = 0; j <= i; ++j) s += double(W[int64_t(i) * ldw + j]) * G[int64_t(j) * cols + c];
      F[int64_t(i) * cols + c] = float(s);
    }
}

void spatial_causal_backward_naive(const float* W, int ldw, int T, int64_t cols, const float* G, const float* dF,
                                   float* dG, float* dW, float* db) {
  for (int j = 0; j < T; ++j)
    for (int64_t c = 0; c < cols; ++c) {
      double s = 0.0;
      for (int i = j; i < T; ++i) s += double(W[int64_t(i) * ldw + j]) * dF[int64_t(i) * cols + c];
      dG[int64_t(j) * cols + c] = float(s);
    }
  for (int i = 0; i < T; ++i) {
    double sb = 0.0;
    for (int64_t c = 0; c < cols; ++c) sb += dF[int64_t(i) * cols + c];
    db[i] += float(sb);
    for (int j = 0; j <= i; ++j) {
      double s = 0.0;
      for (int64_t c = 0; c < cols; ++c) s += double(dF[int64_t(i) * cols + c]) * G[int64_t(j) * cols + c];
      dW[int64_t(i) * ldw + j] += float(s);
    }
  }
}

}  // namespace gmlp::ops
