// The one GEMM entry point: every matrix product in the engine goes through here, so
// transposes are flags (never copies) and the library that multiplies (products.cpp:
// OpenBLAS or oneDNN, fp32 or bf16) is chosen at one place.
#include <cblas.h>
#include <omp.h>

#include <algorithm>
#include <vector>

#include "ops/ops.h"

namespace gmlp::ops {
namespace {

// A slab is at least this long, else the product runs on OpenBLAS as it is.
constexpr int kGemmSlab = 32;

void blas(bool trans_a, bool trans_b, int M, int N, int K, float alpha, const float* A, int lda, const float* B,
          int ldb, float beta, float* C, int ldc) {
  if (fp32_engine() == Fp32Engine::onednn)
    return sgemm_onednn(trans_a, trans_b, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
  cblas_sgemm(CblasRowMajor, trans_a ? CblasTrans : CblasNoTrans, trans_b ? CblasTrans : CblasNoTrans, M, N, K,
              alpha, A, lda, B, ldb, beta, C, ldc);
}

void sgemm(bool trans_a, bool trans_b, int M, int N, int K, float alpha, const float* A, int lda, const float* B,
           int ldb, float beta, float* C, int ldc) {
  // With several threads, each multiplies one slab of C (rows, or columns when C is
  // wider than tall) by a single-threaded product: OpenBLAS and oneDNN's SGEMM both run
  // on the calling thread inside a parallel region. OpenBLAS's own threading of a small
  // product spends its time synchronising (sched_yield); this way a thread packs the
  // shared operand itself and never waits inside the product. Each element of C is one thread's, so the result
  // depends on the thread count only, as before.
  const int nt = omp_in_parallel() ? 1 : omp_get_max_threads();
  const bool rows = M >= N;
  const int len = rows ? M : N;
  if (nt == 1 || len < kGemmSlab * nt) {
    blas(trans_a, trans_b, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
    return;
  }
  const int step = ((len + nt - 1) / nt + 15) / 16 * 16;  // whole 16-row panels, nt slabs cover len
#pragma omp parallel num_threads(nt)
  {
    const int lo = std::min(len, omp_get_thread_num() * step), hi = std::min(len, lo + step);
    if (hi > lo) {
      if (rows)
        blas(trans_a, trans_b, hi - lo, N, K, alpha, trans_a ? A + lo : A + int64_t(lo) * lda, lda, B, ldb, beta,
             C + int64_t(lo) * ldc, ldc);
      else
        blas(trans_a, trans_b, M, hi - lo, K, alpha, A, lda, trans_b ? B + int64_t(lo) * ldb : B + lo, ldb, beta,
             C + lo, ldc);
    }
  }
}

}  // namespace

void gemm(bool trans_a, bool trans_b, int M, int N, int K, float alpha, const float* A, int lda,
          const float* B, int ldb, float beta, float* C, int ldc) {
  if (M <= 0 || N <= 0) return;
  if (K <= 0) {  // BLAS leaves C untouched for K = 0 only when beta = 1
    for (int i = 0; i < M; ++i)
      for (int j = 0; j < N; ++j) C[int64_t(i) * ldc + j] = beta == 0.f ? 0.f : beta * C[int64_t(i) * ldc + j];
    return;
  }
  switch (products()) {
    case Products::fp32:
      sgemm(trans_a, trans_b, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
      return;
    case Products::bf16:
      gemm_onednn(true, trans_a, trans_b, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
      return;
    case Products::bf16_emulated: {
      // Dense rounded copies of the stored operands, then the fp32 product.
      thread_local std::vector<float> a, b;
      const int ar = trans_a ? K : M, ac = trans_a ? M : K, br = trans_b ? N : K, bc = trans_b ? K : N;
      a.resize(size_t(ar) * ac);
      b.resize(size_t(br) * bc);
      round_to_bf16(A, ar, ac, lda, a.data());
      round_to_bf16(B, br, bc, ldb, b.data());
      sgemm(trans_a, trans_b, M, N, K, alpha, a.data(), ac, b.data(), bc, beta, C, ldc);
      return;
    }
  }
}

}  // namespace gmlp::ops
