// AdamW's update and the sums of global-norm clipping, over raw buffers: the
// arithmetic of torch.optim.AdamW (single-tensor path), step for step.
#include <algorithm>
#include <cmath>

#include "ops/ops.h"
#include "ops/reduce.h"
#include "ops/step_guard.h"

namespace gmlp::ops {

namespace {
void update_span(float* params, const float* grads, float* m, float* v, size_t i0, size_t i1, const AdamWStep& s,
                 float decay, float clip) {
  const float b1 = s.b1, b2 = s.b2, eps = s.eps, step_size = s.step_size, bc2_sqrt = s.bc2_sqrt;
#pragma omp parallel for simd schedule(static)
  for (size_t i = i0; i < i1; ++i) {
    const float g = grads[i] * clip;  // clip_scale's product, not stored
    float p = params[i] * decay;
    m[i] = b1 * m[i] + (1.f - b1) * g;
    v[i] = b2 * v[i] + (1.f - b2) * g * g;
    const float denom = std::sqrt(v[i]) / bc2_sqrt + eps;
    params[i] = p - step_size * (m[i] / denom);
  }
}
}  // namespace

void ema_update(float* avg, const float* x, size_t n, float decay, float rest) {
#pragma omp parallel for schedule(static)
  for (size_t i = 0; i < n; ++i) avg[i] = std::fma(rest, x[i], avg[i] * decay);
}

void adamw_update(float* params, const float* grads, float* m, float* v, size_t n, const AdamWStep& s) {
  if (!step_may_update(s.guard, s.guards)) return;
  const float clip = s.clip_sum_squares ? clip_factor(*s.clip_sum_squares, s.max_norm) : 1.f;
  if (!s.decay_bounds) return update_span(params, grads, m, v, 0, n, s, s.decay, clip);
  // The spans between the bounds, decaying and not in turn.
  size_t at = 0;
  for (int k = 0; k <= s.n_decay_bounds; ++k) {
    const size_t end = k < s.n_decay_bounds ? std::min<size_t>(n, s.decay_bounds[k]) : n;
    if (at < end) update_span(params, grads, m, v, at, end, s, k % 2 ? s.decay : 1.f, clip);
    at = std::max(at, end);
  }
}

double sum_squares(const float* x, size_t n) {
  return ordered_lane_sum(int64_t(n), [x](int64_t i) { return double(x[i]) * x[i]; });
}

void scale(float* x, size_t n, float c) {
#pragma omp parallel for simd schedule(static)
  for (size_t i = 0; i < n; ++i) x[i] *= c;
}

void clip_scale(float* x, size_t n, double sum_squares, float max_norm) {
  const float c = clip_factor(sum_squares, max_norm);
  if (c != 1.f) scale(x, n, c);
}

}  // namespace gmlp::ops
