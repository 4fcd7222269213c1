// Every matrix product of the CUDA backend, through cuBLAS. The engine's matrices are
// row-major; cuBLAS's are column-major, and a row-major X is the column-major X^T, so
// C = op(A) op(B) is computed as C^T = op(B)^T op(A)^T with the operands swapped.
#include <cublas_v2.h>

#include <string>

#include "gmlp/error.h"
#include "ops/cuda/common.cuh"

namespace gmlp::cuda {

void check(int status, const char* what) {
  if (status != 0)
    throw Error(std::string("CUDA: ") + what + " failed: " + cudaGetErrorString(cudaError_t(status)));
}

void check_launch(const char* what) { check(int(cudaGetLastError()), what); }

namespace {
cublasHandle_t blas() {
  static cublasHandle_t h = [] {
    cublasHandle_t x = nullptr;
    if (cublasCreate(&x) != CUBLAS_STATUS_SUCCESS) throw Error("CUDA: cublasCreate failed");
    // Plain fp32 (no TF32 tensor cores): the CPU engine is the reference to ~1e-5.
    cublasSetMathMode(x, CUBLAS_DEFAULT_MATH);
    return x;
  }();
  return h;
}

void check_blas(cublasStatus_t s, const char* what) {
  if (s != CUBLAS_STATUS_SUCCESS) throw Error(std::string("cuBLAS: ") + what + " failed (status " + std::to_string(int(s)) + ")");
}
}  // namespace

void* scratch(size_t bytes) {
  static void* p = nullptr;
  static size_t cap = 0;
  if (bytes > cap) {
    if (p) check(int(cudaFree(p)), "cudaFree (scratch)");
    p = nullptr;
    check(int(cudaMalloc(&p, bytes)), "cudaMalloc (scratch)");
    cap = bytes;
  }
  return p;
}

void gemm(bool trans_a, bool trans_b, int M, int N, int K, float alpha, const float* A, int lda, const float* B,
          int ldb, float beta, float* C, int ldc) {
  if (M <= 0 || N <= 0) return;
  // K = 0: cuBLAS scales C by beta, as the CPU gemm does.
  check_blas(cublasSgemm(blas(), trans_b ? CUBLAS_OP_T : CUBLAS_OP_N, trans_a ? CUBLAS_OP_T : CUBLAS_OP_N, N, M, K,
                         &alpha, B, ldb, A, lda, &beta, C, ldc),
             "sgemm");
}

void trmm_lower(bool trans, int m, int n, float alpha, const float* A, int lda, const float* B, int ldb, float* C,
                int ldc) {
  // Row-major C[m, n] = op(L) B is column-major C^T = B^T op(L)^T; the row-major lower
  // L read column-major is upper, so: side right, upper, op = trans.
  check_blas(cublasStrmm(blas(), CUBLAS_SIDE_RIGHT, CUBLAS_FILL_MODE_UPPER, trans ? CUBLAS_OP_T : CUBLAS_OP_N,
                         CUBLAS_DIAG_NON_UNIT, n, m, &alpha, A, lda, B, ldb, C, ldc),
             "strmm");
}

}  // namespace gmlp::cuda
