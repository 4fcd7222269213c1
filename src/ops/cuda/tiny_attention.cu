// aMLP's tiny attention on the device (tiny_attention.cpp's plan): row b's Q, K and V
// are strided views of qkv, so each product is one batched GEMM over the batch's rows
// without copies (q3 floats between one row's Q and the next's); the masked softmax and
// its backward are a block per (score row, batch row). Padding lengths are read on the
// device. The backward's dP holds every batch row's scores (attention_rows_at_once). The
// batch rows run along the grid's y, which holds 65,535 blocks: past that many, each
// block takes every gridDim.y-th batch row (a block's whole, so its reductions still
// meet every thread).
#include "ops/cuda/common.cuh"

namespace gmlp::cuda {
namespace {

constexpr int kRowThreads = 128;

dim3 score_rows(int T, int B) { return dim3(unsigned(T), unsigned(std::min(B, 65535))); }

// Row i of P_b: softmax over keys j < min(i + 1, len) (causal) or len, zero elsewhere.
__global__ void k_softmax(float* P, int T, int B, const int32_t* lengths, bool causal) {
  __shared__ float sh[32];
  const int i = blockIdx.x;
  for (int b = blockIdx.y; b < B; b += gridDim.y) {
    const int len = lengths ? lengths[b] : T;
    const int keys = causal ? min(i + 1, len) : len;
    float* row = P + (int64_t(b) * T + i) * T;
    const float inv = block_softmax_exp(row, keys, sh);
    for (int j = threadIdx.x; j < T; j += blockDim.x) row[j] = j < keys ? row[j] * inv : 0.f;
  }
}

// dS = P * (dP - rowsum(dP * P)) * scale, in place over dP; row i of each batch row.
__global__ void k_softmax_backward(const float* P, float* dP, int T, int B, float scale) {
  __shared__ float sh[32];
  for (int b = blockIdx.y; b < B; b += gridDim.y) {
    const int64_t r = int64_t(b) * T + blockIdx.x;
    const float* pr = P + r * T;
    float* dr = dP + r * T;
    float dot = 0.f;
    for (int j = threadIdx.x; j < T; j += blockDim.x) dot += pr[j] * dr[j];
    dot = block_sum(dot, sh);
    for (int j = threadIdx.x; j < T; j += blockDim.x) dr[j] = pr[j] * (dr[j] - dot) * scale;
  }
}

}  // namespace

void tiny_attention_forward(const ops::AttnParams& p, const float* H, int T, int B, float* qkv, float* P, float* O,
                            float* A) {
  const int M = T * B, da = p.da, q3 = 3 * da;
  const int64_t TT = int64_t(T) * T;
  linear_forward(H, M, p.d, p.qkv_w, p.qkv_b, q3, qkv);
  if (M <= 0) return;  // no launch of an empty grid
  const float scale = 1.f / sqrtf(float(da));
  // P_b = scale Q_b K_b^T; then the softmax; O_b = P_b V_b.
  gemm_batched(false, true, T, T, da, scale, qkv, B * q3, q3, qkv + da, B * q3, q3, 0.f, P, T, TT, B);
  GMLP_LAUNCH(k_softmax, score_rows(T, B), kRowThreads)(P, T, B, p.lengths, p.causal);
  check_launch("attention softmax");
  gemm_batched(false, false, T, da, T, 1.f, P, T, TT, qkv + 2 * da, B * q3, q3, 0.f, O, B * da, da, B);
  linear_forward(O, M, da, p.out_w, p.out_b, p.dout, A);
}

void tiny_attention_backward(const ops::AttnParams& p, const ops::AttnGrads& g, const float* dA, const float* H, int T,
                             int B, const float* qkv, const float* P, const float* O, float* dH, float* dO, float* dP,
                             float* dqkv) {
  const int M = T * B, da = p.da, q3 = 3 * da, ld = B * q3;
  const int64_t TT = int64_t(T) * T;
  linear_backward(dA, O, M, da, p.out_w, p.dout, dO, false, g.out_w, g.out_b);
  if (M <= 0) return;
  const float scale = 1.f / sqrtf(float(da));
  // dV = P^T dO;  dP = dO V^T;  dS = P * (dP - rowsum(dP * P)) * scale;  dQ = dS K;  dK = dS^T Q.
  gemm_batched(true, false, T, da, T, 1.f, P, T, TT, dO, B * da, da, 0.f, dqkv + 2 * da, ld, q3, B);
  gemm_batched(false, true, T, T, da, 1.f, dO, B * da, da, qkv + 2 * da, ld, q3, 0.f, dP, T, TT, B);
  GMLP_LAUNCH(k_softmax_backward, score_rows(T, B), kRowThreads)(P, dP, T, B, scale);
  check_launch("attention softmax backward");
  gemm_batched(false, false, T, da, T, 1.f, dP, T, TT, qkv + da, ld, q3, 0.f, dqkv, ld, q3, B);
  gemm_batched(true, false, T, da, T, 1.f, dP, T, TT, qkv, ld, q3, 0.f, dqkv + da, ld, q3, B);
  linear_backward(dqkv, H, M, p.d, p.qkv_w, q3, dH, true, g.qkv_w, g.qkv_b);
}

}  // namespace gmlp::cuda
