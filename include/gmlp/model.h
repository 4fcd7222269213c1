#pragma once
// The gMLP family (docs/variants.md): every task and variant is one Model. Parameters
// live in ONE contiguous buffer (gradients in a second with the same layout),
// activations in one arena sized on first use.
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "gmlp/config.h"
#include "gmlp/device.h"
#include "gmlp/rng.h"

namespace gmlp {

class Backend;
template <typename T>
class DeviceBuffer;
template <typename T>
class HostBuffer;
struct BlockCall;
struct BlockSaved;
struct BlockScratch;

// One named tensor inside the parameter buffer (the tensor names of docs/checkpoint.md, [out, in] layout).
struct ParamInfo {
  std::string name;
  std::vector<int64_t> shape;
  size_t offset = 0;  // in floats
  size_t size = 0;
  bool decay = false;  // AdamW weight decay: matrices yes; norms, biases, SGU bias no
};

// Views into a parameter (or gradient) buffer; absent tensors are nullptr.
struct BlockParams {
  float *norm_w, *norm_b;          // [d]
  float *proj_in_w, *proj_in_b;    // [d_ffn, d], [d_ffn]
  float *sgu_norm_w, *sgu_norm_b;  // [gate channels]
  float *spatial_w, *spatial_b;    // per head: [n, n] (or Toeplitz [2n-1] / [n]), [n]
  float *attn_qkv_w, *attn_qkv_b;  // [3 d_attn, d], [3 d_attn]            (aMLP)
  float *attn_out_w, *attn_out_b;  // [d_ffn/2, d_attn], [d_ffn/2]         (aMLP)
  float *proj_out_w, *proj_out_b;  // [d, branch channels], [d]
};

struct ParamViews {
  float* embed = nullptr;                          // [vocab, d]           token tasks
  float *patch_w = nullptr, *patch_b = nullptr;    // [d, C*ph*pw], [d]    vision
  std::vector<BlockParams> blocks;
  float *norm_w, *norm_b;  // [d]
  float *head_w, *head_b;  // [out, d], [out]: out = vocab or classes
};

// One forward's inputs. Token tasks: tokens (B rows of T ids, row b at tokens + b*stride).
// Vision: images [B, C, H, W], floats as the model takes them (normalised by the caller),
// or image_bytes: pixel values 0..255, which the model normalises as it cuts its patches,
// by config().normalization (none: byte / 255), to the floats that normalising byte / 255
// on the host gives, to the bit. Optional:
//  lengths [B]: real tokens per row (bidirectional token tasks; the rest is padding);
//  targets: per token (same layout as tokens; < 0 ignored) for LM/MLM, per row [B] for
//           classify/vision; without targets forward returns 0;
//  keep [L, B]: stochastic-depth multipliers of each block's branch (0 or 1/p);
//  dropout: a training forward's dropout (model.dropout on each block's branch,
//           model.head_dropout on a classifier's pooled input), its masks drawn by
//           counter from dropout_seed where the ops read them (docs/variants.md), the
//           batch's row b being row row_offset + b of the global batch (data parallelism:
//           every split of a global batch draws the same masks);
//  images_on_backend: images (or image_bytes) is the model's backend memory (a DeviceBuffer of its
//           backend), read in place instead of uploaded each forward: a batch used
//           again and again, as gmlp bench's, stays on the GPU as a PyTorch benchmark's
//           tensors do. A host pointer so marked faults on a GPU;
//  label_smoothing, mix_targets, mix_weights: a training batch's targets as distributions
//           (ops::SoftTargets): label_smoothing's share of each target spread evenly
//           over the classes; a classifier's row b (mixup, CutMix: train.mixup,
//           train.cutmix) weighted mix_weights[b] of targets[b] and the rest of
//           mix_targets[b] (both [B], or both null);
//  mean_over, add_loss: the batch is one piece of a larger one (gradient accumulation:
//           train.grad_accum): the loss and its gradient are means over mean_over targets
//           (> 0; 0: this batch's own), and with add_loss the loss is added to
//           step_scalars()[0] instead of written there. The pieces' forwards and
//           backwards, one after another, then leave the whole batch's mean loss and add
//           up its gradients, each row's gradient the one it has in the whole batch.
struct Batch {
  int B = 0, T = 0;
  const int32_t* tokens = nullptr;
  int stride = 0;
  const float* images = nullptr;
  const uint8_t* image_bytes = nullptr;
  bool images_on_backend = false;
  const int32_t* lengths = nullptr;
  const int32_t* targets = nullptr;
  float label_smoothing = 0.f;
  const int32_t* mix_targets = nullptr;
  const float* mix_weights = nullptr;
  const float* keep = nullptr;
  bool dropout = false;
  uint64_t dropout_seed = 0;
  int row_offset = 0;
  int64_t mean_over = 0;
  bool add_loss = false;
};

// The ordered tensor list of a config, and views of any buffer laid out by it.
std::vector<ParamInfo> param_layout(const ModelConfig& c);
ParamViews param_views(const ModelConfig& c, float* base);
// Survival probability of block l (0-based) under stochastic depth: 1 - ((l+1)/L)(1 - p_L).
float survival_probability(const ModelConfig& c, int l);
// Draws keep[L, B] for one training batch: 1/p_l with probability p_l, else 0.
void draw_keep(const ModelConfig& c, int B, Rng& rng, float* keep);

// Turns on a training batch's dropout where the config has any (model.dropout, or
// model.head_dropout on a classifier), drawing its seed from rng (one draw; none without
// dropout). Each mask entry is then 0 with probability p, else 1/(1 - p).
void draw_dropout(const ModelConfig& c, Rng& rng, Batch& batch);
// Whether the config drops anything in training.
bool has_dropout(const ModelConfig& c);

// Head k of layer l's spatial weights as a dense [n, n] matrix, Toeplitz weights
// expanded (docs/variants.md); a causal model's unused upper triangle reads 0.
std::vector<float> dense_spatial_weights(const class Model& m, int layer, int head);

// Useful FLOPs of one forward per token at sequence length T: the channel GEMMs, the
// spatial product (its causal half when causal), tiny attention, and the head.
// Elementwise work is not counted. Training is 3x (forward, and the two GEMMs of each
// backward).
double forward_flops_per_token(const ModelConfig& c, int T);

class Model {
 public:
  // On the CPU (the default) or a CUDA device (gmlp/device.h). Error when the device
  // cannot be used.
  explicit Model(const ModelConfig& config, Device device = Device::cpu);
  // On a given backend (src/backend/backend.h), for tests and other backends.
  Model(const ModelConfig& config, Backend& backend);
  ~Model();
  Model(const Model&) = delete;
  Model& operator=(const Model&) = delete;

