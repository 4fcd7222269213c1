// Cutting images into patch rows for the vision model's linear patch embedding.
#include "ops/ops.h"

namespace gmlp::ops {

namespace {
template <typename Read>
void cut(Read read, int B, int C, int Hi, int Wi, int ph, int pw, float* out) {
  const int gw = Wi / pw, n = (Hi / ph) * gw, P = C * ph * pw;
#pragma omp parallel for schedule(static)
  for (int t = 0; t < n; ++t) {
    const int gy = t / gw, gx = t % gw;
    for (int b = 0; b < B; ++b) {
      float* row = out + (int64_t(t) * B + b) * P;
      for (int c = 0; c < C; ++c)
        for (int py = 0; py < ph; ++py) {
          const int64_t src = ((int64_t(b) * C + c) * Hi + gy * ph + py) * Wi + gx * pw;
          for (int px = 0; px < pw; ++px) row[(c * ph + py) * pw + px] = read(c, src + px);
        }
    }
  }
}
}  // namespace

void extract_patches(Pixels images, int B, int C, int Hi, int Wi, int ph, int pw, float* out) {
  if (images.bytes)
    cut([&](int c, int64_t i) { return images.lut[c * 256 + images.bytes[i]]; }, B, C, Hi, Wi, ph, pw, out);
  else
    cut([&](int, int64_t i) { return images.values[i]; }, B, C, Hi, Wi, ph, pw, out);
}

}  // namespace gmlp::ops
