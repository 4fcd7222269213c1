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
//
// dW = dF G^T is a product of a few rows by a few rows over B*g columns (K in the
// thousands, the output T x T). gemm splits a product into slabs of its output, and a
// thread's slab (32 rows of dW by 64 to 128 columns) ran at a fifth of the peak; here
// each thread takes a share of the columns instead, multiplies all of dW's (causal:
// lower, in 64-row blocks) into a private T x T copy, and the copies are added in a
// fixed order: the result depends on the thread count only, as every product's does.
// G comes transposed (Gt [cols, T], as the SGU rebuilds it), so that the products are
// A·B: oneDNN ran them as A·Bᵀ over G itself at 350-405 GFLOP/s of work done (the
// annotated model, T = 256 over 32768 columns: 9.1 ms in 128-row blocks, the fastest
// for that form) and as A·B over Gt in 6.2-6.6 ms (64-row blocks; small and tiny
// 1.0-1.1 -> 0.7 and 0.34 -> 0.22-0.30 ms).
#include <omp.h>

#include <algorithm>
#include <cstring>
#include <vector>

#include "ops/ops.h"
#include "ops/parallel.h"

namespace gmlp::ops {
namespace {
constexpr int kBlock = 64;
constexpr int kGradBlock = 64;  // dW's row blocks (over Gt: 64 ran faster than 128 or 256)

// rows x cols of W (rows ldw apart) from (r0, c0) into the dense out, every entry above
// W's diagonal (column > row, in W's own indices) zero; transposed, out is cols x rows.
float* lower_part(const float* W, int ldw, int r0, int c0, int rows, int cols, bool transposed = false) {
  thread_local std::vector<float> out;
  out.resize(size_t(rows) * cols);
  for (int r = 0; r < rows; ++r) {
    const float* w = W + int64_t(r0 + r) * ldw + c0;
    const int keep = std::clamp(r0 + r - c0 + 1, 0, cols);  // columns c0 .. row of W
    if (transposed) {
      for (int c = 0; c < cols; ++c) out[size_t(c) * rows + r] = c < keep ? w[c] : 0.f;
      continue;
    }
    float* o = out.data() + size_t(r) * cols;
    std::copy(w, w + keep, o);
    std::fill(o + keep, o + cols, 0.f);
  }
  return out.data();
}

// dW[i, j] += sum_c dF[i, c] Gt[c, j] over c in [c0, c1), into P (T x T, ldp) with
// beta = 0: causal, only blocks of rows [i0, i1) by columns [0, i1) are computed, and of
// those only the lower triangle is read back.
void weight_grad_part(bool causal, int T, int c0, int c1, const float* Gt, const float* dF, int ld, float* P,
                      int ldp) {
  const float* gt = Gt + int64_t(c0) * T;
  if (!causal) {
    gemm(false, false, T, T, c1 - c0, 1.f, dF + c0, ld, gt, T, 0.f, P, ldp);
    return;
  }
  for (int i0 = 0; i0 < T; i0 += kGradBlock) {
    const int i1 = std::min(T, i0 + kGradBlock);
    gemm(false, false, i1 - i0, i1, c1 - c0, 1.f, dF + int64_t(i0) * ld + c0, ld, gt, T, 0.f,
         P + int64_t(i0) * ldp, ldp);
  }
}

void weight_grad(bool causal, int T, int cols, const float* Gt, const float* dF, int ld, float* dW, int ldw) {
  const TimedProduct timed("NN/k", T, T, cols);
  const int nt = omp_in_parallel() ? 1 : omp_get_max_threads();
  // Below a few columns per thread, or little work, the product is left to gemm whole.
  if (nt == 1 || cols < 64 * nt || int64_t(T) * T * cols < kParallelMacs) {
    if (!causal) {
      gemm(false, false, T, T, cols, 1.f, dF, ld, Gt, T, 1.f, dW, ldw);
      return;
    }
    thread_local std::vector<float> part;
    part.resize(size_t(T) * T);
    weight_grad_part(true, T, 0, cols, Gt, dF, ld, part.data(), T);
    for (int i = 0; i < T; ++i)
      for (int j = 0; j <= i; ++j) dW[int64_t(i) * ldw + j] += part[size_t(i) * T + j];
    return;
  }
  thread_local std::vector<float> parts;
  parts.resize(size_t(nt) * T * T);
  float* P = parts.data();
  const int step = ((cols + nt - 1) / nt + 15) / 16 * 16;
#pragma omp parallel num_threads(nt)
  {
    const int t = omp_get_thread_num(), c0 = std::min(cols, t * step), c1 = std::min(cols, c0 + step);
    float* mine = P + size_t(t) * T * T;
    if (c1 > c0)
      weight_grad_part(causal, T, c0, c1, Gt, dF, ld, mine, T);
    else
      std::fill(mine, mine + size_t(T) * T, 0.f);
#pragma omp barrier
#pragma omp for schedule(static)
    for (int i = 0; i < T; ++i) {
      const int n = causal ? i + 1 : T;
      float* w = dW + int64_t(i) * ldw;
      for (int k = 0; k < nt; ++k) {
        const float* p = P + size_t(k) * T * T + size_t(i) * T;
#pragma omp simd
        for (int j = 0; j < n; ++j) w[j] += p[j];
      }
    }
  }
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

void spatial_mix_backward(const float* W, int ldw, bool causal, int T, int cols, const float* Gt, const float* dF,
                          int ld, float* dG, float* dW) {
  if (!causal) {
    gemm(true, false, T, cols, T, 1.f, W, ldw, dF, ld, 0.f, dG, ld);
    weight_grad(false, T, cols, Gt, dF, ld, dW, ldw);
    return;
  }
  for (int j0 = 0; j0 < T; j0 += kBlock) {
    const int j1 = std::min(T, j0 + kBlock), m = j1 - j0;
    // dG[j] = sum_{i >= j} W[i, j] dF[i]: W[j0:T, j0:j1] (causal) transposed, over dF[j0:T].
    // Copied transposed, so that the product is A·B: oneDNN ran Aᵀ·B of these shapes
    // (64 rows by B*g columns, annotated model) at 306-346 GFLOP/s against 329-423 for A·B.
    const float* Wc = lower_part(W, ldw, j0, j0, T - j0, m, true);
    gemm(false, false, m, cols, T - j0, 1.f, Wc, T - j0, dF + int64_t(j0) * ld, ld, 0.f, dG + int64_t(j0) * ld, ld);
  }
  // dW[i, j] += dF[i] . G[j] for j <= i; the entries above the diagonal are not written.
  weight_grad(true, T, cols, Gt, dF, ld, dW, ldw);
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
