// LayerNorm on the device: a block per row for the statistics and dx; dw and db as
// column sums (partial sums over row chunks, then a fixed-order finish).
#include "ops/cuda/common.cuh"

namespace gmlp::cuda {
namespace {

constexpr int kRowThreads = 128;

// Row r goes to row rows[r] of y when rows is given (the decoder's gate cache).
__global__ void ln_forward(const float* x, int ldx, int C, const float* w, const float* b, float eps, float* y,
                           int ldy, float* mean, float* rstd, const int32_t* rows) {
  __shared__ float sh[32];
  const int64_t r = blockIdx.x;
  const float* xr = x + r * ldx;
  float s = 0.f;
  for (int c = threadIdx.x; c < C; c += blockDim.x) s += xr[c];
  const float mu = block_sum(s, sh) / float(C);
  float v = 0.f;  // two passes, as the CPU op
  for (int c = threadIdx.x; c < C; c += blockDim.x) {
    const float d = xr[c] - mu;
    v += d * d;
  }
  const float rs = rsqrtf(block_sum(v, sh) / float(C) + eps);
  float* yr = y + (rows ? int64_t(rows[r]) : r) * ldy;
  for (int c = threadIdx.x; c < C; c += blockDim.x) yr[c] = (xr[c] - mu) * rs * w[c] + b[c];
  if (threadIdx.x == 0) {
    if (mean) mean[r] = mu;
    if (rstd) rstd[r] = rs;
  }
}

__global__ void ln_apply(const float* x, int ldx, int M, int C, const float* w, const float* b, const float* mean,
                         const float* rstd, float* y, int ldy) {
  const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= int64_t(M) * C) return;
  const int64_t r = i / C;
  const int c = int(i % C);
  y[r * ldy + c] = (x[r * ldx + c] - mean[r]) * rstd[r] * w[c] + b[c];
}

// Each thread owns the same channels in both passes, so dx may alias x: a channel's x
// is read (pass 2) by the thread that then writes its dx.
__global__ void ln_backward_dx(const float* dy, int lddy, const float* x, int ldx, const float* mean,
                               const float* rstd, const float* w, int C, float* dx, int lddx, bool accumulate) {
  __shared__ float sh[32];
  const int64_t r = blockIdx.x;
  const float* xr = x + r * ldx;
  const float* dyr = dy + r * lddy;
  const float mu = mean[r], rs = rstd[r];
  float sg = 0.f, sgx = 0.f;
  for (int c = threadIdx.x; c < C; c += blockDim.x) {
    const float xh = (xr[c] - mu) * rs, g = dyr[c] * w[c];
    sg += g;
    sgx += g * xh;
  }
  const float mg = block_sum(sg, sh) / float(C);
  const float mgx = block_sum(sgx, sh) / float(C);
  float* dxr = dx + r * lddx;
  for (int c = threadIdx.x; c < C; c += blockDim.x) {
    const float xh = (xr[c] - mu) * rs;
    const float d = rs * (dyr[c] * w[c] - mg - xh * mgx);
    dxr[c] = accumulate ? dxr[c] + d : d;
  }
}

__global__ void ln_backward_dwdb_partial(const float* dy, int lddy, const float* x, int ldx, const float* mean,
                                         const float* rstd, int M, int C, int rows_per, float* part) {
  const int c = blockIdx.x * blockDim.x + threadIdx.x;
  if (c >= C) return;
  const int r0 = blockIdx.y * rows_per, r1 = min(M, r0 + rows_per);
  float sw = 0.f, sb = 0.f;
  for (int r = r0; r < r1; ++r) {
    const float g = dy[int64_t(r) * lddy + c];
    sw += g * (x[int64_t(r) * ldx + c] - mean[r]) * rstd[r];
    sb += g;
  }
  part[(int64_t(blockIdx.y) * 2) * C + c] = sw;
  part[(int64_t(blockIdx.y) * 2 + 1) * C + c] = sb;
}

__global__ void ln_backward_dwdb_finish(const float* part, int chunks, int C, float* dw, float* db) {
  const int c = blockIdx.x * blockDim.x + threadIdx.x;
  if (c >= C) return;
  float sw = 0.f, sb = 0.f;
  for (int k = 0; k < chunks; ++k) {
    sw += part[(int64_t(k) * 2) * C + c];
    sb += part[(int64_t(k) * 2 + 1) * C + c];
  }
  dw[c] += sw;
  db[c] += sb;
}

}  // namespace

void layernorm_forward(const float* x, int ldx, int M, int C, const float* w, const float* b, float eps, float* y,
                       int ldy, float* mean, float* rstd) {
  if (M <= 0) return;
  ln_forward<<<unsigned(M), kRowThreads>>>(x, ldx, C, w, b, eps, y, ldy, mean, rstd, nullptr);
  check_launch("layernorm forward");
}

void decode_layernorm(const float* x, int ldx, int R, int C, const float* w, const float* b, float eps, float* y,
                      int ldy, const int32_t* rows) {
  if (R <= 0) return;
  ln_forward<<<unsigned(R), kRowThreads>>>(x, ldx, C, w, b, eps, y, ldy, nullptr, nullptr, rows);
  check_launch("decode layernorm");
}

void layernorm_apply(const float* x, int ldx, int M, int C, const float* w, const float* b, const float* mean,
                     const float* rstd, float* y, int ldy) {
  if (M <= 0) return;
  ln_apply<<<blocks_for(int64_t(M) * C), kThreads>>>(x, ldx, M, C, w, b, mean, rstd, y, ldy);
  check_launch("layernorm apply");
}

void layernorm_backward(const float* dy, int lddy, const float* x, int ldx, const float* mean, const float* rstd,
                        const float* w, int M, int C, float* dx, int lddx, bool accumulate_dx, float* dw, float* db) {
  if (M <= 0) return;
  // dw and db first: they read x, which dx may overwrite.
  const int rows_per = 256, chunks = (M + rows_per - 1) / rows_per;
  float* part = static_cast<float*>(scratch(sizeof(float) * 2 * size_t(chunks) * C));
  ln_backward_dwdb_partial<<<dim3(blocks_for(C), unsigned(chunks)), kThreads>>>(dy, lddy, x, ldx, mean, rstd, M, C,
                                                                                rows_per, part);
  ln_backward_dwdb_finish<<<blocks_for(C), kThreads>>>(part, chunks, C, dw, db);
  ln_backward_dx<<<unsigned(M), kRowThreads>>>(dy, lddy, x, ldx, mean, rstd, w, C, dx, lddx, accumulate_dx);
  check_launch("layernorm backward");
}

}  // namespace gmlp::cuda
