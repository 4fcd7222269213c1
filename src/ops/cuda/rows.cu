// The row-wise glue on the device (rows.cpp): residuals, stochastic depth, pooling,
// row selection, and the zeroing of padded rows.
#include "ops/cuda/common.cuh"

namespace gmlp::cuda {
namespace {

// The row-wise passes over M rows of d floats: a thread per channel, its rows in turn
// (columns_by_rows), row r's factor keep[r % B] found by RowWalk's additions, not by
// 64-bit divisions at every value. Row r is batch row r % B.
__global__ void k_residual_bias(const float* x, const float* b, int M, int d, float* out) {
  const int c = column();
  if (c >= d) return;
  const float bc = b[c];
  for (int64_t r = first_row(); r < M; r += row_stride()) out[r * d + c] = x[r * d + c] + bc;
}

__global__ void k_residual_keep(const float* x, const float* keep, const float* h, int M, int B, int d, float* out) {
  const int c = column();
  if (c >= d) return;
  for (RowWalk w(B); w.row < M; w.next()) {
    const int64_t i = w.row * d + c;
    out[i] = fmaf(keep[w.rem], h[i], x[i]);  // as layernorm.cu's XKeepResidual forms it
  }
}

__global__ void k_scale_rows(const float* keep, const float* dx, int M, int B, int d, float* out) {
  const int c = column();
  if (c >= d) return;
  for (RowWalk w(B); w.row < M; w.next()) out[w.row * d + c] = keep[w.rem] * dx[w.row * d + c];
}

// A thread per (b, c): the mean over the row's real positions, in order.
__global__ void k_pool(const float* h, int T, int B, int d, const int32_t* lengths, float* pooled) {
  const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= int64_t(B) * d) return;
  const int b = int(i / d), c = int(i % d);
  const int len = lengths ? lengths[b] : T;
  float s = 0.f;
  for (int t = 0; t < len; ++t) s += h[(int64_t(t) * B + b) * d + c];
  pooled[i] = s / float(len);
}

__global__ void k_pool_backward(const float* dpooled, int T, int B, int d, const int32_t* lengths, float* dh) {
  const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= int64_t(T) * B * d) return;
  const int64_t r = i / d;
  const int c = int(i % d), t = int(r / B), b = int(r % B);
  const int len = lengths ? lengths[b] : T;
  dh[i] = t < len ? dpooled[int64_t(b) * d + c] / float(len) : 0.f;
}

__global__ void k_gather(const float* src, const int32_t* rows, int K, int d, float* dst) {
  const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < int64_t(K) * d) dst[i] = src[int64_t(rows[i / d]) * d + i % d];
}

__global__ void k_scatter(const float* src, const int32_t* rows, int K, int d, float* dst) {
  const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < int64_t(K) * d) dst[int64_t(rows[i / d]) * d + i % d] = src[i];
}

// Floats or bf16 bits: a zero is all bits clear in both.
template <typename E>
__global__ void k_zero_padding(const int32_t* lengths, int T, int B, int C, E* X) {
  const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= int64_t(T) * B * C) return;
  const int64_t r = i / C;
  if (int(r / B) >= lengths[r % B]) X[i] = E(0);
}

template <typename E>
void zero_padding_as(const int32_t* lengths, int T, int B, int C, E* X) {
  if (!lengths) return;
  GMLP_LAUNCH(k_zero_padding, blocks_for(int64_t(T) * B * C), kThreads)(lengths, T, B, C, X);
  check_launch("zero padding");
}

}  // namespace

void residual_bias(const float* x, const float* b, int M, int d, float* out) {
  if (M <= 0 || d <= 0) return;
  const Launch l = columns_by_rows_batched(d, M);
  GMLP_LAUNCH(k_residual_bias, l.grid, l.block)(x, b, M, d, out);
  check_launch("residual + bias");
}

void residual_keep(const float* x, const float* keep, const float* h, int M, int B, int d, float* out) {
  if (M <= 0 || d <= 0) return;
  const Launch l = columns_by_rows_batched(d, M);
  GMLP_LAUNCH(k_residual_keep, l.grid, l.block)(x, keep, h, M, B, d, out);
  check_launch("stochastic-depth residual");
}

void scale_rows(const float* keep, const float* dx, int M, int B, int d, float* out) {
  if (M <= 0 || d <= 0) return;
  const Launch l = columns_by_rows_batched(d, M);
  GMLP_LAUNCH(k_scale_rows, l.grid, l.block)(keep, dx, M, B, d, out);
  check_launch("scale rows");
}

void mean_pool_forward(const float* h, int T, int B, int d, const int32_t* lengths, float* pooled) {
  GMLP_LAUNCH(k_pool, blocks_for(int64_t(B) * d), kThreads)(h, T, B, d, lengths, pooled);
  check_launch("mean pool");
}

void mean_pool_backward(const float* dpooled, int T, int B, int d, const int32_t* lengths, float* dh) {
  GMLP_LAUNCH(k_pool_backward, blocks_for(int64_t(T) * B * d), kThreads)(dpooled, T, B, d, lengths, dh);
  check_launch("mean pool backward");
}

void gather_rows(const float* src, const int32_t* rows, int K, int d, float* dst) {
  if (K <= 0) return;
  GMLP_LAUNCH(k_gather, blocks_for(int64_t(K) * d), kThreads)(src, rows, K, d, dst);
  check_launch("gather rows");
}

void scatter_rows(const float* src, const int32_t* rows, int K, int M, int d, float* dst) {
  check(int(cudaMemset(dst, 0, sizeof(float) * size_t(M) * d)), "cudaMemset");
  if (K <= 0) return;
  GMLP_LAUNCH(k_scatter, blocks_for(int64_t(K) * d), kThreads)(src, rows, K, d, dst);
  check_launch("scatter rows");
}

void zero_padding(const int32_t* lengths, int T, int B, int C, float* X) { zero_padding_as(lengths, T, B, C, X); }
void zero_padding(const int32_t* lengths, int T, int B, int C, uint16_t* X) { zero_padding_as(lengths, T, B, C, X); }

}  // namespace gmlp::cuda