  const ModelConfig& config() const { return cfg_; }
  Device device() const;
  const std::vector<ParamInfo>& params() const { return layout_; }
  const ParamInfo& param(const std::string& name) const;  // Error if unknown
  size_t num_params() const { return weights_.size(); }

  // Host access to the parameters and gradients, on every device. On the CPU these are
  // the model's own buffers. On a device they are host mirrors that follow the device
  // copy: every call brings the mirror up to date (a download when the device copy
  // changed since), and the non-const forms mark the host copy as the newer one, so
  // that the next forward, backward or optimizer step uploads what was written through
  // them. Hold such a pointer only while nothing else runs on the model.
  float* weights();
  const float* weights() const;
  // Named views of the host weights (the same rules), for readers such as the decoder.
  const ParamViews& views() const;
  // The gradients are made (zero) by the first of grads(), zero_grad() and backward():
  // like the mirrors, a const call may write the model, so not from two threads at once.
  float* grads();
  const float* grads() const;

  // The backend's copies, for the optimizer and clipping (gmlp/optimizer.h) and a
  // gradient all-reduce: backend memory, up to date when returned; `write` marks the
  // backend copy as the newer one. On the CPU the same buffers as weights()/grads().
  Backend& backend() const { return *be_; }
  // Named views of the backend's copy of the weights (device memory on a device), up to
  // date when returned: for readers that run on the backend, such as the cached decoder.
  const ParamViews& backend_views() const;
  float* device_weights(bool write);
  float* device_grads(bool write);

  // docs/model.md §2 init: Linear U(+-1/sqrt(fan_in)); LayerNorm 1/0; embedding N(0,1);
  // spatial W ~ U(-spatial_init, spatial_init), b = 1.
  void init(Rng& rng);
  void zero_grad();

