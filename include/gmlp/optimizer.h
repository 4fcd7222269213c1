#pragma once
// AdamW over the model's single parameter buffer, in PyTorch's exact formulation, its
// learning-rate schedules, and global-norm gradient clipping.
#include <cstdint>
#include <vector>

#include "gmlp/config.h"
#include "gmlp/model.h"

namespace gmlp {

class AdamW {
 public:
  AdamW(const std::vector<ParamInfo>& layout, size_t total, const TrainConfig& cfg);
  // One update with learning rate lr: decoupled decay p *= 1 - lr*wd (decay tensors
  // only), then the Adam moments and p -= lr/(1-b1^t) * m / (sqrt(v)/sqrt(1-b2^t) + eps).
  void step(float* params, const float* grads, float lr);
  int64_t steps_taken() const { return t_; }
  // The moments, for checkpoints: m and v, each `total` floats.
  std::vector<float>& m() { return m_; }
  std::vector<float>& v() { return v_; }
  void set_steps_taken(int64_t t) { t_ = t; }

 private:
  std::vector<std::pair<size_t, size_t>> decay_ranges_, plain_ranges_;  // [offset, size)
  std::vector<float> m_, v_;
  float b1_, b2_, eps_, wd_;
  int64_t t_ = 0;
};

// Learning rate for the s-th update (1-based) under t's schedule: linear warmup then
// cosine to min_lr, Noam (factor * d^-0.5 * min(s^-0.5, s * warmup^-1.5)), or constant.
float learning_rate(const TrainConfig& t, int d_model, int64_t step);

// Global L2 norm of the gradients (accumulated in double).
double grad_norm(const float* grads, size_t n);
// PyTorch's clip_grad_norm_: scale by max_norm / (norm + 1e-6) when that is < 1.
// Returns the norm before clipping.
double clip_grad_norm(float* grads, size_t n, float max_norm);

}  // namespace gmlp
