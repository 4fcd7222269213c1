// The spatial projection F = W G, the SGU's token mixing, causal or not (the bias
// is added by the SGU).
//
// Causal: W is [T, T] but only its lower triangle counts. Rows are cut into blocks of kBlock:
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

}  // namespace

void spatial_mix_forward(const float* W, int ldw, bool causal, int T, int cols, const float* G, int ld, float* F) {
  if (!causal) {
    gemm(false, false, T, cols, T, 1.f, W, ldw, G, ld, 0.f, F, ld);
    return;
  }
  for (int i0 = 0; i0 < T; i0 += kBlock) {
    const int i1 = std::min(T, i0 + kBlock), m = i1 - i0;
    float* Fb = F + int64_t(i0) * ld;
    for (int r = 0; r < m; ++r)
      std::memcpy(Fb + int64_t(r) * ld, G + int64_t(i0 + r) * ld, sizeof(float) * size_t(cols));
    cblas_strmm(CblasRowMajor, CblasLeft, CblasLower, CblasNoTrans, CblasNonUnit, m, cols, 1.f,
                W + int64_t(i0) * ldw + i0, ldw, Fb, ld);
    if (i0 > 0) gemm(false, false, m, cols, i0, 1.f, W + int64_t(i0) * ldw, ldw, G, ld, 1.f, Fb, ld);
  }
}

void spatial_mix_backward(const float* W, int ldw, bool causal, int T, int cols, const float* G, const float* dF,
                          int ld, float* dG, float* dW) {
  if (!causal) {
    gemm(true, false, T, cols, T, 1.f, W, ldw, dF, ld, 0.f, dG, ld);
    gemm(false, true, T, T, cols, 1.f, dF, ld, G, ld, 1.f, dW, ldw);
    return;
  }
  for (int j0 = 0; j0 < T; j0 += kBlock) {
    const int j1 = std::min(T, j0 + kBlock), m = j1 - j0;
    float* dGb = dG + int64_t(j0) * ld;
    // dG[j] = sum_{i >= j} W[i, j] dF[i]: the diagonal block transposed, then the rows below it.
    for (int r = 0; r < m; ++r)
      std::memcpy(dGb + int64_t(r) * ld, dF + int64_t(j0 + r) * ld, sizeof(float) * size_t(cols));
    cblas_strmm(CblasRowMajor, CblasLeft, CblasLower, CblasTrans, CblasNonUnit, m, cols, 1.f,
                W + int64_t(j0) * ldw + j0, ldw, dGb, ld);
    if (j1 < T)
      gemm(true, false, m, cols, T - j1, 1.f, W + int64_t(j1) * ldw + j0, ldw, dF + int64_t(j1) * ld, ld, 1.f, dGb,
           ld);
    // dW[i, j] += dF[i] . G[j] for j <= i: rows [j0, j1), columns [0, j1). The strict
    // upper part of the diagonal block, computed on the way, is cleared: causal dW
    // entries above the diagonal are always zero.
    gemm(false, true, m, j1, cols, 1.f, dF + int64_t(j0) * ld, ld, G, ld, 1.f, dW + int64_t(j0) * ldw, ldw);
    for (int r = j0; r < j1; ++r) std::fill(dW + int64_t(r) * ldw + r + 1, dW + int64_t(r) * ldw + j1, 0.f);
  }
}

void toeplitz_row(const float* w, int n, bool causal, int i, int T, float* row) {
  for (int j = 0; j < T; ++j) {
    const int k = i - j;  // offset; reach is n tokens either way
    float v = 0.f;
    if (causal ? (k >= 0 && k < n) : (k > -n && k < n)) v = w[causal ? k : k + n - 1];
    row[j] = v;
  }
}

void toeplitz_materialize(const float* w, int n, bool causal, int T, float* W) {
#pragma omp parallel for schedule(static)
  for (int i = 0; i < T; ++i) toeplitz_row(w, n, causal, i, T, W + int64_t(i) * T);
}

void toeplitz_fold(const float* dW, int T, int n, bool causal, float* dw) {
  // Each diagonal of dW sums into one entry of dw; a fixed order keeps it deterministic.
  const int kmin = causal ? 0 : -(n - 1), kmax = n - 1;
#pragma omp parallel for schedule(static)
  for (int k = kmin; k <= kmax; ++k) {
    double s = 0.0;
    for (int i = std::max(0, k); i < T && i - k < T; ++i) s += dW[int64_t(i) * T + (i - k)];
    dw[causal ? k : k + n - 1] += float(s);
  }
}

}  // namespace gmlp::ops
