// The one GEMM entry point: every matrix product in the engine goes through here, so
// transposes are flags (never copies) and the library that multiplies (products.cpp:
// OpenBLAS or oneDNN, fp32 or bf16) is chosen at one place.
#include <cblas.h>
#include <omp.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <map>
#include <mutex>
#include <tuple>
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

// Rows of C per call for A·B on oneDNN: its SGEMM runs over a long slab K-block by
// K-block, each block reading and writing the whole slab of C again, which for a large
// slab is a trip to memory per block. In pieces whose C stays in the L2 cache (512 KB)
// the blocks add into cached rows: dH = dU·W of the annotated model (8192 x 512 by 2048)
// ran at 430 GFLOP/s in 4096-row slabs and 479 in 256-row pieces (2 threads, Zen 5).
// Only where K spans several blocks, the slab's C is over 1 MB (dS = dY·V, K = 512, and
// the small model's dH, a 1 MB slab, gained nothing) and a piece keeps 256 rows or more:
// each piece packs B again, and square 2048 products in 64-row pieces lost 6%. The
// transposed forms measured no gain. Each element of C is still one call's, over all of
// K: a whole piece gives the bits of one call, a short last piece may take another of
// oneDNN's kernels; the pieces, like the slabs, follow from the shape and the thread
// count only (OpsGemm.OneDnnSgemmAgainstNaiveLoops).
int rows_per_call(bool trans_a, bool trans_b, int rows, int N, int K) {
  constexpr int64_t kCachedC = 512 * 1024 / sizeof(float), kLargeC = 2 * kCachedC;
  const int piece = int(kCachedC / N) / 16 * 16;
  if (trans_a || trans_b || K < 1024 || piece < 256 || int64_t(rows) * N <= kLargeC ||
      fp32_engine() != Fp32Engine::onednn)
    return rows;
  return piece;
}

// A row slab [lo, hi) of C = op(A)·op(B), in pieces of rows_per_call.
void blas_rows(bool trans_a, bool trans_b, int lo, int hi, int N, int K, float alpha, const float* A, int lda,
               const float* B, int ldb, float beta, float* C, int ldc) {
  const int step = rows_per_call(trans_a, trans_b, hi - lo, N, K);
  for (int r = lo; r < hi; r += step) {
    const int e = std::min(hi, r + step);
    blas(trans_a, trans_b, e - r, N, K, alpha, trans_a ? A + r : A + int64_t(r) * lda, lda, B, ldb, beta,
         C + int64_t(r) * ldc, ldc);
  }
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
  if (nt == 1 && rows) {  // one thread (or inside a region): the library runs on this one
    blas_rows(trans_a, trans_b, 0, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
    return;
  }
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
        blas_rows(trans_a, trans_b, lo, hi, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
      else
        blas(trans_a, trans_b, M, hi - lo, K, alpha, A, lda, trans_b ? B + int64_t(lo) * ldb : B + lo, ldb, beta,
             C + lo, ldc);
    }
  }
}

// C = alpha A^T B + beta C for M > N multiplied the other way round: T = B^T A into a
// scratch, then added transposed. oneDNN's SGEMM ran A^T B 7-30% slower with M > N than
// with the same sizes swapped (weight gradients dW = dY^T X of a layer with more outputs
// than inputs: 2048 x 512 over 8192 rows at 362-382 GFLOP/s against 444), and OpenBLAS
// at the same speed both ways; the transposed add costs one pass over C.
bool flip_pays(bool trans_a, bool trans_b, int M, int N) {
  return trans_a && !trans_b && M > N && M >= 1024 && fp32_engine() == Fp32Engine::onednn;
}

void sgemm_flipped(int M, int N, int K, float alpha, const float* A, int lda, const float* B, int ldb, float beta,
                   float* C, int ldc) {
  thread_local std::vector<float> t;
  t.resize(size_t(M) * N);
  sgemm(true, false, N, M, K, 1.f, B, ldb, A, lda, 0.f, t.data(), M);
  const float* T = t.data();
  // 16 x 16 tiles: a tile's reads and writes each stay within 16 cache lines.
#pragma omp parallel for schedule(static)
  for (int i0 = 0; i0 < M; i0 += 16)
    for (int j0 = 0; j0 < N; j0 += 16)
      for (int i = i0; i < std::min(M, i0 + 16); ++i) {
        float* c = C + int64_t(i) * ldc;
        for (int j = j0; j < std::min(N, j0 + 16); ++j) {
          const float v = alpha * T[size_t(j) * M + i];
          c[j] = beta == 0.f ? v : v + beta * c[j];
        }
      }
}

std::atomic<bool> timing{false};
std::mutex timing_mu;
std::map<std::tuple<std::string, int, int, int>, std::vector<double>>& timings() {
  static std::map<std::tuple<std::string, int, int, int>, std::vector<double>> t;
  return t;
}
double now_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

}  // namespace

void product_timing_start() {
  std::lock_guard lock(timing_mu);
  timings().clear();
  timing = true;
}

std::vector<ProductTiming> product_timing_stop() {
  std::lock_guard lock(timing_mu);
  timing = false;
  std::vector<ProductTiming> out;
  for (auto& [key, secs] : timings())
    out.push_back({std::get<0>(key), std::get<1>(key), std::get<2>(key), std::get<3>(key), std::move(secs)});
  timings().clear();
  return out;
}

// Products inside a timed one (spatial.cpp's blocks) are part of its time, not their own.
thread_local int timed_depth = 0;

TimedProduct::TimedProduct(const char* kind, int M, int N, int K) : kind_(kind), M_(M), N_(N), K_(K) {
  if (!timing.load(std::memory_order_relaxed) || omp_in_parallel()) return;
  counted_ = true;
  if (timed_depth++ == 0) start_ = now_s();
}

TimedProduct::~TimedProduct() {
  if (!counted_) return;
  --timed_depth;
  if (start_ < 0) return;
  const double s = now_s() - start_;
  std::lock_guard lock(timing_mu);
  timings()[{kind_, M_, N_, K_}].push_back(s);
}

void gemm(bool trans_a, bool trans_b, int M, int N, int K, float alpha, const float* A, int lda,
          const float* B, int ldb, float beta, float* C, int ldc) {
  if (M <= 0 || N <= 0) return;
  static const char* const kKinds[] = {"NN", "NT", "TN", "TT"};
  const TimedProduct timed(kKinds[2 * trans_a + trans_b], M, N, K);
  if (K <= 0) {  // BLAS leaves C untouched for K = 0 only when beta = 1
    for (int i = 0; i < M; ++i)
      for (int j = 0; j < N; ++j) C[int64_t(i) * ldc + j] = beta == 0.f ? 0.f : beta * C[int64_t(i) * ldc + j];
    return;
  }
  switch (products()) {
    case Products::fp32:
      if (flip_pays(trans_a, trans_b, M, N))
        sgemm_flipped(M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
      else
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
