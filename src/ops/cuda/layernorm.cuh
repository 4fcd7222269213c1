#pragma once
// LayerNorm's kernels, written once over where x comes from and where dx goes: the
// generic op (layernorm.cu) reads x and writes dx as they are; the SGU's gate
// (sgu.cu) normalises GELU(U), recomputed as it reads U, and folds GELU's derivative
// (and the non-split forms' direct path) into dU, so Z and dZ are never stored. Row r,
// channel c of x is xin(r, c); the backward's dL/dx goes to out(r, c, d).
#include "ops/cuda/common.cuh"

namespace gmlp::cuda {

constexpr int kRowThreads = 128;
// A row of up to this many channels is kept in shared memory (16 KB) between a kernel's
// passes over it: x read (for the SGU's gate, GELU(U) evaluated) once instead of each
// pass. Each thread reads back only the channels it wrote, so no barrier is needed. On
// the CUDA emulator 16, so that the tests' rows take both paths.
#if defined(GMLP_CUDA_EMULATED)
constexpr int kRowCache = 16;
#else
constexpr int kRowCache = 4096;
#endif

// x as it is in memory, rows ld apart.
struct XPlain {
  const float* x;
  int ld;
  __device__ float operator()(int64_t r, int c) const { return x[r * ld + c]; }
};

// Where the normalised rows go: floats, rows ld apart, row r to row rows[r] when rows is
// given (the decoder's gate cache);
struct YPlain {
  float* y;
  int ld;
  const int32_t* rows = nullptr;
  __device__ void operator()(int64_t r, int c, float v) const { y[(rows ? int64_t(rows[r]) : r) * ld + c] = v; }
};
// or bf16 bits, rows ld apart, and the floats as well where y is given: the block
// LayerNorm's output under bf16, read by bf16 products alone (and, as floats, by aMLP's
// attention).
struct YBf16 {
  uint16_t* y16;
  float* y;
  int ld;
  __device__ void operator()(int64_t r, int c, float v) const {
    const int64_t i = r * ld + c;
    hold(y16 + i, v);
    if (y) y[i] = v;
  }
};

// Rows ld apart as y holds them: floats, or bf16 bits.
inline YPlain rows_out(float* y, int ld) { return {y, ld}; }
inline YBf16 rows_out(uint16_t* y, int ld) { return {y, nullptr, ld}; }

// A block per row.
template <typename XIn, typename YOut>
__global__ void ln_forward_k(XIn xin, int C, const float* w, const float* b, float eps, YOut out, float* mean,
                             float* rstd) {
  __shared__ float sh[32];
  __shared__ float row[kRowCache];
  const int64_t r = blockIdx.x;
  const bool cached = C <= kRowCache;
  auto x = [&](int c) { return cached ? row[c] : xin(r, c); };
  float s = 0.f;
  for (int c = threadIdx.x; c < C; c += blockDim.x) {
    const float v = xin(r, c);
    if (cached) row[c] = v;
    s += v;
  }
  const float mu = block_sum(s, sh) / float(C);
  float v = 0.f;  // two passes, as the CPU op
  for (int c = threadIdx.x; c < C; c += blockDim.x) {
    const float d = x(c) - mu;
    v += d * d;
  }
  const float rs = rsqrtf(block_sum(v, sh) / float(C) + eps);
  for (int c = threadIdx.x; c < C; c += blockDim.x) out(r, c, (x(c) - mu) * rs * w[c] + b[c]);
  if (threadIdx.x == 0) {
    if (mean) mean[r] = mu;
    if (rstd) rstd[r] = rs;
  }
}

template <typename XIn, typename YOut>
__global__ void ln_apply_k(XIn xin, int M, int C, const float* w, const float* b, const float* mean, const float* rstd,
                           YOut out) {
  const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= int64_t(M) * C) return;
  const int64_t r = i / C;
  const int c = int(i % C);
  out(r, c, (xin(r, c) - mean[r]) * rstd[r] * w[c] + b[c]);
}

// Row r's dx, by the whole block: xhat and dy w summed over the row, then dx to out.
// Each thread owns the same channels in both passes, so out may overwrite x: a
// channel's x is read (pass 2) by the thread that then writes its dx. dy is floats, or
// bf16 bits (the SGU's gate under bf16). out(r, c, d) stores d and gives back what it
// holds (d rounded, or added to what was there). xhat keeps the row's xhat where given
// (C channels of shared memory), else pass 2 computes it again; read(c, dy, xhat) sees
// each channel as pass 1 reads it, wrote(c, held) as pass 2 writes it.
template <typename XIn, typename Out, typename TY, typename Read, typename Wrote>
__device__ inline void ln_backward_row(const TY* dyr, XIn xin, int64_t r, float mu, float rs, const float* w, int C,
                                       float* xhat, const Out& out, float* sh, const Read& read, const Wrote& wrote) {
  float sg = 0.f, sgx = 0.f;
  for (int c = threadIdx.x; c < C; c += blockDim.x) {
    const float xh = (xin(r, c) - mu) * rs, d = value(dyr[c]), g = d * w[c];
    if (xhat) xhat[c] = xh;
    read(c, d, xh);
    sg += g;
    sgx += g * xh;
  }
  const float mg = block_sum(sg, sh) / float(C);
  const float mgx = block_sum(sgx, sh) / float(C);
  for (int c = threadIdx.x; c < C; c += blockDim.x) {
    const float xh = xhat ? xhat[c] : (xin(r, c) - mu) * rs;
    wrote(c, out(r, c, rs * (value(dyr[c]) * w[c] - mg - xh * mgx)));
  }
}

