#pragma once
// LayerNorm's kernels, written once over where x comes from and where dx goes: the
// generic op (layernorm.cu) reads x and writes dx as they are; the SGU's gate
// (sgu.cu) normalises GELU(U), recomputed as it reads U, and folds GELU's derivative
// (and the non-split forms' direct path) into dU, so Z and dZ are never stored. Row r,
// channel c of x is xin(r, c); the backward's dL/dx goes to out(r, c, d). Rows of up to
// held_columns() channels are held in registers (layernorm_rows.cuh); wider rows take the
// kernels here, a block per row looping over its channels.
#include "ops/cuda/layernorm_rows.cuh"

namespace gmlp::cuda {

// A row of up to this many channels is kept in shared memory (16 KB) between a kernel's
// passes over it: x read (for the SGU's gate, GELU(U) evaluated) once instead of each
// pass. Each thread reads back only the channels it wrote, so no barrier is needed. On
// the CUDA emulator 16, so that the tests' rows take both paths.
#if defined(GMLP_CUDA_EMULATED)
constexpr int kRowCache = 16;
#else
constexpr int kRowCache = 4096;
#endif

// A block per row, looping over its channels.
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
    if constexpr (settles<XIn>) xin.settle(r, c, v);
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

// The forward over M rows (mean and rstd kept where given).
template <typename XIn, typename YOut>
void layernorm_forward_with(XIn xin, int M, int C, const float* w, const float* b, float eps, YOut out, float* mean,
                            float* rstd) {
  if (M <= 0) return;
  if (C <= held_columns())
    layernorm_forward_held(xin, M, C, w, b, eps, out, mean, rstd);
  else
    GMLP_LAUNCH(ln_forward_k, unsigned(M), kRowThreads)(xin, C, w, b, eps, out, mean, rstd);
  check_launch("layernorm forward");
}

// The rows normalised with their saved statistics (the SGU's backward rebuilds its gate
// so under bf16): a thread per channel, its rows in turn (columns_by_rows).
template <typename XIn, typename YOut>
__global__ void ln_apply_k(XIn xin, int M, int C, const float* w, const float* b, const float* mean, const float* rstd,
                           YOut out) {
  const int c = column();
  if (c >= C) return;
  const float wc = w[c], bc = b[c];
  for (int64_t r = first_row(); r < M; r += row_stride()) out(r, c, (xin(r, c) - mean[r]) * rstd[r] * wc + bc);
}

template <typename XIn, typename YOut>
void layernorm_apply_with(XIn xin, int M, int C, const float* w, const float* b, const float* mean, const float* rstd,
                          YOut out) {
  if (M <= 0 || C <= 0) return;
  const Launch l = columns_by_rows_batched(C, M);
  GMLP_LAUNCH(ln_apply_k, l.grid, l.block)(xin, M, C, w, b, mean, rstd, out);
}

// A block per row: xhat and dy w summed over the row, then dx to out. Each thread owns
// the same channels in both passes, so out may overwrite x: a channel's x is read (pass
// 2) by the thread that then writes its dx. dy is floats, or bf16 bits (the SGU's gate
// under bf16). out(r, c, d) stores d. The row's xhat is kept in shared memory where it
// fits kRowCache, else pass 2 computes it again.
template <typename XIn, typename Out, typename TY>
__global__ void ln_backward_dx_k(const TY* dy, int lddy, XIn xin, const float* mean, const float* rstd,
                                 const float* w, int C, Out out) {
  __shared__ float2 sh[32];
  __shared__ float row[kRowCache];
  const int64_t r = blockIdx.x;
  const TY* dyr = dy + r * lddy;
  const float mu = mean[r], rs = rstd[r];
  float* xhat = C <= kRowCache ? row : nullptr;
  float sg = 0.f, sgx = 0.f;
  for (int c = threadIdx.x; c < C; c += blockDim.x) {
    const float xh = (xin(r, c) - mu) * rs, g = value(dyr[c]) * w[c];
    if (xhat) xhat[c] = xh;
    sg += g;
    sgx += g * xh;
  }
  const float2 sums = block_sum(float2{sg, sgx}, sh);
  const float mg = sums.x / float(C), mgx = sums.y / float(C);
  for (int c = threadIdx.x; c < C; c += blockDim.x) {
    const float xh = xhat ? xhat[c] : (xin(r, c) - mu) * rs;
    out(r, c, rs * (value(dyr[c]) * w[c] - mg - xh * mgx));
  }
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

// The whole backward; where dsum is given, the column sums of what out holds after it
// are added to dsum too. In one pass where the rows are held (layernorm_rows.cuh); else
// dw and db first (they read x, which out may overwrite), then dx, then the sums of what
// out wrote (out.column_sums).
template <typename XIn, typename Out, typename TY>
void layernorm_backward_with(const TY* dy, int lddy, XIn xin, const float* mean, const float* rstd, const float* w,
                             int M, int C, Out out, float* dw, float* db, float* dsum = nullptr) {
  if (M <= 0) return;
  if (C <= held_columns()) {
    layernorm_backward_held(dy, lddy, xin, mean, rstd, w, M, C, out, dw, db, dsum);
    check_launch("layernorm backward (rows held)");
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
