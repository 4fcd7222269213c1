// Every matrix product of the CUDA backend, through cuBLAS. The engine's matrices are
// row-major; cuBLAS's are column-major, and a row-major X is the column-major X^T, so
// C = op(A) op(B) is computed as C^T = op(B)^T op(A)^T with the operands swapped.
#include <cublasLt.h>
#include <cublas_v2.h>

#include <algorithm>
#include <cstdlib>
#include <map>
#include <string>
#include <tuple>

#include "gmlp/error.h"
#include "ops/bf16.h"
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
    // Plain fp32 (no TF32 tensor cores): the CPU engine is the reference to ~1e-5. And
    // no split-K partial sums added in a bf16 output's own type: a product written in
    // bf16 is its float sum rounded once, as the CPU's and the emulator's are.
    const int mode = CUBLAS_DEFAULT_MATH | CUBLAS_MATH_DISALLOW_REDUCED_PRECISION_REDUCTION;
    cublasSetMathMode(x, cublasMath_t(mode));
    return x;
  }();
  return h;
}

void check_blas(cublasStatus_t s, const char* what) {
  if (s != CUBLAS_STATUS_SUCCESS) throw Error(std::string("cuBLAS: ") + what + " failed (status " + std::to_string(int(s)) + ")");
}
}  // namespace

namespace {
// Device memory grown to the most it has been asked for, never shrunk; counted.
struct Growing {
  const char* name;
  void* p = nullptr;
  size_t cap = 0;
  void* at_least(size_t bytes) {
    if (bytes > cap) {
      // Queued work may still read the old area, and cudaFree only *may* wait for it
      // (the runtime API's documentation): wait first. Growth is rare.
      if (p) {
        check(int(cudaDeviceSynchronize()), (std::string("cudaDeviceSynchronize (") + name + ")").c_str());
        check(int(cudaFree(p)), (std::string("cudaFree (") + name + ")").c_str());
      }
      count_device_bytes(-int64_t(cap));
      p = nullptr;
      cap = 0;
      check(int(cudaMalloc(&p, bytes)), (std::string("cudaMalloc (") + name + ")").c_str());
      count_device_bytes(int64_t(bytes));
      cap = bytes;
    }
    return p;
  }
};
}  // namespace

void* scratch(size_t bytes) {
  static Growing area{"scratch"};
  return area.at_least(bytes);
}

unsigned* zeroed_counters(int n) {
  static Growing area{"counters"};
  const size_t bytes = sizeof(unsigned) * size_t(std::max(n, 1));
  const bool grows = bytes > area.cap;
  void* p = area.at_least(bytes);
  if (grows) check(int(cudaMemset(p, 0, area.cap)), "cudaMemset (counters)");
  return static_cast<unsigned*>(p);
}

namespace {
// How bf16 products over float operands are issued (GMLP_CUDA_BF16_GEMM): `native`,
// the default, each operand first rounded into a bf16 copy (a pass over it per
// product), then a bf16 x bf16 -> float product, the tensor cores' own input type; or
// `fast`, float matrices handed to cuBLAS with CUBLAS_COMPUTE_32F_FAST_16BF, which
// *permits* it to round them as it loads them. On an H200 (session 38) cuBLAS took that
// permission for large products only: a small model's ten bf16 steps gave its fp32
// losses to 1e-5 (lm_none in CudaBf16.TenAdamWSteps...), so under `fast` what bf16 means
// depends on cuBLAS's choice of kernel. Their speeds were within the runs' spread
// (docs/bench-gpu.md), so the default is the one whose numbers do not.
enum class Bf16Gemm { off, fast, native };
Bf16Gemm g_bf16 = Bf16Gemm::off;

// The bf16 copies of a product's operands: scratch of its own (grown to the largest
// product's operands, never shrunk, counted in the device's peak), since an op may
// hand gemm operands that live in the shared scratch area.
uint16_t* copies(size_t n) {
  static Growing area{"bf16 copies"};
  return static_cast<uint16_t*>(area.at_least(n * sizeof(uint16_t)));
}

// count row-major matrices of rows x cols, rows ld apart, each stride after the last,
// rounded into bf16 copies with rows ldo apart, each size after the last: a thread per
// column and its rows of every matrix in turn (columns_by_rows). A thread per value
// with its matrix, row and column divided out of a 64-bit index took three 64-bit
// divisions a value, a hundred or so instructions, where the rounding takes one
// (RowWalk keeps a row's matrix and row by additions); every step rounds each layer's
// projection weights so.
__global__ void k_round_matrices(const float* X, int rows, int cols, int ld, int64_t stride, int64_t matrix_rows,
                                 int ldo, int64_t size, uint16_t* out) {
  const int c = column();
  if (c >= cols) return;
  for (RowWalk w(rows); w.row < matrix_rows; w.next())  // matrix w.quot's row w.rem
    out[w.quot * size + w.rem * ldo + c] = ops::to_bf16(X[w.quot * stride + w.rem * ld + c]);
}

}  // namespace

