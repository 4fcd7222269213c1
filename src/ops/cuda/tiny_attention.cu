// aMLP's tiny attention on the device (tiny_attention.cpp's plan): row b's Q, K and V
// are strided views of qkv, so each of its products is one GEMM without copies; the
// masked softmax and its backward are a block per score row. Padding lengths are read
// on the device.
#include "ops/cuda/common.cuh"

namespace gmlp::cuda {
namespace {

constexpr int kRowThreads = 128;

// Row i of P_b: softmax over keys j < min(i + 1, len) (causal) or len, zero elsewhere.
__global__ void k_softmax(float* P, int T, const int32_t* lengths, int b, bool causal) {
  __shared__ float sh[32];
  const int i = blockIdx.x;
  const int len = lengths ? lengths[b] : T;
  const int keys = causal ? min(i + 1, len) : len;
  float* row = P + int64_t(i) * T;
  const float inv = block_softmax_exp(row, keys, sh);
  for (int j = threadIdx.x; j < T; j += blockDim.x) row[j] = j < keys ? row[j] * inv : 0.f;
}

// dS = P * (dP - rowsum(dP * P)) * scale, in place over dP.
__global__ void k_softmax_backward(const float* P, float* dP, int T, float scale) {
  __shared__ float sh[32];
  const int i = blockIdx.x;
  const float* pr = P + int64_t(i) * T;
  float* dr = dP + int64_t(i) * T;
  float dot = 0.f;
  for (int j = threadIdx.x; j < T; j += blockDim.x) dot += pr[j] * dr[j];
  dot = block_sum(dot, sh);
  for (int j = threadIdx.x; j < T; j += blockDim.x) dr[j] = pr[j] * (dr[j] - dot) * scale;
}

}  // namespace

void tiny_attention_forward(const ops::AttnParams& p, const float* H, int T, int B, float* qkv, float* P, float* O,
                            float* A) {
  const int M = T * B, da = p.da, q3 = 3 * da;
  linear_forward(H, M, p.d, p.qkv_w, p.qkv_b, q3, qkv);
  const float scale = 1.f / sqrtf(float(da));
  for (int b = 0; b < B; ++b) {
    const float* Q = qkv + int64_t(b) * q3;
    float* Pb = P + int64_t(b) * T * T;
    gemm(false, true, T, T, da, scale, Q, B * q3, Q + da, B * q3, 0.f, Pb, T);
    GMLP_LAUNCH(k_softmax, unsigned(T), kRowThreads)(Pb, T, p.lengths, b, p.causal);
    check_launch("attention softmax");
    gemm(false, false, T, da, T, 1.f, Pb, T, Q + 2 * da, B * q3, 0.f, O + int64_t(b) * da, B * da);
  }
  linear_forward(O, M, da, p.out_w, p.out_b, p.dout, A);
}

void tiny_attention_backward(const ops::AttnParams& p, const ops::AttnGrads& g, const float* dA, const float* H, int T,
                             int B, const float* qkv, const float* P, const float* O, float* dH, float* dO, float* dP,
                             float* dqkv) {
  const int M = T * B, da = p.da, q3 = 3 * da;
  linear_backward(dA, O, M, da, p.out_w, p.dout, dO, false, g.out_w, g.out_b);
  const float scale = 1.f / sqrtf(float(da));
  for (int b = 0; b < B; ++b) {
    const float* Q = qkv + int64_t(b) * q3;
    const float* Pb = P + int64_t(b) * T * T;
    const float* dOb = dO + int64_t(b) * da;
    float* dQ = dqkv + int64_t(b) * q3;
    gemm(true, false, T, da, T, 1.f, Pb, T, dOb, B * da, 0.f, dQ + 2 * da, B * q3);
    gemm(false, true, T, T, da, 1.f, dOb, B * da, Q + 2 * da, B * q3, 0.f, dP, T);
    GMLP_LAUNCH(k_softmax_backward, unsigned(T), kRowThreads)(Pb, dP, T, scale);
    check_launch("attention softmax backward");
    gemm(false, false, T, da, T, 1.f, dP, T, Q + da, B * q3, 0.f, dQ, B * q3);
    gemm(true, false, T, da, T, 1.f, dP, T, Q, B * q3, 0.f, dQ + da, B * q3);
  }
  linear_backward(dqkv, H, M, p.d, p.qkv_w, q3, dH, true, g.qkv_w, g.qkv_b);
}

}  // namespace gmlp::cuda
