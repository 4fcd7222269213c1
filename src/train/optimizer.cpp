// AdamW, the learning-rate schedules and clipping. The arithmetic follows torch.optim.AdamW (single-tensor path)
// step for step, so a run here and the PyTorch reference stay within float rounding.
#include "gmlp/optimizer.h"

#include <algorithm>
#include <cmath>

#include "ops/reduce.h"

namespace gmlp {

AdamW::AdamW(const std::vector<ParamInfo>& layout, size_t total, const TrainConfig& cfg)
    : m_(total, 0.f), v_(total, 0.f), b1_(cfg.beta1), b2_(cfg.beta2), eps_(cfg.eps), wd_(cfg.weight_decay) {
  for (const auto& p : layout) (p.decay ? decay_ranges_ : plain_ranges_).push_back({p.offset, p.size});
}

void AdamW::step(float* params, const float* grads, float lr) {
  ++t_;
  const double bc1 = 1.0 - std::pow(double(b1_), double(t_));
  const double bc2 = 1.0 - std::pow(double(b2_), double(t_));
  const float step_size = float(double(lr) / bc1);
  const float bc2_sqrt = float(std::sqrt(bc2));
  const float b1 = b1_, b2 = b2_, eps = eps_;
  float* m = m_.data();
  float* v = v_.data();
  auto update = [&](size_t off, size_t n, float decay) {
#pragma omp parallel for simd schedule(static)
    for (size_t i = off; i < off + n; ++i) {
      const float g = grads[i];
      float p = params[i] * decay;
      m[i] = b1 * m[i] + (1.f - b1) * g;
      v[i] = b2 * v[i] + (1.f - b2) * g * g;
      const float denom = std::sqrt(v[i]) / bc2_sqrt + eps;
      params[i] = p - step_size * (m[i] / denom);
    }
  };
  for (auto [off, n] : decay_ranges_) update(off, n, 1.f - lr * wd_);
  for (auto [off, n] : plain_ranges_) update(off, n, 1.f);
}

double grad_norm(const float* grads, size_t n) {
  return std::sqrt(ops::ordered_sum(int64_t(n), [&](int64_t i) { return double(grads[i]) * grads[i]; }));
}

double clip_grad_norm(float* grads, size_t n, float max_norm) {
  const double norm = grad_norm(grads, n);
  if (max_norm > 0) {
    const double coef = double(max_norm) / (norm + 1e-6);
    if (coef < 1.0) {
      const float c = float(coef);
#pragma omp parallel for simd schedule(static)
      for (size_t i = 0; i < n; ++i) grads[i] *= c;
    }
  }
  return norm;
}

float learning_rate(const TrainConfig& t, int d_model, int64_t step) {
  const double s = double(std::max<int64_t>(step, 1));
  if (t.schedule == Schedule::constant) return t.lr;
  if (t.schedule == Schedule::noam)
    return float(t.noam_factor * std::pow(double(d_model), -0.5) *
                 std::min(std::pow(s, -0.5), s * std::pow(double(t.warmup), -1.5)));
  if (t.warmup > 0 && s <= double(t.warmup)) return float(double(t.lr) * s / double(t.warmup));
  const double p = (s - double(t.warmup)) / double(std::max<int64_t>(1, t.steps - t.warmup));
  const double c = 0.5 * (1.0 + std::cos(M_PI * std::min(p, 1.0)));
  return float(double(t.min_lr) + (double(t.lr) - double(t.min_lr)) * c);
}


}  // namespace gmlp
