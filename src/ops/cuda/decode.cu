// The cached decoder's one-token ops on the device (decode.cpp): the caches stay in
// device memory; each launch covers every stream stepped at once. decode_layernorm is
// the LayerNorm kernel of layernorm.cu with destination rows.
#include "ops/cuda/common.cuh"

namespace gmlp::cuda {
namespace {

__global__ void k_decode_embed(const float* E, int d, const int32_t* tokens, const int32_t* pos, int R,
                               const float* pe, float* x) {
  const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= int64_t(R) * d) return;
  const int r = int(i / d), c = int(i % d);
  x[i] = E[int64_t(tokens[r]) * d + c] + (pe ? pe[int64_t(pos[r]) * d + c] : 0.f);
}

// Block (r, head k, channel tile): a thread per channel c of the head, summing the
// stream's cached gate rows j <= i in order (coalesced across c).
__global__ void k_decode_mix(const float* G, int n, int g, int gh, const float* W, int64_t wsz, bool toeplitz,
                             const float* bias, const int32_t* stream, const int32_t* pos, float* F) {
  const int r = blockIdx.x, k = blockIdx.y;
  const int c = blockIdx.z * blockDim.x + threadIdx.x;
  if (c >= gh) return;
  const int i = pos[r];
  const float* Gs = G + int64_t(stream[r]) * n * g + int64_t(k) * gh + c;
  const float* w = W + k * wsz;
  float acc = bias[int64_t(k) * n + i];
  for (int j = 0; j <= i; ++j) acc += (toeplitz ? w[i - j] : w[int64_t(i) * n + j]) * Gs[int64_t(j) * g];
  F[int64_t(r) * g + int64_t(k) * gh + c] = acc;
}

// Row r of src [R, C] into the cache [streams, n, C] at (stream[r], pos[r]).
__global__ void k_put_rows(const float* src, int R, int C, const int32_t* stream, const int32_t* pos, int n,
                           float* cache) {
  const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= int64_t(R) * C) return;
  const int r = int(i / C), c = int(i % C);
  cache[(int64_t(stream[r]) * n + pos[r]) * C + c] = src[i];
}

// A block per row: the scores of its query against the stream's keys j <= i, their
// softmax (kept in P), then O = P V with a thread per value channel.
__global__ void k_decode_attend(const float* qkv, int n, int da, const int32_t* stream, const int32_t* pos, float* P,
                                float* O) {
  __shared__ float sh[32];
  const int r = blockIdx.x, i = pos[r], q3 = 3 * da;
  const float* K = qkv + int64_t(stream[r]) * n * q3;
  const float* q = K + int64_t(i) * q3;
  float* Pr = P + int64_t(r) * n;
  const float scale = 1.f / sqrtf(float(da));
  for (int j = threadIdx.x; j <= i; j += blockDim.x) {
    const float* k = K + int64_t(j) * q3 + da;
    float acc = 0.f;
    for (int c = 0; c < da; ++c) acc += q[c] * k[c];
    Pr[j] = scale * acc;
  }
  const float inv = block_softmax_exp(Pr, i + 1, sh);
  __syncthreads();  // every Pr[j] written before any thread reads them all
  for (int c = threadIdx.x; c < da; c += blockDim.x) {
    float acc = 0.f;
    for (int j = 0; j <= i; ++j) acc += Pr[j] * inv * K[int64_t(j) * q3 + 2 * da + c];
    O[int64_t(r) * da + c] = acc;
  }
}

__global__ void k_add(float* y, const float* x, int64_t n) {
  const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n) y[i] += x[i];
}

}  // namespace

void decode_embed(const float* E, int d, const int32_t* tokens, const int32_t* pos, int R, const float* pe,
                  float* x) {
  if (R <= 0) return;
  GMLP_LAUNCH(k_decode_embed, blocks_for(int64_t(R) * d), kThreads)(E, d, tokens, pos, R, pe, x);
  check_launch("decode embed");
}

void decode_linear(const float* W, int out, int in, const float* X, int R, const float* b, float* Y,
                   bool accumulate) {
  if (R <= 0) return;
  if (!accumulate) {
    linear_forward(X, R, in, W, b, out, Y);
    return;
  }
  residual_bias(Y, b, R, out, Y);
  gemm(false, true, R, out, in, 1.f, X, in, W, in, 1.f, Y, out);
}

void decode_mix(const float* G, int n, int g, int heads, const float* W, int64_t wsz, bool toeplitz,
                const float* bias, const int32_t* stream, const int32_t* pos, int R, float* F) {
  if (R <= 0) return;
  const int gh = g / heads, threads = 128;
  const dim3 grid(unsigned(R), unsigned(heads), blocks_for(gh, threads));
  GMLP_LAUNCH(k_decode_mix, grid, threads)(G, n, g, gh, W, wsz, toeplitz, bias, stream, pos, F);
  check_launch("decode mix");
}

void decode_attention(const ops::AttnParams& p, const float* h, const int32_t* stream, const int32_t* pos, int R,
                      int n, float* qkv, float* P, float* O, float* A, float* F) {
  if (R <= 0) return;
  const int q3 = 3 * p.da;
  // The new rows' q|k|v, then into the cache: the stream's keys now reach position i.
  float* rows = static_cast<float*>(scratch(sizeof(float) * size_t(R) * q3));
  linear_forward(h, R, p.d, p.qkv_w, p.qkv_b, q3, rows);
  GMLP_LAUNCH(k_put_rows, blocks_for(int64_t(R) * q3), kThreads)(rows, R, q3, stream, pos, n, qkv);
  check_launch("decode attention (cache)");
  GMLP_LAUNCH(k_decode_attend, unsigned(R), 128)(qkv, n, p.da, stream, pos, P, O);
  check_launch("decode attention");
  linear_forward(O, R, p.da, p.out_w, p.out_b, p.dout, A);
  GMLP_LAUNCH(k_add, blocks_for(int64_t(R) * p.dout), kThreads)(F, A, int64_t(R) * p.dout);
  check_launch("decode attention (add)");
}

}  // namespace gmlp::cuda
