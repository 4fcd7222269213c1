// Token embedding lookup (sequence-major output) and sinusoidal positions.
#include <cmath>
#include <cstring>

#include "ops/ops.h"

namespace gmlp::ops {

void embedding_forward(const float* E, int d, const int32_t* tokens, int M, int B, const float* pe, float* x) {
#pragma omp parallel for schedule(static)
  for (int r = 0; r < M; ++r) {
    const float* e = E + int64_t(tokens[r]) * d;
    float* xr = x + int64_t(r) * d;
    if (pe) {
      const float* p = pe + int64_t(r / B) * d;
      for (int c = 0; c < d; ++c) xr[c] = e[c] + p[c];
    } else {
      std::memcpy(xr, e, sizeof(float) * size_t(d));
    }
  }
}

void embedding_backward(const float* dx, int d, const int32_t* tokens, int M, float* dE) {
  // Tokens repeat, so rows of dE collide; split the channels across threads instead.
#pragma omp parallel for schedule(static)
  for (int c0 = 0; c0 < d; c0 += 32) {
    const int c1 = c0 + 32 < d ? c0 + 32 : d;
    for (int r = 0; r < M; ++r) {
      float* e = dE + int64_t(tokens[r]) * d;
      const float* g = dx + int64_t(r) * d;
      for (int c = c0; c < c1; ++c) e[c] += g[c];
    }
  }
}

void sinusoidal_positions(int T, int d, float* pe) {
  for (int t = 0; t < T; ++t)
    for (int i = 0; 2 * i < d; ++i) {
      const double freq = std::pow(10000.0, -2.0 * i / d);
      pe[int64_t(t) * d + 2 * i] = float(std::sin(t * freq));
      if (2 * i + 1 < d) pe[int64_t(t) * d + 2 * i + 1] = float(std::cos(t * freq));
    }
}

}  // namespace gmlp::ops