void to_bf16_rows(const float* X, int rows, int cols, int ld, int64_t stride, int count, int ldo, int64_t size,
                  uint16_t* out) {
  const int64_t matrix_rows = int64_t(rows) * (stride == 0 ? 1 : count);
  if (matrix_rows == 0 || cols <= 0) return;
  const Launch l = columns_by_rows_batched(cols, matrix_rows);
  GMLP_LAUNCH(k_round_matrices, l.grid, l.block)(X, rows, cols, ld, stride, matrix_rows, ldo, size, out);
  check_launch("rounding to bf16");
}

namespace {
// Up to kBf16Copies roundings, their pointers and sizes passed by value (1.5 KB of the
// launch's parameters), so that nothing is uploaded: an upload from host memory waits
// for the work queued before it. A row of blocks per copy (blockIdx.y), each thread
// every gridDim.x * blockDim.x-th value of its copy. The annotated LM's step rounded its
// twelve weight matrices in twelve launches, gMLP-S/16's sixty in sixty, 6 µs each
// where their bytes take 1 (docs/bench-gpu.md).
struct Bf16Copies {
  const float* x[kBf16Copies];
  uint16_t* y[kBf16Copies];
  int64_t n[kBf16Copies];
};
__global__ void k_round_copies(Bf16Copies c) {
  const int k = int(blockIdx.y);
  const float* x = c.x[k];
  uint16_t* y = c.y[k];
  const int64_t n = c.n[k], step = int64_t(gridDim.x) * blockDim.x;
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += step) y[i] = ops::to_bf16(x[i]);
}
}  // namespace

void to_bf16_many(const ops::Bf16Copy* copies, int count) {
  for (int k0 = 0; k0 < count; k0 += kBf16Copies) {
    Bf16Copies c{};
    int64_t most = 0;
    const int k1 = std::min(count, k0 + kBf16Copies);
    for (int k = k0; k < k1; ++k) {
      c.x[k - k0] = copies[k].x;
      c.y[k - k0] = copies[k].y;
      c.n[k - k0] = int64_t(copies[k].n);
      most = std::max(most, c.n[k - k0]);
    }
    if (most == 0) continue;
    // About four values a thread of the largest copy (the weights' rows are floats one
    // after another: each warp reads 128 bytes at a time).
    const unsigned across = unsigned(std::clamp<int64_t>((most + 4 * kThreads - 1) / (4 * kThreads), 1, 65535));
    GMLP_LAUNCH(k_round_copies, dim3(across, unsigned(k1 - k0)), kThreads)(c);
    check_launch("rounding to bf16 (many)");
  }
}

void to_bf16(const float* x, size_t n, uint16_t* y) {
  const ops::Bf16Copy one{x, n, y};
  to_bf16_many(&one, 1);
}

