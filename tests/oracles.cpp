// Test-only oracles (oracles.h).
#include "oracles.h"

#include <cmath>
#include <vector>

#include "ops/fast_math.h"
#include "ops/ops.h"

namespace gmlp::test {

std::vector<float> materialised(const ops::DropMask& m, int B, int T, int d) {
  const int M = T * B;
  const std::vector<float> zero(size_t(M) * d, 0.f), one(size_t(M) * d, 1.f);
  std::vector<float> out(size_t(M) * d);
  ops::residual_add(zero.data(), one.data(), nullptr, m, M, B, d, out.data());
  return out;
}
using ops::fast::kInvSqrt2, ops::fast::kInvSqrt2Pi, ops::fast::kSqrt2OverPi, ops::fast::kTanhCoef;

void gelu_forward_reference(const float* x, float* y, int64_t n, bool tanh_approx) {
  if (tanh_approx) {
#pragma omp parallel for simd schedule(static)
    for (int64_t i = 0; i < n; ++i) {
      const float v = x[i];
      y[i] = 0.5f * v * (1.f + std::tanh(kSqrt2OverPi * (v + kTanhCoef * v * v * v)));
    }
  } else {
#pragma omp parallel for simd schedule(static)
    for (int64_t i = 0; i < n; ++i) y[i] = 0.5f * x[i] * (1.f + std::erf(x[i] * kInvSqrt2));
  }
}

void gelu_backward_reference(const float* x, const float* dy, float* dx, int64_t n, bool tanh_approx) {
  if (tanh_approx) {
#pragma omp parallel for simd schedule(static)
    for (int64_t i = 0; i < n; ++i) {
      const float v = x[i];
      const float t = std::tanh(kSqrt2OverPi * (v + kTanhCoef * v * v * v));
      const float dt = (1.f - t * t) * kSqrt2OverPi * (1.f + 3.f * kTanhCoef * v * v);
      dx[i] = dy[i] * (0.5f * (1.f + t) + 0.5f * v * dt);
    }
  } else {
    // d/dx [x Phi(x)] = Phi(x) + x phi(x)
#pragma omp parallel for simd schedule(static)
    for (int64_t i = 0; i < n; ++i) {
      const float v = x[i];
      const float cdf = 0.5f * (1.f + std::erf(v * kInvSqrt2));
      const float pdf = kInvSqrt2Pi * std::exp(-0.5f * v * v);
      dx[i] = dy[i] * (cdf + v * pdf);
    }
  }
}

void spatial_causal_forward(const float* W, int ldw, const float* b, int T, int64_t cols, const float* G, float* F) {
  ops::spatial_mix_forward(W, ldw, true, T, int(cols), G, int(cols), F);
  for (int i = 0; i < T; ++i)
    for (int64_t c = 0; c < cols; ++c) F[int64_t(i) * cols + c] += b[i];
}

std::vector<float> transposed(const float* G, int T, int64_t cols, int64_t ld) {
  std::vector<float> Gt(size_t(cols) * T);
  for (int t = 0; t < T; ++t)
    for (int64_t c = 0; c < cols; ++c) Gt[size_t(c) * T + t] = G[int64_t(t) * ld + c];
  return Gt;
}

void spatial_causal_backward(const float* W, int ldw, int T, int64_t cols, const float* G, const float* dF,
                             float* dG, float* dW, float* db) {
  const std::vector<float> Gt = transposed(G, T, cols, cols);
  ops::spatial_mix_backward(W, ldw, true, T, int(cols), Gt.data(), dF, int(cols), dG, dW);
  for (int i = 0; i < T; ++i) {
    double s = 0.0;
    for (int64_t c = 0; c < cols; ++c) s += dF[int64_t(i) * cols + c];
    db[i] += float(s);
  }
}

void spatial_causal_forward_naive(const float* W, int ldw, const float* b, int T, int64_t cols, const float* G,
                                  float* F) {
  for (int i = 0; i < T; ++i)
    for (int64_t c = 0; c < cols; ++c) {
      double s = b[i];
      for (int j = 0; j <= i; ++j) s += double(W[int64_t(i) * ldw + j]) * G[int64_t(j) * cols + c];
      F[int64_t(i) * cols + c] = float(s);
    }
}

void spatial_causal_backward_naive(const float* W, int ldw, int T, int64_t cols, const float* G, const float* dF,
                                   float* dG, float* dW, float* db) {
  for (int j = 0; j < T; ++j)
    for (int64_t c = 0; c < cols; ++c) {
      double s = 0.0;
      for (int i = j; i < T; ++i) s += double(W[int64_t(i) * ldw + j]) * dF[int64_t(i) * cols + c];
      dG[int64_t(j) * cols + c] = float(s);
    }
  for (int i = 0; i < T; ++i) {
    double sb = 0.0;
    for (int64_t c = 0; c < cols; ++c) sb += dF[int64_t(i) * cols + c];
    db[i] += float(sb);
    for (int j = 0; j <= i; ++j) {
      double s = 0.0;
      for (int64_t c = 0; c < cols; ++c) s += double(dF[int64_t(i) * cols + c]) * G[int64_t(j) * cols + c];
      dW[int64_t(i) * ldw + j] += float(s);
    }
  }
}

}  // namespace gmlp::test
