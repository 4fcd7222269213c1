// The one GEMM entry point: every matrix product in the engine goes through here, so
// transposes are flags (never copies) and a future backend swaps in at one place.
#include <cblas.h>

#include "ops/ops.h"

namespace gmlp::ops {

void gemm(bool trans_a, bool trans_b, int M, int N, int K, float alpha, const float* A, int lda,
          const float* B, int ldb, float beta, float* C, int ldc) {
  if (M <= 0 || N <= 0) return;
  if (K <= 0) {  // BLAS leaves C untouched for K = 0 only when beta = 1
    for (int i = 0; i < M; ++i)
      for (int j = 0; j < N; ++j) C[int64_t(i) * ldc + j] = beta == 0.f ? 0.f : beta * C[int64_t(i) * ldc + j];
    return;
  }
  cblas_sgemm(CblasRowMajor, trans_a ? CblasTrans : CblasNoTrans, trans_b ? CblasTrans : CblasNoTrans, M, N, K,
              alpha, A, lda, B, ldb, beta, C, ldc);
}

}  // namespace gmlp::ops