  // Returns the mean cross-entropy (nats) over the targets >= 0, or 0 without targets.
  // T <= seq_len unless the model runs at any length (Toeplitz). Logits stay available
  // until the next call.
  double forward(const Batch& batch);
  // forward() without reading the loss back: on a device its work is queued and the loss
  // stays in step_scalars()[0], so that a training step can queue its backward, clipping
  // and update behind it and wait once, for its loss (train_step, gmlp/optimizer.h).
  void forward_queued(const Batch& batch);
  // Two doubles in backend memory: the last forward's loss, and the gradients' sum of
  // squares that the last clip_grad_norm wrote (what AdamW's guard reads: a step whose
  // loss or gradient is not finite updates nothing). queue_read_step() queues their
  // read-back behind the work queued so far; read_step() waits for it (the latest one
  // queued) and gives both, on a device without waiting for the work queued after it, so
  // that the next step's forward can run meanwhile (the trainer's pipeline).
  double* step_scalars();
  struct StepScalars {
    double loss, sum_squares;
  };
  void queue_read_step();
  StepScalars read_step();
  // The token-model shorthand: tokens and targets share the layout.
  double forward(const int32_t* tokens, const int32_t* targets, int stride, int B, int T) {
    Batch b;
    b.B = B;
    b.T = T;
    b.tokens = tokens;
    b.stride = stride;
    b.targets = targets;
    return forward(b);
  }
  // Accumulates d(mean loss)/d(params) into grads(); needs a forward with targets
  // made while gradients were enabled, one backward per forward (the backward consumes
  // some of what the forward saved).
  void backward();
  // Called inside backward() with each contiguous range of grads() (offset and count in
  // floats) as soon as it holds its final value: the final norm and head first, then
  // each block from the last to the first, then the input layer. Data-parallel
  // training reduces a range across processes while earlier layers are still in
  // backward. Empty (the default): not called.
  using GradReadyHook = std::function<void(size_t offset, size_t count)>;
  void set_grad_ready_hook(GradReadyHook hook) { grad_ready_ = std::move(hook); }
  // Like torch.no_grad: with gradients disabled, forward keeps only one layer's
  // activations (evaluation, generation, inference) and backward is refused.
  void set_grad_enabled(bool on) { grad_enabled_ = on; }
  bool grad_enabled() const { return grad_enabled_; }
  // Logits of the last forward: per-token tasks sequence-major, row t * B + b with
  // vocab_size columns; classify/vision [B, n_classes]. With the sparse MLM head, only
  // the rows with a target, in that order (logit_rows() of them).
  const float* logits() const;
  int logit_rows() const;
  // Masked LM: run the output layer only at positions with a target (the ~15% chosen),
  // which is most of a large vocabulary's cost. Loss and gradients are unchanged.
  void set_sparse_mlm_head(bool on) { sparse_head_ = on; }
  bool sparse_mlm_head() const { return sparse_head_; }
  int last_T() const { return T_; }
  int last_B() const { return B_; }

 private:
  struct Arena;
  struct Mirror;  // a parameter-sized buffer on the device and which copy is newer
  void ensure_arena(int B, int T, bool grad);
  std::unique_ptr<Arena> make_arena(int B, int T, bool grad, bool bf16) const;
  void ensure_grads() const;
  BlockCall block_call(int l) const;  // the shape, padding and drop masks of the last forward, at layer l
  void embed_forward(const Batch& in, float* x);
  void embed_backward(const float* dx);
  void targets_forward(const Batch& in);
  void head_forward(const Batch& in, const float* xL);
  void head_backward(const float* xL);
  const float* image_table();

  ModelConfig cfg_;
  Backend* be_;
  std::vector<ParamInfo> layout_;
  // Host buffers: the model's own on the CPU, mirrors of the device copies otherwise
  // (mutable: a const read refreshes the mirror). The gradients' buffers and views are
  // made on first use (ensure_grads, also from a const read).
  mutable std::vector<float> weights_, grads_;
  std::unique_ptr<Mirror> dw_mirror_;              // null on the CPU
  mutable std::unique_ptr<Mirror> dg_mirror_;      // null on the CPU
  ParamViews w_;                                   // views of the host buffers
  mutable ParamViews g_;
  ParamViews dw_;                                  // views of the backend's buffers (w_ and g_ on the CPU)
  mutable ParamViews dg_;
  std::vector<float> pe_;  // sinusoidal table [T, d] when enabled (grown for longer T)
  std::unique_ptr<DeviceBuffer<float>> image_table_;  // [C, 256]: what each byte of a channel stands for (on use)
  std::unique_ptr<Arena> arena_;
  std::unique_ptr<DeviceBuffer<double>> scalars_;  // step_scalars()
  std::unique_ptr<HostBuffer<double>> scalars_h_;  // where queue_read_step reads them back to
  mutable std::vector<float> logits_host_;  // a device model's logits, read back by logits()
  int B_ = 0, T_ = 0;
  bool grad_enabled_ = true;
  bool backward_ready_ = false;  // the last forward kept what backward needs
  bool last_lengths_ = false, last_keep_ = false;  // the last forward had padding / stochastic depth
  bool last_dropout_ = false;  // the last forward dropped, by these:
  uint64_t last_seed_ = 0;
  int last_row_offset_ = 0;
  bool sparse_head_ = false, last_sparse_ = false;
  int head_rows_ = 0;  // sparse head: the rows chosen (staged in the arena, with their targets)
  GradReadyHook grad_ready_;
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
