// Linear layer y = x W^T + b in PyTorch's [out, in] weight layout.
#include <omp.h>

#include <vector>

#include "ops/ops.h"

namespace gmlp::ops {

void linear_forward(const float* x, int M, int in, const float* W, const float* b, int out, float* y) {
  // Seed y with the bias so the GEMM adds onto it (beta = 1): one pass fewer over y.
#pragma omp parallel for schedule(static)
  for (int r = 0; r < M; ++r) {
    float* yr = y + int64_t(r) * out;
    for (int o = 0; o < out; ++o) yr[o] = b ? b[o] : 0.f;
  }
  gemm(false, true, M, out, in, 1.f, x, in, W, in, 1.f, y, out);
}

void linear_backward(const float* dy, const float* x, int M, int in, const float* W, int out, float* dx,
                     bool accumulate_dx, float* dW, float* db) {
  if (dx) gemm(false, false, M, in, out, 1.f, dy, out, W, in, accumulate_dx ? 1.f : 0.f, dx, in);
  gemm(true, false, out, in, M, 1.f, dy, out, x, in, 1.f, dW, in);
  if (db) {
    // Column sums: each thread owns a slice of columns, so no reduction is needed.
#pragma omp parallel for schedule(static)
    for (int o0 = 0; o0 < out; o0 += 64) {
      const int o1 = o0 + 64 < out ? o0 + 64 : out;
      float acc[64] = {0};
      for (int r = 0; r < M; ++r) {
        const float* dr = dy + int64_t(r) * out;
        for (int o = o0; o < o1; ++o) acc[o - o0] += dr[o];
      }
      for (int o = o0; o < o1; ++o) db[o] += acc[o - o0];
    }
  }
}

}  // namespace gmlp::ops
