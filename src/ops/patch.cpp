// Cutting images into patch rows for the vision model's linear patch embedding.
#include "ops/ops.h"

namespace gmlp::ops {

void extract_patches(const float* images, int B, int C, int Hi, int Wi, int ph, int pw, float* out) {
  const int gw = Wi / pw, n = (Hi / ph) * gw, P = C * ph * pw;
#pragma omp parallel for schedule(static)
  for (int t = 0; t < n; ++t) {
    const int gy = t / gw, gx = t % gw;
    for (int b = 0; b < B; ++b) {
      float* row = out + (int64_t(t) * B + b) * P;
      for (int c = 0; c < C; ++c)
        for (int py = 0; py < ph; ++py) {
          const float* src = images + ((int64_t(b) * C + c) * Hi + gy * ph + py) * Wi + gx * pw;
          for (int px = 0; px < pw; ++px) row[(c * ph + py) * pw + px] = src[px];
        }
    }
  }
}

}  // namespace gmlp::ops
