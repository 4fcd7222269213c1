#pragma once
// The causal gMLP language model: parameters in ONE contiguous buffer (gradients in a
// second with the same layout), activations in one arena sized on first use.
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "gmlp/config.h"
#include "gmlp/rng.h"

namespace gmlp {

// One named tensor inside the parameter buffer (SPEC §6 names, [out, in] layout).
struct ParamInfo {
  std::string name;
  std::vector<int64_t> shape;
  size_t offset = 0;  // in floats
  size_t size = 0;
  bool decay = false;  // AdamW weight decay: matrices yes; norms, biases, SGU bias no
};

struct BlockParams {
  float *norm_w, *norm_b;          // [d]
  float *proj_in_w, *proj_in_b;    // [d_ffn, d], [d_ffn]
  float *sgu_norm_w, *sgu_norm_b;  // [d_ffn/2]
  float *spatial_w, *spatial_b;    // [n, n], [n]
  float *proj_out_w, *proj_out_b;  // [d, d_ffn/2], [d]
};

struct ParamViews {
  float* embed;  // [vocab, d]
  std::vector<BlockParams> blocks;
  float *norm_w, *norm_b;  // [d]
  float *head_w, *head_b;  // [vocab, d], [vocab]
};

// The ordered tensor list of a config, and views of any buffer laid out by it.
std::vector<ParamInfo> param_layout(const ModelConfig& c);
ParamViews param_views(const ModelConfig& c, float* base);

// Useful FLOPs of one forward per token at sequence length T: the channel GEMMs, the
// causal half of the spatial product (T+1)/2 * dh * 2, and the head. Elementwise work
// is not counted. Training is 3x (forward, and the two GEMMs of each backward).
double forward_flops_per_token(const ModelConfig& c, int T);

class Model {
 public:
  explicit Model(const ModelConfig& config);
  ~Model();
  Model(const Model&) = delete;
  Model& operator=(const Model&) = delete;

  const ModelConfig& config() const { return cfg_; }
  const std::vector<ParamInfo>& params() const { return layout_; }
  const ParamInfo& param(const std::string& name) const;  // Error if unknown
  size_t num_params() const { return weights_.size(); }
  float* weights() { return weights_.data(); }
  const float* weights() const { return weights_.data(); }
  float* grads() { return grads_.data(); }
  const float* grads() const { return grads_.data(); }

  // SPEC §2 init: Linear U(+-1/sqrt(fan_in)); LayerNorm 1/0; embedding N(0,1);
  // spatial W ~ U(-spatial_init, spatial_init), b = 1.
  void init(Rng& rng);
  void zero_grad();

  // tokens: B rows of T ids, row b starting at tokens + b * stride; T <= seq_len.
  // When targets (same layout) is given returns the mean cross-entropy (nats) over
  // positions whose target is >= 0, else 0. Logits stay available until the next call.
  double forward(const int32_t* tokens, const int32_t* targets, int stride, int B, int T);
  // Accumulates d(mean loss)/d(params) into grads(); needs a forward with targets
  // made while gradients were enabled.
  void backward();
  // Like torch.no_grad: with gradients disabled, forward keeps only one layer's
  // activations (evaluation, generation, inference) and backward is refused.
  void set_grad_enabled(bool on) { grad_enabled_ = on; }
  bool grad_enabled() const { return grad_enabled_; }
  // Logits of the last forward, sequence-major: row t * B + b, vocab_size columns.
  const float* logits() const;
  int last_T() const { return T_; }
  int last_B() const { return B_; }

 private:
  struct Arena;
  void ensure_arena(int B, int T, int layers);

  ModelConfig cfg_;
  std::vector<ParamInfo> layout_;
  std::vector<float> weights_, grads_;
  ParamViews w_, g_;
  std::vector<float> pe_;  // sinusoidal table [n, d] when enabled
  std::unique_ptr<Arena> arena_;
  int B_ = 0, T_ = 0;
  bool grad_enabled_ = true;
  bool backward_ready_ = false;  // the last forward kept what backward needs
};

// Disables gradients on a model for a scope, restoring the previous setting.
class NoGrad {
 public:
  explicit NoGrad(Model& m) : m_(m), was_(m.grad_enabled()) { m_.set_grad_enabled(false); }
  ~NoGrad() { m_.set_grad_enabled(was_); }
  NoGrad(const NoGrad&) = delete;
  NoGrad& operator=(const NoGrad&) = delete;

 private:
  Model& m_;
  bool was_;
};

}  // namespace gmlp
