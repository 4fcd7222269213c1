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
    count_device_bytes(-int64_t(cap));
    p = nullptr;
    cap = 0;
    check(int(cudaMalloc(&p, bytes)), "cudaMalloc (scratch)");
    count_device_bytes(int64_t(bytes));
    cap = bytes;
  }
  return p;
}

namespace {
bool g_bf16 = false;
}

void set_bf16_products(bool on) { g_bf16 = on; }

void gemm(bool trans_a, bool trans_b, int M, int N, int K, float alpha, const float* A, int lda, const float* B,
          int ldb, float beta, float* C, int ldc) {
  if (M <= 0 || N <= 0) return;
  const cublasOperation_t opb = trans_b ? CUBLAS_OP_T : CUBLAS_OP_N, opa = trans_a ? CUBLAS_OP_T : CUBLAS_OP_N;
  // K = 0: cuBLAS scales C by beta, as the CPU gemm does.
  if (!g_bf16) {
    check_blas(cublasSgemm(blas(), opb, opa, N, M, K, &alpha, B, ldb, A, lda, &beta, C, ldc), "sgemm");
    return;
  }
  // Mixed precision: float32 matrices in and out, cuBLAS rounds the inputs to bf16 and
  // accumulates in float32 on the tensor cores (the activations stay float32 in memory).
  check_blas(cublasGemmEx(blas(), opb, opa, N, M, K, &alpha, B, CUDA_R_32F, ldb, A, CUDA_R_32F, lda, &beta, C,
                          CUDA_R_32F, ldc, CUBLAS_COMPUTE_32F_FAST_16BF, CUBLAS_GEMM_DEFAULT),
             "gemm (bf16)");
}

void gemm_batched(bool trans_a, bool trans_b, int M, int N, int K, float alpha, const float* A, int lda, int64_t sa,
                  const float* B, int ldb, int64_t sb, float beta, float* C, int ldc, int64_t sc, int count) {
  if (M <= 0 || N <= 0 || count <= 0) return;
  if (count == 1) return gemm(trans_a, trans_b, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
  const cublasOperation_t opb = trans_b ? CUBLAS_OP_T : CUBLAS_OP_N, opa = trans_a ? CUBLAS_OP_T : CUBLAS_OP_N;
  if (!g_bf16) {
    check_blas(cublasSgemmStridedBatched(blas(), opb, opa, N, M, K, &alpha, B, ldb, sb, A, lda, sa, &beta, C, ldc, sc,
                                         count),
               "sgemm (batched)");
    return;
  }
  check_blas(cublasGemmStridedBatchedEx(blas(), opb, opa, N, M, K, &alpha, B, CUDA_R_32F, ldb, sb, A, CUDA_R_32F, lda,
                                        sa, &beta, C, CUDA_R_32F, ldc, sc, count, CUBLAS_COMPUTE_32F_FAST_16BF,
                                        CUBLAS_GEMM_DEFAULT),
             "gemm (bf16, batched)");
}

}  // namespace gmlp::cuda
