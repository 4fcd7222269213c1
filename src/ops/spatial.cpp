// The spatial projection F = W G, the SGU's token mixing, causal or not (the bias
// is added by the SGU).
//
// Causal: W is [T, T] but only its lower triangle counts. Rows are cut into blocks of
// kBlock; block [i0, i1) of F is one GEMM of W's rows [i0, i1), columns [0, i1), over
// rows [0, i1) of G, those rows of W copied first with the strict upper part of their
// diagonal block cleared (a few KB). The diagonal block's masked half costs kBlock^2 / 2
// multiply-adds per block and column, small next to T^2 / 2; in exchange every product
// runs on gemm's library, where the triangular multiply (OpenBLAS's TRMM) needed a copy
// of the block's rows of G (megabytes) and ran on OpenBLAS's kernels, AVX2 ones on this
// environment's AVX-512 CPUs. The backward's dG is the same with W's columns.
#include <algorithm>
#include <cstring>
#include <vector>

#include "ops/ops.h"

namespace gmlp::ops {
namespace {
constexpr int kBlock = 64;

// rows x cols of W (rows ldw apart) from (r0, c0) into the dense out, every entry above
// W's diagonal (column > row, in W's own indices) zero.
float* lower_part(const float* W, int ldw, int r0, int c0, int rows, int cols) {
  thread_local std::vector<float> out;
  out.resize(size_t(rows) * cols);
  for (int r = 0; r < rows; ++r) {
    const float* w = W + int64_t(r0 + r) * ldw + c0;
    float* o = out.data() + size_t(r) * cols;
    const int keep = std::clamp(r0 + r - c0 + 1, 0, cols);  // columns c0 .. row of W
    std::copy(w, w + keep, o);
    std::fill(o + keep, o + cols, 0.f);
  }
  return out.data();
}

}  // namespace

void spatial_mix_forward(const float* W, int ldw, bool causal, int T, int cols, const float* G, int ld, float* F) {
  if (!causal) {
    gemm(false, false, T, cols, T, 1.f, W, ldw, G, ld, 0.f, F, ld);
    return;
  }
  for (int i0 = 0; i0 < T; i0 += kBlock) {
    const int i1 = std::min(T, i0 + kBlock), m = i1 - i0;
    const float* Wr = lower_part(W, ldw, i0, 0, m, i1);  // W[i0:i1, 0:i1], causal
    gemm(false, false, m, cols, i1, 1.f, Wr, i1, G, ld, 0.f, F + int64_t(i0) * ld, ld);
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
    // dG[j] = sum_{i >= j} W[i, j] dF[i]: W[j0:T, j0:j1] (causal) transposed, over dF[j0:T].
    const float* Wc = lower_part(W, ldw, j0, j0, T - j0, m);
    gemm(true, false, m, cols, T - j0, 1.f, Wc, m, dF + int64_t(j0) * ld, ld, 0.f, dG + int64_t(j0) * ld, ld);
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
