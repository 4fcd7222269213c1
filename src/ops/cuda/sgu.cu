// The spatial gating unit on the device (sgu.cpp's steps, the same order and aliasing
// rules): LayerNorm of the gate, padded rows zeroed, the per-head spatial products,
// then bias, aMLP's attention and the combine in one elementwise pass.
#include <algorithm>

#include "ops/cuda/common.cuh"

namespace gmlp::cuda {
namespace {

struct Dims {
  int g, goff, gh;
};
Dims dims(const ops::SguParams& p, int f) {
  const int g = p.kind == Sgu::split ? f / 2 : f;
  return {g, p.kind == Sgu::split ? f / 2 : 0, g / p.heads};
}

__device__ inline float combine(Sgu kind, float z, float f) {
  switch (kind) {
    case Sgu::split:
    case Sgu::multiplicative:
      return z * f;
    case Sgu::additive:
      return z + f;
    default:
      return f;
  }
}

// F += bias (+ extra); S = combine(Z, F). S may be the gate buffer (dead by now).
__global__ void k_bias_combine(Sgu kind, const float* Z, int f, float* F, int M, int B, int g, int gh,
                               const float* bias, int n, const float* extra, float* S) {
  const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= int64_t(M) * g) return;
  const int64_t r = i / g;
  const int c = int(i % g), t = int(r / B), bi = min(t, n - 1);
  const float fr = F[i] + bias[(c / gh) * n + bi] + (extra ? extra[i] : 0.f);
  F[i] = fr;
  S[i] = combine(kind, Z[r * f + c], fr);
}

__global__ void k_combine(Sgu kind, const float* Z, int ldz, const float* F, int M, int g, float* S) {
  const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= int64_t(M) * g) return;
  const int64_t r = i / g;
  S[i] = combine(kind, Z[r * ldz + i % g], F[i]);
}

// dF = dS * Z1 (split, multiplicative) or dS; split: dZ1 = dS * F, over Z1 when dZ is Z
// (each element read, then written, by one thread).
__global__ void k_back_gate(Sgu kind, const float* dS, const float* Z, int f, const float* F, int M, int g,
                            float* dZ, float* dF) {
  const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= int64_t(M) * g) return;
  const int64_t r = i / g;
  const int c = int(i % g);
  const float ds = dS[i], z = Z[r * f + c];
  dF[i] = (kind == Sgu::split || kind == Sgu::multiplicative) ? ds * z : ds;
  if (kind == Sgu::split) dZ[r * f + c] = ds * F[i];
}

// Bias gradient: one thread per (head k, bias entry i); entry n - 1 also takes rows
// t >= n (a Toeplitz model run past its window). Fixed order, in double.
__global__ void k_bias_grad(const float* dF, int T, int B, int g, int gh, int heads, int n, float* db) {
  const int idx = blockIdx.x * blockDim.x + threadIdx.x;
  if (idx >= heads * n) return;
  const int k = idx / n, i = idx % n;
  const int t1 = i == n - 1 ? T : min(T, i + 1);
  double s = 0.0;
  for (int t = i; t < t1; ++t)
    for (int b = 0; b < B; ++b) {
      const float* row = dF + (int64_t(t) * B + b) * g + k * gh;
      for (int c = 0; c < gh; ++c) s += row[c];
    }
  db[k * n + i] += float(s);
}

// Non-split forms: dZ += dS (additive) or dS * F (multiplicative), the direct path.
__global__ void k_direct(bool mult, const float* dS, const float* F, int M, int g, int f, float* dZ) {
  const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= int64_t(M) * g) return;
  const int64_t r = i / g;
  dZ[r * f + i % g] += mult ? dS[i] * F[i] : dS[i];
}

template <typename Fn>
void for_each_slice(const ops::SguParams& p, float* dW, int B, const Dims& d, Fn fn) {
  if (p.heads == 1) {
    fn(p.W, dW, 0, B * d.g);
    return;
  }
  for (int k = 0; k < p.heads; ++k)
    for (int b = 0; b < B; ++b)
      fn(p.W + k * p.w_head_stride, dW ? dW + k * p.w_head_stride : nullptr, b * d.g + k * d.gh, d.gh);
}

}  // namespace

void sgu_forward(const ops::SguParams& p, const float* Z, int T, int B, int f, float* S, float* gmean, float* grstd,
                 float* F, float* G, const float* extra) {
  const Dims d = dims(p, f);
  const int M = T * B, ld = B * d.g;
  layernorm_forward(Z + d.goff, f, M, d.g, p.norm_w, p.norm_b, p.eps, G, d.g, gmean, grstd);
  zero_padding(p.lengths, T, B, d.g, G);
  for_each_slice(p, nullptr, B, d, [&](const float* W, float*, int off, int cols) {
    spatial_mix_forward(W, p.ldw, p.causal, T, cols, G + off, ld, F + off);
  });
  k_bias_combine<<<blocks_for(int64_t(M) * d.g), kThreads>>>(p.kind, Z, f, F, M, B, d.g, d.gh, p.bias, p.n, extra, S);
  check_launch("sgu bias + combine");
}

void sgu_combine(Sgu kind, const float* Z, int ldz, const float* F, int M, int g, float* S) {
  k_combine<<<blocks_for(int64_t(M) * g), kThreads>>>(kind, Z, ldz, F, M, g, S);
  check_launch("sgu combine");
}

void sgu_backward(const ops::SguParams& p, const ops::SguGrads& g, const float* dS, const float* Z, int T, int B, int f,
                  const float* gmean, const float* grstd, const float* F, float* dZ, float* G, float* dF, float* dG) {
  const Dims d = dims(p, f);
  const int M = T * B, ld = B * d.g;
  k_back_gate<<<blocks_for(int64_t(M) * d.g), kThreads>>>(p.kind, dS, Z, f, F, M, d.g, dZ, dF);
  check_launch("sgu backward (gate)");
  layernorm_apply(Z + d.goff, f, M, d.g, p.norm_w, p.norm_b, gmean, grstd, G, d.g);
  zero_padding(p.lengths, T, B, d.g, G);
  for_each_slice(p, g.W, B, d, [&](const float* W, float* dW, int off, int cols) {
    spatial_mix_backward(W, p.ldw, p.causal, T, cols, G + off, dF + off, ld, dG + off, dW);
  });
  zero_padding(p.lengths, T, B, d.g, dG);
  k_bias_grad<<<blocks_for(p.heads * p.n), kThreads>>>(dF, T, B, d.g, d.gh, p.heads, p.n, g.bias);
  check_launch("sgu bias gradient");
  layernorm_backward(dG, d.g, Z + d.goff, f, gmean, grstd, p.norm_w, M, d.g, dZ + d.goff, f, false, g.norm_w,
                     g.norm_b);
  if (p.kind == Sgu::additive || p.kind == Sgu::multiplicative) {
    k_direct<<<blocks_for(int64_t(M) * d.g), kThreads>>>(p.kind == Sgu::multiplicative, dS, F, M, d.g, f, dZ);
    check_launch("sgu backward (direct path)");
  }
}

}  // namespace gmlp::cuda
