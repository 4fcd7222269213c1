#pragma once
// AdamW over the model's single parameter buffer, in PyTorch's exact formulation, its
// learning-rate schedules, and global-norm gradient clipping.
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <vector>

#include "gmlp/config.h"
#include "gmlp/model.h"

namespace gmlp {

class AdamW {
 public:
  // Moments in host memory, for step(params, grads, lr).
  AdamW(const std::vector<ParamInfo>& layout, size_t total, const TrainConfig& cfg);
  // Moments on the model's device, for step(model, lr).
  AdamW(const Model& model, const TrainConfig& cfg);
  ~AdamW();
  // One update with learning rate lr: decoupled decay p *= 1 - lr*wd (decay tensors
  // only), then the Adam moments and p -= lr/(1-b1^t) * m / (sqrt(v)/sqrt(1-b2^t) + eps).
  void step(float* params, const float* grads, float lr);
  // The same on the model's own buffers, on its device (no host copies). With a guard
  // (`guards` doubles of backend memory: Model::step_scalars()), an update only where
  // they are all finite (ops/step_guard.h), decided where the update runs. With
  // clip_sum_squares (backend memory: the gradients' sum of squares), the gradients are
  // clipped to max_norm as the update reads them (clip_grad_norm's numbers), and left in
  // their buffer unclipped.
  void step(Model& model, float lr, const double* guard = nullptr, int guards = 0,
            const double* clip_sum_squares = nullptr, float max_norm = 0.f);
  int64_t steps_taken() const { return t_; }
  // Sharded optimizer state (ZeRO-1, docs/distributed.md): from now on the moments cover
  // the parameters [begin, end) only, and a step updates only those (the caller gathers
  // the rest from the ranks that own them). Before the first step.
  void shard(size_t begin, size_t end);
  size_t shard_begin() const { return begin_; }
  size_t shard_end() const { return begin_ + m_.size(); }
  bool sharded() const { return sharded_; }
  // The moments, for checkpoints: m and v over [shard_begin, shard_end) (all
  // parameters unless sharded), in host memory. With moments on a device these are
  // mirrors, refreshed by the call; what is written through them is uploaded at the
  // next step.
  std::vector<float>& m();
  std::vector<float>& v();
  void set_steps_taken(int64_t t) { t_ = t; }

 private:
  struct Moments;  // device moments, null for host ones
  Moments& device_moments();  // allocated on first use
  void update(Backend& be, float* params, const float* grads, float* m, float* v, float lr, const double* guard,
              int guards, const uint64_t* bounds, const double* clip_sum_squares = nullptr, float max_norm = 0.f);
  void set_bounds();
  std::vector<std::pair<size_t, size_t>> decay_ranges_;  // [begin, end) of the weights that decay
  std::vector<uint64_t> bounds_;  // those within the moments' range, from its start (ops.h's AdamWStep)
  std::vector<float> m_, v_;
  std::unique_ptr<Moments> dev_;
  Backend* be_ = nullptr;
  float b1_, b2_, eps_, wd_;
  int64_t t_ = 0;
  size_t begin_ = 0;  // the moments' first parameter
  bool sharded_ = false;
};

// Learning rate for the s-th update (1-based) under t's schedule: linear warmup then
// cosine to min_lr, Noam (factor * d^-0.5 * min(s^-0.5, s * warmup^-1.5)), or constant.
float learning_rate(const TrainConfig& t, int d_model, int64_t step);

// Global L2 norm of the gradients (accumulated in double).
double grad_norm(const float* grads, size_t n);
// PyTorch's clip_grad_norm_: scale by max_norm / (norm + 1e-6) when that is < 1.
// Returns the norm before clipping.
double clip_grad_norm(float* grads, size_t n, float max_norm);
// The same over the model's gradients on its device, queued: the sum of squares goes to
// model.step_scalars()[1] and the scaling reads it there.
void clip_grad_norm_queued(Model& model, float max_norm);
// clip_grad_norm_queued, then the norm read back.
double clip_grad_norm(Model& model, float max_norm);

// One optimizer step as `gmlp train` takes it: forward, zero_grad, backward, clipping to
// max_norm (0: none), AdamW at lr; the clipping is taken in the update, so the gradient
// buffer keeps the backward's values. A device is waited for once, after the update is
// queued, for the loss and the gradients' norm before clipping. A step whose loss or
// gradient is not finite changes no weight, no moment and not the step count (the
// caller stops the run); with local_loss (one process of several, whose gradients are
// reduced and whose losses are not) the gradient alone decides, the same on every
// process. after_backward runs between the backward and the clipping (data
// parallelism's wait for its gradient reductions), after_update after the update
// (ZeRO-1's weight exchange).
struct StepResult {
  double loss, grad_norm;
};
// An exponential moving average of a model's weights (train.model_ema; timm's ModelEma,
// which DeiT's recipe keeps): after every optimizer step, avg = decay * avg + (1 - decay)
// * w over every parameter (Backend::ema_update), in the model's backend memory, so no
// host copy inside a step. It starts as the model's weights when made.
class ModelEma {
 public:
  ModelEma(Model& model, float decay);
  ~ModelEma();
  // Queued behind the step's update, on the model's device.
  void update(Model& model);
  // The average in host memory (on a device, a download), for a checkpoint; and from one.
  std::vector<float> weights() const;
  void set_weights(const std::vector<float>& host);
  // Runs f (which must not write the weights) with the model holding the average in
  // place of its weights, then gives the model its weights back, f returning or throwing:
  // to evaluate the average. The weights wait in a second copy, allocated for the call.
  void swapped_in(Model& model, const std::function<void()>& f);

 private:
  struct Buffers;
  std::unique_ptr<Buffers> b_;
  float decay_, rest_;
};

StepResult train_step(Model& model, AdamW& opt, const Batch& batch, float max_norm, float lr,
                      const std::function<void()>& after_backward = {},
                      const std::function<void()>& after_update = {}, bool local_loss = false);
// train_step in two halves, for a caller that queues the next step's forward before it
// reads this step's result (the trainer's pipeline, src/train/trainer.cpp): the first
// queues everything after the forward (model.forward_queued(batch) first) and the
// read-back of the loss and norm; the second waits for that read-back alone and settles
// the step count. Nothing that changes a weight or a gradient may be queued in between:
// the step count and the skipped-step decision follow this step's update. With gradient
// accumulation the forward queued first is the step's first piece, and `rest` holds the
// others (DataParallel::pieces), each forwarded and backpropagated in turn before
// after_backward.
void queue_train_step(Model& model, AdamW& opt, float max_norm, float lr,
                      const std::function<void()>& after_backward = {}, const std::function<void()>& after_update = {},
                      bool local_loss = false, std::span<const Batch> rest = {});
StepResult finish_train_step(Model& model, AdamW& opt, bool local_loss = false);

}  // namespace gmlp
