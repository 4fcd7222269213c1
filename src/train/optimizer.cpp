// AdamW, the learning-rate schedules and clipping. The arithmetic follows torch.optim.AdamW (single-tensor path)
// step for step, so a run here and the PyTorch reference stay within float rounding.
// The element-wise work is the backend's (ops/adamw.cpp on the CPU), so a model on a
// device is updated where it lives.
#include "gmlp/optimizer.h"

#include <algorithm>
#include <cmath>

#include "backend/backend.h"
#include "gmlp/error.h"
#include "ops/step_guard.h"

namespace gmlp {

struct ModelEma::Buffers {
  Backend* be;
  DeviceBuffer<float> avg, saved;  // the average; the model's weights while it holds the average
};

// (1 - decay) of the float decay in double, then rounded, so that decay + rest is 1 to
// the float (timm takes 1 - decay of the decay as typed, a double: at 0.99996 its rest
// is 1.3e-4 larger, relatively, and its average of a constant settles that much high).
ModelEma::ModelEma(Model& model, float decay)
    : b_(std::make_unique<Buffers>()), decay_(decay), rest_(float(1.0 - double(decay))) {
  b_->be = &model.backend();
  b_->avg = DeviceBuffer<float>(*b_->be, model.num_params());
  b_->be->copy(b_->avg.data(), model.device_weights(false), model.num_params() * sizeof(float));
}
ModelEma::~ModelEma() = default;

void ModelEma::update(Model& model) {
  b_->be->ema_update(b_->avg.data(), model.device_weights(false), b_->avg.size(), decay_, rest_);
}

std::vector<float> ModelEma::weights() const {
  std::vector<float> host(b_->avg.size());
  b_->be->download(host.data(), b_->avg.data(), host.size() * sizeof(float));
  return host;
}

void ModelEma::set_weights(const std::vector<float>& host) {
  require(host.size() == b_->avg.size(), "internal: an average of " + std::to_string(host.size()) +
                                             " weights for a model of " + std::to_string(b_->avg.size()));
  b_->be->upload(b_->avg.data(), host.data(), host.size() * sizeof(float));
}

void ModelEma::swapped_in(Model& model, const std::function<void()>& f) {
  Backend& be = *b_->be;
  const size_t bytes = b_->avg.size() * sizeof(float);
  if (b_->saved.empty()) b_->saved = DeviceBuffer<float>(be, b_->avg.size());
  // Written through device_weights(true): the model's host mirror and any copies it keeps
  // of its weights (bf16) follow.
  be.copy(b_->saved.data(), model.device_weights(false), bytes);
  be.copy(model.device_weights(true), b_->avg.data(), bytes);
  auto restore = [&] { be.copy(model.device_weights(true), b_->saved.data(), bytes); };
  try {
    f();
  } catch (...) {
    restore();
    b_->saved = {};
    throw;
  }
  restore();
  b_->saved = {};  // not held through the training: the average's one copy is its cost
}

struct AdamW::Moments {
  HostMirror m, v;
  DeviceBuffer<uint64_t> bounds;  // bounds_ on the device
};

AdamW::AdamW(const std::vector<ParamInfo>& layout, size_t total, const TrainConfig& cfg)
    : m_(total, 0.f), v_(total, 0.f), be_(&cpu_backend()), b1_(cfg.beta1), b2_(cfg.beta2), eps_(cfg.eps),
      wd_(cfg.weight_decay) {
  // Tensors next to each other in the buffer with the same decay are one range; the
  // update is one call over the whole buffer, told where the decaying ranges are.
  size_t at = 0;
  for (const auto& p : layout) {
    require(p.offset == at, "AdamW: the parameters do not fill their buffer in order (" + p.name + ")");
    at += p.size;
    if (!p.decay) continue;
    if (!decay_ranges_.empty() && decay_ranges_.back().second == p.offset)
      decay_ranges_.back().second += p.size;
    else
      decay_ranges_.push_back({p.offset, p.offset + p.size});
  }
  require(at == total, "AdamW: the parameters do not fill their buffer");
  set_bounds();
}

void AdamW::set_bounds() {
  // The decaying ranges within [begin_, end), as offsets from begin_.
  const size_t end = begin_ + m_.size();
  bounds_.clear();
  for (auto [a, b] : decay_ranges_) {
    a = std::max(a, begin_);
    b = std::min(b, end);
    if (a < b) bounds_.insert(bounds_.end(), {uint64_t(a - begin_), uint64_t(b - begin_)});
  }
}

AdamW::AdamW(const Model& model, const TrainConfig& cfg) : AdamW(model.params(), model.num_params(), cfg) {
  be_ = &model.backend();
  // Device moments are allocated at the first step (device_moments), after shard() has
  // cut them to this rank's block: never the whole 8N bytes where a rank holds 8N/P.
  if (!be_->host_memory()) dev_ = std::make_unique<Moments>();
}

AdamW::Moments& AdamW::device_moments() {
  if (dev_->m.dev.empty() && !m_.empty()) {
    dev_->m.dev = DeviceBuffer<float>(*be_, m_.size());  // zero-filled, as m_ and v_ start
    dev_->v.dev = DeviceBuffer<float>(*be_, v_.size());
    if (!bounds_.empty()) {
      dev_->bounds = DeviceBuffer<uint64_t>(*be_, bounds_.size());
      be_->upload(dev_->bounds.data(), bounds_.data(), sizeof(uint64_t) * bounds_.size());
    }
  }
  return *dev_;
}

AdamW::~AdamW() = default;

void AdamW::shard(size_t begin, size_t end) {
  require(t_ == 0 && begin <= end && end <= m_.size() + begin_,
          "AdamW::shard: before the first step, within the parameters");
  begin_ = begin;
  m_.assign(end - begin, 0.f);
  v_.assign(end - begin, 0.f);
  sharded_ = true;
  set_bounds();
}

std::vector<float>& AdamW::m() {
  if (dev_) {
    dev_->m.to_host(*be_, m_);
    dev_->m.state = HostMirror::host_newer;
  }
  return m_;
}

std::vector<float>& AdamW::v() {
  if (dev_) {
    dev_->v.to_host(*be_, v_);
    dev_->v.state = HostMirror::host_newer;
  }
  return v_;
}

void AdamW::update(Backend& be, float* params, const float* grads, float* m, float* v, float lr,
                   const double* guard, int guards, const uint64_t* bounds, const double* clip_sum_squares,
                   float max_norm) {
  ++t_;
  const double bc1 = 1.0 - std::pow(double(b1_), double(t_));
  const double bc2 = 1.0 - std::pow(double(b2_), double(t_));
  // The moments' range [begin_, end): all the parameters unless sharded. A range with
  // no decaying value in it (a shard of biases) has no bounds, and decays nothing.
  const bool decays = !bounds_.empty();
  ops::AdamWStep s{b1_, b2_, eps_, float(double(lr) / bc1), float(std::sqrt(bc2)), decays ? 1.f - lr * wd_ : 1.f,
                   guard, guards, decays ? bounds : nullptr, int(bounds_.size())};
  s.clip_sum_squares = clip_sum_squares;
  s.max_norm = max_norm;
  if (!m_.empty()) be.adamw_update(params + begin_, grads + begin_, m, v, m_.size(), s);
}

void AdamW::step(float* params, const float* grads, float lr) {
  update(cpu_backend(), params, grads, m().data(), v().data(), lr, nullptr, 0, bounds_.data());
}

void AdamW::step(Model& model, float lr, const double* guard, int guards, const double* clip_sum_squares,
                 float max_norm) {
  Backend& be = model.backend();
  require(&be == be_, "AdamW::step: the optimizer's moments are on " + name_of(be_->device()) +
                          ", the model is on " + name_of(be.device()));
  float* m = m_.data();
  float* v = v_.data();
  const uint64_t* bounds = bounds_.data();
  if (dev_) {
    Moments& d = device_moments();
    d.m.to_device(be, m_);
    d.v.to_device(be, v_);
    d.m.state = d.v.state = HostMirror::device_newer;
    m = d.m.dev.data();
    v = d.v.dev.data();
    bounds = d.bounds.data();
  }
  update(be, model.device_weights(true), model.device_grads(false), m, v, lr, guard, guards, bounds, clip_sum_squares,
         max_norm);
}

double grad_norm(const float* grads, size_t n) { return std::sqrt(ops::sum_squares(grads, n)); }

double clip_grad_norm(float* grads, size_t n, float max_norm) {
  const double ss = ops::sum_squares(grads, n);
  ops::clip_scale(grads, n, ss, max_norm);
  return std::sqrt(ss);
}

// The gradients' sum of squares into model.step_scalars()[1], queued; gives where it goes.
static double* grad_sum_squares_queued(Model& model) {
  double* ss = model.step_scalars() + 1;
  model.backend().sum_squares(model.device_grads(false), model.num_params(), ss);
  return ss;
}

void clip_grad_norm_queued(Model& model, float max_norm) {
  const double* ss = grad_sum_squares_queued(model);
  model.backend().clip_scale(model.device_grads(true), model.num_params(), ss, max_norm);
}

double clip_grad_norm(Model& model, float max_norm) {
  clip_grad_norm_queued(model, max_norm);
  model.queue_read_step();
  return std::sqrt(model.read_step().sum_squares);
}

StepResult train_step(Model& model, AdamW& opt, const Batch& batch, float max_norm, float lr,
                      const std::function<void()>& after_backward, const std::function<void()>& after_update,
                      bool local_loss) {
  model.forward_queued(batch);  // its uploads first: each would wait for work queued before it
  queue_train_step(model, opt, max_norm, lr, after_backward, after_update, local_loss);
  return finish_train_step(model, opt, local_loss);
}

void queue_train_step(Model& model, AdamW& opt, float max_norm, float lr, const std::function<void()>& after_backward,
                      const std::function<void()>& after_update, bool local_loss, std::span<const Batch> rest) {
  model.zero_grad();
  model.backward();
  for (const Batch& piece : rest) {  // backward() adds each piece's gradients to the others'
    model.forward_queued(piece);
    model.backward();
  }
  if (after_backward) after_backward();
  // The clipping's sum of squares, and its scaling taken in the update: clip_scale's own
  // pass over the gradients (read and written: 1% of a BERT-size step on an H100) saved.
  const double* ss = grad_sum_squares_queued(model);
  // Several processes each have a loss of their own but the same reduced gradient: only
  // the gradient decides there, so that every rank updates or none does.
  const int first = local_loss ? 1 : 0, guards = 2 - first;
  opt.step(model, lr, model.step_scalars() + first, guards, ss, max_norm);
  model.queue_read_step();  // before after_update's work: the scalars as the update read them
  if (after_update) after_update();
}

StepResult finish_train_step(Model& model, AdamW& opt, bool local_loss) {
  const Model::StepScalars s = model.read_step();
  const int first = local_loss ? 1 : 0, guards = 2 - first;
  const double read[2] = {s.loss, s.sum_squares};
  // The device's decision, made again over the values read back.
  if (!ops::step_may_update(read + first, guards)) opt.set_steps_taken(opt.steps_taken() - 1);
  return {s.loss, std::sqrt(s.sum_squares)};
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