namespace {
// A copy's rows are padded to 8 values (16 bytes) and each copy starts on 256 bytes, as
// cuBLAS's fastest bf16 kernels want their operands aligned.
int padded_ld(int cols) { return cols <= 0 ? 1 : padded_row<uint16_t>(cols); }
int64_t padded_size(int rows, int cols) { return (int64_t(rows) * padded_ld(cols) + 127) / 128 * 128; }

// C_i = alpha op(A_i) op(B_i) + beta C_i over bf16 A_i and B_i, summed in float (the
// tensor cores' own input type), C float or (ct CUDA_R_16BF) bf16.
void bf16_products(bool trans_a, bool trans_b, int M, int N, int K, float alpha, const uint16_t* A, int lda,
                   int64_t sa, const uint16_t* B, int ldb, int64_t sb, float beta, void* C, cudaDataType ct, int ldc,
                   int64_t sc, int count, const char* what) {
  const cublasOperation_t opb = trans_b ? CUBLAS_OP_T : CUBLAS_OP_N, opa = trans_a ? CUBLAS_OP_T : CUBLAS_OP_N;
  check_blas(cublasGemmStridedBatchedEx(blas(), opb, opa, N, M, K, &alpha, B, CUDA_R_16BF, ldb, sb, A, CUDA_R_16BF,
                                        lda, sa, &beta, C, ct, ldc, sc, count, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
             what);
}

// C_i = alpha op(A_i) op(B_i) + beta C_i over bf16 copies of A and B (Bf16Gemm::native).
void native_product(bool trans_a, bool trans_b, int M, int N, int K, float alpha, const float* A, int lda, int64_t sa,
                    const float* B, int ldb, int64_t sb, float beta, float* C, int ldc, int64_t sc, int count) {
  const int ar = trans_a ? K : M, ac = trans_a ? M : K, br = trans_b ? N : K, bc = trans_b ? K : N;
  const int64_t na = padded_size(ar, ac), nb = padded_size(br, bc);
  const int64_t ca = sa == 0 ? 1 : count, cb = sb == 0 ? 1 : count;
  uint16_t* A16 = copies(size_t(na * ca + nb * cb));
  uint16_t* B16 = A16 + na * ca;
  // One copy of an operand shared by every product (stride 0).
  to_bf16_rows(A, ar, ac, lda, sa, count, padded_ld(ac), na, A16);
  to_bf16_rows(B, br, bc, ldb, sb, count, padded_ld(bc), nb, B16);
  bf16_products(trans_a, trans_b, M, N, K, alpha, A16, padded_ld(ac), sa == 0 ? 0 : na, B16, padded_ld(bc),
                sb == 0 ? 0 : nb, beta, C, CUDA_R_32F, ldc, sc, count, "gemm (bf16 copies)");
}
}  // namespace

// Over operands already in bf16: always the tensor cores' bf16 x bf16 products, into
// float or bf16 C, whatever GMLP_CUDA_BF16_GEMM says (it chooses for float operands).
void gemm_batched(bool trans_a, bool trans_b, int M, int N, int K, float alpha, const uint16_t* A, int lda, int64_t sa,
                  const uint16_t* B, int ldb, int64_t sb, float beta, float* C, int ldc, int64_t sc, int count) {
  if (M <= 0 || N <= 0 || count <= 0) return;
  bf16_products(trans_a, trans_b, M, N, K, alpha, A, lda, sa, B, ldb, sb, beta, C, CUDA_R_32F, ldc, sc, count,
                "gemm (bf16 operands)");
}
void gemm_batched(bool trans_a, bool trans_b, int M, int N, int K, float alpha, const uint16_t* A, int lda, int64_t sa,
                  const uint16_t* B, int ldb, int64_t sb, float beta, uint16_t* C, int ldc, int64_t sc, int count) {
  if (M <= 0 || N <= 0 || count <= 0) return;
  bf16_products(trans_a, trans_b, M, N, K, alpha, A, lda, sa, B, ldb, sb, beta, C, CUDA_R_16BF, ldc, sc, count,
                "gemm (bf16 operands and output)");
}
void gemm(bool trans_a, bool trans_b, int M, int N, int K, float alpha, const uint16_t* A, int lda, const uint16_t* B,
          int ldb, float beta, float* C, int ldc) {
  gemm_batched(trans_a, trans_b, M, N, K, alpha, A, lda, 0, B, ldb, 0, beta, C, ldc, 0, 1);
}
void gemm(bool trans_a, bool trans_b, int M, int N, int K, float alpha, const uint16_t* A, int lda, const uint16_t* B,
          int ldb, float beta, uint16_t* C, int ldc) {
  gemm_batched(trans_a, trans_b, M, N, K, alpha, A, lda, 0, B, ldb, 0, beta, C, ldc, 0, 1);
}

namespace {
// Whether bf16 projections go through cuBLASLt with the bias (and a residual) in the
// product (GMLP_CUDA_LT, read whenever the precision is set): on unless `off`.
bool g_lt = true;
}  // namespace

void set_bf16_products(bool on) {
  const char* l = std::getenv("GMLP_CUDA_LT");
  const std::string lt = l && *l ? l : "on";
  if (lt != "on" && lt != "off") throw Error("GMLP_CUDA_LT: '" + lt + "' is not on or off");
  g_lt = lt == "on";
  if (!on) {
    g_bf16 = Bf16Gemm::off;
    return;
  }
  const char* v = std::getenv("GMLP_CUDA_BF16_GEMM");
  const std::string how = v && *v ? v : "native";
  if (how != "fast" && how != "native")
    throw Error("GMLP_CUDA_BF16_GEMM: '" + how + "' is not one of fast, native");
  g_bf16 = how == "native" ? Bf16Gemm::native : Bf16Gemm::fast;
}

namespace {
// cuBLASLt's side: a handle, a workspace, and per shape (and the operands' alignments,
// on which an algorithm's validity depends) a descriptor, layouts and the heuristic's
// first algorithm, found once. No algorithm: remembered too, and the caller's fallback
// runs.
constexpr size_t kLtWorkspace = size_t(32) << 20;

cublasLtHandle_t lt() {
  static cublasLtHandle_t h = [] {
    cublasLtHandle_t x = nullptr;
    if (cublasLtCreate(&x) != CUBLAS_STATUS_SUCCESS) throw Error("CUDA: cublasLtCreate failed");
    return x;
  }();
  return h;
}

int alignment(const void* p) {
  const auto a = reinterpret_cast<uintptr_t>(p);
  int n = 1;
  while (n < 16 && a % (2 * n) == 0) n *= 2;
  return p ? n : 0;
}

struct LtPlan {
  bool ok = false;
  cublasLtMatmulDesc_t desc = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, c = nullptr;
  cublasLtMatmulAlgo_t algo{};
  size_t workspace = 0;
};

using LtKey = std::tuple<int, int, int, bool, int, int, int, int, int>;

const LtPlan& lt_plan(int M, int N, int K, const uint16_t* x, const uint16_t* W, const float* b, const float* r,
                      float* y) {
  static std::map<LtKey, LtPlan> plans;  // one host thread at a time (cuda_backend.cpp's lock)
  const LtKey key{M, N, K, r != nullptr, alignment(x), alignment(W), alignment(b), alignment(r), alignment(y)};
  auto [it, fresh] = plans.try_emplace(key);
  LtPlan& p = it->second;
  if (!fresh) return p;
  // Column-major: y^T [N, M] = W [K, N]^T x^T [K, M], the bias one value per row of y^T.
  const int32_t ta = CUBLAS_OP_T, tb = CUBLAS_OP_N;
  const uint32_t epilogue = CUBLASLT_EPILOGUE_BIAS;
  cublasLtMatmulPreference_t pref = nullptr;
  const uint64_t ws = kLtWorkspace;
  cublasLtMatmulHeuristicResult_t found{};
  int count = 0;
  const bool made =
      cublasLtMatmulDescCreate(&p.desc, CUBLAS_COMPUTE_32F, CUDA_R_32F) == CUBLAS_STATUS_SUCCESS &&
      cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof(ta)) == CUBLAS_STATUS_SUCCESS &&
      cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof(tb)) == CUBLAS_STATUS_SUCCESS &&
      cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &epilogue, sizeof(epilogue)) ==
          CUBLAS_STATUS_SUCCESS &&
      cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &b, sizeof(b)) ==
          CUBLAS_STATUS_SUCCESS &&
      cublasLtMatrixLayoutCreate(&p.a, CUDA_R_16BF, uint64_t(K), uint64_t(N), K) == CUBLAS_STATUS_SUCCESS &&
      cublasLtMatrixLayoutCreate(&p.b, CUDA_R_16BF, uint64_t(K), uint64_t(M), K) == CUBLAS_STATUS_SUCCESS &&
      cublasLtMatrixLayoutCreate(&p.c, CUDA_R_32F, uint64_t(N), uint64_t(M), N) == CUBLAS_STATUS_SUCCESS &&
      cublasLtMatmulPreferenceCreate(&pref) == CUBLAS_STATUS_SUCCESS &&
      cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof(ws)) ==
          CUBLAS_STATUS_SUCCESS &&
      cublasLtMatmulAlgoGetHeuristic(lt(), p.desc, p.a, p.b, p.c, p.c, pref, 1, &found, &count) ==
          CUBLAS_STATUS_SUCCESS;
  if (pref) cublasLtMatmulPreferenceDestroy(pref);
  p.ok = made && count > 0 && found.state == CUBLAS_STATUS_SUCCESS && found.workspaceSize <= kLtWorkspace;
  p.algo = found.algo;
  p.workspace = found.workspaceSize;
  return p;
}
}  // namespace

