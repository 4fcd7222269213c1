#pragma once
// The ops gMLP is built from, each a forward/backward pair over raw row-major float
// buffers with explicit dimensions. Rows are tokens in sequence-major order
// (row = t * B + b), so every channel projection is one GEMM with M = T * B.
// Backward functions ACCUMULATE into parameter gradients (dW, db, ...) and, where
// noted, into input gradients; they never allocate per call beyond thread scratch.
#include <cstdint>

namespace gmlp::ops {

// ---- gemm.cpp: C[M,N] = alpha * op(A) * op(B) + beta * C (row-major, via OpenBLAS).
void gemm(bool trans_a, bool trans_b, int M, int N, int K, float alpha, const float* A, int lda,
          const float* B, int ldb, float beta, float* C, int ldc);

// ---- linear.cpp: y[M,out] = x[M,in] W[out,in]^T + b.
void linear_forward(const float* x, int M, int in, const float* W, const float* b, int out, float* y);
// dx (overwritten, unless accumulate_dx) = dy W;  dW += dy^T x;  db += colsum(dy).
void linear_backward(const float* dy, const float* x, int M, int in, const float* W, int out, float* dx,
                     bool accumulate_dx, float* dW, float* db);

// ---- layernorm.cpp: over the C channels of each of M rows; x rows are ldx apart.
// y = (x - mean) * rstd * w + b; saves mean and rstd per row for the backward.
void layernorm_forward(const float* x, int ldx, int M, int C, const float* w, const float* b, float eps, float* y,
                       int ldy, float* mean, float* rstd);
// y = (x - mean) * rstd * w + b with the statistics a forward saved: one pass, and the
// same values layernorm_forward produced (the backward uses it to rebuild outputs).
void layernorm_apply(const float* x, int ldx, int M, int C, const float* w, const float* b, const float* mean,
                     const float* rstd, float* y, int ldy);
// Recomputes x-hat from x, mean, rstd. dx (rows lddx apart) is overwritten, or added
// to when accumulate_dx; dw += sum dy * xhat; db += sum dy. dx may alias x (same
// stride): each element of x is read before the same element of dx is written.
void layernorm_backward(const float* dy, int lddy, const float* x, int ldx, const float* mean, const float* rstd,
                        const float* w, int M, int C, float* dx, int lddx, bool accumulate_dx, float* dw,
                        float* db);

// ---- gelu.cpp: exact (erf) or tanh-approximated GELU, elementwise over n values.
void gelu_forward(const float* x, float* y, int64_t n, bool tanh_approx);
// u[r, :] += b, then y = GELU(u), in one pass over the M rows of n values: the bias
// of the projection before a GELU, so the GEMM need not be seeded with it.
void bias_gelu_forward(float* u, const float* b, int M, int n, float* y, bool tanh_approx);
// dx = dy * gelu'(x) (dx may alias dy).
void gelu_backward(const float* x, const float* dy, float* dx, int64_t n, bool tanh_approx);
// The same with libm's erf/exp/tanh: the reference the fast path is tested against.
void gelu_forward_reference(const float* x, float* y, int64_t n, bool tanh_approx);
void gelu_backward_reference(const float* x, const float* dy, float* dx, int64_t n, bool tanh_approx);

// ---- spatial.cpp: the causal token-mixing projection of the SGU.
// F[i, :] = sum_{j <= i} W[i, j] G[j, :] + b[i] for i < T; G and F are [T, cols]
// (cols = B * channels); W is read as W[:T, :T] with row stride ldw (the model's n).
// The masked upper half is never read and never computed.
void spatial_causal_forward(const float* W, int ldw, const float* b, int T, int64_t cols, const float* G, float* F);
// dG = tril(W)^T dF (overwritten); dW += tril(dF G^T) (strict upper triangle of
// the touched block left at zero); db += rowsum(dF).
void spatial_causal_backward(const float* W, int ldw, int T, int64_t cols, const float* G, const float* dF,
                             float* dG, float* dW, float* db);
// Straightforward loops, for tests of the fast path.
void spatial_causal_forward_naive(const float* W, int ldw, const float* b, int T, int64_t cols, const float* G,
                                  float* F);
void spatial_causal_backward_naive(const float* W, int ldw, int T, int64_t cols, const float* G, const float* dF,
                                   float* dG, float* dW, float* db);

// ---- sgu.cpp: the spatial gating unit on Z[M = T*B, d_ffn] (split form).
// G = LayerNorm(Z2); F = spatial(G); S = Z1 * F. Saves gate mean/rstd [M] and F [M, dh].
// G is scratch [M, dh] and may be the same buffer as S (G is dead when S is written).
struct SguParams {
  const float* norm_w;
  const float* norm_b;
  const float* spatial_w;  // [n, n]
  const float* spatial_b;  // [n]
  int n;                   // the model's window (row stride of spatial_w)
  float eps;
};
struct SguGrads {
  float* norm_w;
  float* norm_b;
  float* spatial_w;
  float* spatial_b;
};
void sgu_forward(const SguParams& p, const float* Z, int T, int B, int dh, float* S, float* gmean, float* grstd,
                 float* F, float* G);
// dZ [M, d_ffn] is overwritten. G, dF and dG are scratch [M, dh] (G is recomputed).
// To save memory dZ may alias Z (computed in place), dG may alias dS, and G may be any
// buffer that is dead on entry (such as the S the caller no longer needs).
void sgu_backward(const SguParams& p, const SguGrads& g, const float* dS, const float* Z, int T, int B, int dh,
                  const float* gmean, const float* grstd, const float* F, float* dZ, float* G, float* dF,
                  float* dG);

// ---- embedding.cpp: x[r, :] = E[tokens[r], :] (+ pe[r / B, :] when pe), for the
// M = T * B rows of sequence-major token ids.
void embedding_forward(const float* E, int d, const int32_t* tokens, int M, int B, const float* pe, float* x);
void embedding_backward(const float* dx, int d, const int32_t* tokens, int M, float* dE);
// Sinusoidal table pe[T, d]: pe[t, 2i] = sin(t / 10000^(2i/d)), pe[t, 2i+1] = cos(...).
void sinusoidal_positions(int T, int d, float* pe);

// ---- cross_entropy.cpp: mean softmax cross-entropy over M rows of V logits.
// targets[r] < 0 are ignored (not counted in the mean). Returns the mean loss (nats);
// when dlogits is non-null writes d(mean loss)/d logits. Also returns the count used.
double cross_entropy(const float* logits, int M, int V, const int32_t* targets, float* dlogits, int64_t* count);

}  // namespace gmlp::ops
