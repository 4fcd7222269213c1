// GELU: exact x * Phi(x), or PyTorch's tanh approximation (approximate='tanh').
#include <cmath>

#include "ops/fast_math.h"
#include "ops/ops.h"
#include "ops/parallel.h"

namespace gmlp::ops {

// A vectorised map, threaded only from kParallelValues values on (parallel.h): the
// cached decoder's few rows per token stay off the OpenMP runtime.
template <typename F>
void map_values(const float* x, float* y, int64_t n, F f) {
  if (n < kParallelValues) {
#pragma omp simd
    for (int64_t i = 0; i < n; ++i) y[i] = f(x[i]);
    return;
  }
#pragma omp parallel for simd schedule(static)
  for (int64_t i = 0; i < n; ++i) y[i] = f(x[i]);
}

// The fast path: the same formulas with the vectorisable exp/erf/tanh of fast_math.h.
void gelu_forward(const float* x, float* y, int64_t n, bool tanh_approx) {
  if (tanh_approx)
    map_values(x, y, n, [](float v) { return fast::gelu_tanh(v); });
  else
    map_values(x, y, n, [](float v) { return fast::gelu_erf(v); });
}

void bias_gelu_forward(float* u, const float* b, int M, int n, float* y, bool tanh_approx) {
#pragma omp parallel for schedule(static)
  for (int r = 0; r < M; ++r) {
    float* ur = u + int64_t(r) * n;
    float* yr = y + int64_t(r) * n;
    // Each value is read, then written to u and to y in that order, so y == u is safe.
    if (tanh_approx) {
#pragma omp simd
      for (int c = 0; c < n; ++c) {
        const float v = ur[c] + b[c];
        ur[c] = v;
        yr[c] = fast::gelu_tanh(v);
      }
    } else {
#pragma omp simd
      for (int c = 0; c < n; ++c) {
        const float v = ur[c] + b[c];
        ur[c] = v;
        yr[c] = fast::gelu_erf(v);
      }
    }
  }
}

void gelu_backward(const float* x, const float* dy, float* dx, int64_t n, bool tanh_approx) {
  if (tanh_approx) {
#pragma omp parallel for simd schedule(static)
    for (int64_t i = 0; i < n; ++i) dx[i] = dy[i] * fast::gelu_tanh_grad(x[i]);
  } else {
#pragma omp parallel for simd schedule(static)
    for (int64_t i = 0; i < n; ++i) dx[i] = dy[i] * fast::gelu_erf_grad(x[i]);
  }
}

}  // namespace gmlp::ops
