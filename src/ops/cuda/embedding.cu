// The inputs on the device: token embedding (with sinusoidal positions) and its
// backward, and images cut into patch rows (embedding.cpp and patch.cpp).
#include "ops/cuda/common.cuh"

namespace gmlp::cuda {
namespace {

__global__ void k_embed(const float* E, int d, const int32_t* tokens, int M, int B, const float* pe, float* x) {
  const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= int64_t(M) * d) return;
  const int64_t r = i / d;
  const int c = int(i % d);
  x[i] = E[int64_t(tokens[r]) * d + c] + (pe ? pe[(r / B) * d + c] : 0.f);
}

// Repeated tokens collide on a row of dE: atomics (the sum's order, and so its last
// bits, vary from run to run; the CPU op is the exact reference).
__global__ void k_embed_backward(const float* dx, int d, const int32_t* tokens, int M, float* dE) {
  const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= int64_t(M) * d) return;
  const int64_t r = i / d;
  atomicAdd(dE + int64_t(tokens[r]) * d + i % d, dx[i]);
}

__global__ void k_patches(const float* images, int B, int C, int Hi, int Wi, int ph, int pw, int n, float* out) {
  const int P = C * ph * pw, gw = Wi / pw;
  const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= int64_t(n) * B * P) return;
  const int64_t row = i / P;
  const int e = int(i % P), t = int(row / B), b = int(row % B);
  const int c = e / (ph * pw), py = (e / pw) % ph, px = e % pw, gy = t / gw, gx = t % gw;
  out[i] = images[((int64_t(b) * C + c) * Hi + gy * ph + py) * Wi + gx * pw + px];
}

}  // namespace

void embedding_forward(const float* E, int d, const int32_t* tokens, int M, int B, const float* pe, float* x) {
  GMLP_LAUNCH(k_embed, blocks_for(int64_t(M) * d), kThreads)(E, d, tokens, M, B, pe, x);
  check_launch("embedding");
}

void embedding_backward(const float* dx, int d, const int32_t* tokens, int M, float* dE) {
  GMLP_LAUNCH(k_embed_backward, blocks_for(int64_t(M) * d), kThreads)(dx, d, tokens, M, dE);
  check_launch("embedding backward");
}

void extract_patches(const float* images, int B, int C, int Hi, int Wi, int ph, int pw, float* out) {
  const int n = (Hi / ph) * (Wi / pw);
  GMLP_LAUNCH(k_patches, blocks_for(int64_t(n) * B * C * ph * pw), kThreads)(images, B, C, Hi, Wi, ph, pw, n, out);
  check_launch("patches");
}

}  // namespace gmlp::cuda