bool lt_linear_bf16(const uint16_t* x, int M, int K, const uint16_t* W, const float* b, int N, const float* r,
                    float* y) {
  if (!g_lt || M <= 0 || N <= 0 || K <= 0 || !b) return false;
  const LtPlan& p = lt_plan(M, N, K, x, W, b, r, y);
  if (!p.ok) return false;
  static Growing area{"cuBLASLt workspace"};
  void* ws = p.workspace ? area.at_least(p.workspace) : nullptr;
  check_blas(cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &b, sizeof(b)),
             "cuBLASLt bias");
  const float alpha = 1.f, beta = r ? 1.f : 0.f;
  check_blas(cublasLtMatmul(lt(), p.desc, &alpha, W, p.a, x, p.b, &beta, r ? r : y, p.c, y, p.c, &p.algo, ws,
                            p.workspace, 0),
             "cuBLASLt product (bias, residual)");
  return true;
}

void gemm(bool trans_a, bool trans_b, int M, int N, int K, float alpha, const float* A, int lda, const float* B,
          int ldb, float beta, float* C, int ldc) {
  if (M <= 0 || N <= 0) return;
  const cublasOperation_t opb = trans_b ? CUBLAS_OP_T : CUBLAS_OP_N, opa = trans_a ? CUBLAS_OP_T : CUBLAS_OP_N;
  // K = 0: cuBLAS scales C by beta, as the CPU gemm does.
  if (g_bf16 == Bf16Gemm::off) {
    check_blas(cublasSgemm(blas(), opb, opa, N, M, K, &alpha, B, ldb, A, lda, &beta, C, ldc), "sgemm");
    return;
  }
  if (g_bf16 == Bf16Gemm::native)
    return native_product(trans_a, trans_b, M, N, K, alpha, A, lda, 0, B, ldb, 0, beta, C, ldc, 0, 1);
  // Mixed precision: float32 matrices in and out, cuBLAS rounds the inputs to bf16 and
  // accumulates in float32 on the tensor cores.
  check_blas(cublasGemmEx(blas(), opb, opa, N, M, K, &alpha, B, CUDA_R_32F, ldb, A, CUDA_R_32F, lda, &beta, C,
                          CUDA_R_32F, ldc, CUBLAS_COMPUTE_32F_FAST_16BF, CUBLAS_GEMM_DEFAULT),
             "gemm (bf16)");
}

void gemm_batched(bool trans_a, bool trans_b, int M, int N, int K, float alpha, const float* A, int lda, int64_t sa,
                  const float* B, int ldb, int64_t sb, float beta, float* C, int ldc, int64_t sc, int count) {
  if (M <= 0 || N <= 0 || count <= 0) return;
  if (count == 1) return gemm(trans_a, trans_b, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
  const cublasOperation_t opb = trans_b ? CUBLAS_OP_T : CUBLAS_OP_N, opa = trans_a ? CUBLAS_OP_T : CUBLAS_OP_N;
  if (g_bf16 == Bf16Gemm::native)
    return native_product(trans_a, trans_b, M, N, K, alpha, A, lda, sa, B, ldb, sb, beta, C, ldc, sc, count);
  if (g_bf16 == Bf16Gemm::off) {
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