// A block per row.
template <typename XIn, typename Out, typename TY>
__global__ void ln_backward_dx_k(const TY* dy, int lddy, XIn xin, const float* mean, const float* rstd,
                                 const float* w, int C, Out out) {
  __shared__ float sh[32];
  __shared__ float xhat[kRowCache];
  const int64_t r = blockIdx.x;
  ln_backward_row(dy + r * lddy, xin, r, mean[r], rstd[r], w, C, C <= kRowCache ? xhat : nullptr, out, sh,
                  [](int, float, float) {}, [](int, float) {});
}

// dw's and db's terms of row r, column c: dy * xhat and dy.
template <typename XIn, typename TY>
struct DwDbTerms {
  const TY* dy;
  int lddy;
  XIn xin;
  const float *mean, *rstd;
  __device__ void operator()(int r, int c, float* s) const {
    const float g = value(dy[int64_t(r) * lddy + c]);
    s[0] += g * (xin(r, c) - mean[r]) * rstd[r];
    s[1] += g;
  }
};

template <typename XIn, typename TY>
__global__ void ln_backward_dwdb_partial_k(const TY* dy, int lddy, XIn xin, const float* mean, const float* rstd,
                                           int M, int C, int rows_per, float* part) {
  column_chunk_sums<2>(M, C, rows_per, DwDbTerms<XIn, TY>{dy, lddy, xin, mean, rstd}, part);
}

// The backward in one pass over the rows, for rows of up to kFusedColumns channels: a
// block per chunk of rows, taking them one after another as ln_backward_dx_k takes its
// row, with each channel's dw and db terms (and, K = 3, what out holds: the SGU's gate
// sums dU into the in-projection's bias) added up by the thread that owns the channel,
// in shared memory; the chunk's sums go to part[(chunk * K + k) * C + c]. The unfused
// backward (below) reads dy and x twice: once for dw and db, once for dx. On the CUDA
// emulator 16 channels, so that the tests take both (the variants' d 16 and split gate
// fused, their other gates of 32 not).
#if defined(GMLP_CUDA_EMULATED)
constexpr int kFusedColumns = 16;
#else
constexpr int kFusedColumns = 2048;
#endif
// About 512 chunks whatever M, at least 8 rows each: a guess for a profile to tune
// (more chunks, more blocks to hide a row's latency; fewer, fewer partial sums).
inline int fused_rows_per(int M) { return M > 8 * 512 ? (M + 511) / 512 : 8; }

template <int K, typename XIn, typename Out, typename TY>
__global__ void ln_backward_fused_k(const TY* dy, int lddy, XIn xin, const float* mean, const float* rstd,
                                    const float* w, int M, int C, int rows_per, Out out, float* part) {
  __shared__ float sh[32];
  __shared__ float xhat[kFusedColumns];
  __shared__ float acc[K][kFusedColumns];
  for (int c = threadIdx.x; c < C; c += blockDim.x)
    for (int k = 0; k < K; ++k) acc[k][c] = 0.f;
  const int64_t r0 = int64_t(blockIdx.x) * rows_per, r1 = r0 + rows_per < M ? r0 + rows_per : M;
  for (int64_t r = r0; r < r1; ++r)  // the same rows for every thread: each reaches the barriers
    ln_backward_row(
        dy + r * lddy, xin, r, mean[r], rstd[r], w, C, xhat, out, sh,
        [&](int c, float d, float xh) {
          acc[0][c] += d * xh;
          acc[1][c] += d;
        },
        [&](int c, float held) {
          if constexpr (K == 3) acc[2][c] += held;
        });
  for (int c = threadIdx.x; c < C; c += blockDim.x)
    for (int k = 0; k < K; ++k) part[(int64_t(blockIdx.x) * K + k) * C + c] = acc[k][c];
}

// The whole backward; where dsum is given, the column sums of what out holds after it
// are added to dsum too. Fused where the rows fit; else dw and db first (they read x,
// which out may overwrite), then dx, then the sums of what out wrote (out.column_sums).
template <typename XIn, typename Out, typename TY>
void layernorm_backward_with(const TY* dy, int lddy, XIn xin, const float* mean, const float* rstd, const float* w,
                             int M, int C, Out out, float* dw, float* db, float* dsum = nullptr) {
  if (M <= 0) return;
  if (C <= kFusedColumns) {
    const int rows_per = fused_rows_per(M), chunks = (M + rows_per - 1) / rows_per, K = dsum ? 3 : 2;
    float* part = static_cast<float*>(scratch(sizeof(float) * size_t(K) * size_t(chunks) * C));
    if (dsum)
      GMLP_LAUNCH(ln_backward_fused_k<3>, unsigned(chunks), kRowThreads)(dy, lddy, xin, mean, rstd, w, M, C, rows_per,
                                                                         out, part);
    else
      GMLP_LAUNCH(ln_backward_fused_k<2>, unsigned(chunks), kRowThreads)(dy, lddy, xin, mean, rstd, w, M, C, rows_per,
                                                                         out, part);
    finish_column_sums(part, chunks, K, C, dw, db, dsum);
    check_launch("layernorm backward (fused)");
    return;
  }
  const int rows_per = rows_per_chunk(M), chunks = (M + rows_per - 1) / rows_per;
  float* part = static_cast<float*>(scratch(sizeof(float) * 2 * size_t(chunks) * C));
  GMLP_LAUNCH(ln_backward_dwdb_partial_k, column_sum_grid(C, chunks), column_sum_block())(dy, lddy, xin, mean, rstd, M,
                                                                                          C, rows_per, part);
  finish_column_sums(part, chunks, 2, C, dw, db, nullptr);
  GMLP_LAUNCH(ln_backward_dx_k, unsigned(M), kRowThreads)(dy, lddy, xin, mean, rstd, w, C, out);
  check_launch("layernorm backward");
  if (dsum) out.column_sums(M, C, dsum);
}

}  // namespace gmlp::cuda
