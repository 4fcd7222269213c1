// The gMLP model of every task (docs/variants.md): the task's input (token or patch
// embeddings), L blocks (src/model/block.cpp) and the task's head and loss, over one
// parameter buffer and one activation arena.
//
// The arena holds, per layer, what block.h's BlockSaved lists, plus scratch that every
// layer shares. With gradients disabled only one layer's slots exist and every layer
// reuses them.
#include "gmlp/model.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>

#include "backend/backend.h"
#include "gmlp/error.h"
#include "gmlp/image.h"
#include "model/block.h"

namespace gmlp {

// The arena: every buffer is backend memory (device memory on a GPU, one arena there
// as on the CPU). Ids, padding lengths and stochastic depth's multipliers are assembled
// on the host and uploaded (on the CPU the upload is a copy); dropout's masks are never
// stored: the ops compute them from their counters (ops/dropout_mask.h).
struct Model::Arena {
  int B = 0, T = 0;              // capacity
  bool training = false;         // made with gradients: every layer's slots
  bool bf16 = false;             // U and F held in bf16 (block.h): training, Backend::stores_bf16
  size_t d = 0, f = 0, g = 0, nb = 0, da = 0;  // nb: branch channels
  // The slots of a forward of B x T: layer l's saved tensors, and the residual stream
  // entering layer l (l = L: the blocks' output).
  BlockSaved layer(int l, bool grad, int B, int T);
  float* stream(int l, bool grad, int B, int T);
  BlockScratch scratch();
  // Layer l's bf16 proj_in_w copy, its proj_out_w copy right after (null without them).
  uint16_t* proj_w16(int l) const {
    return w16.empty() ? nullptr : w16.data() + size_t(l) * (f * d + d * nb);
  }
  // Layer l's bf16 copies of its dense spatial W (ops.h's SguParams::w16), or null.
  uint16_t* spatial_w16(int l) const { return sw16.empty() ? nullptr : sw16.data() + l * sw16_layer; }
  using F32 = DeviceBuffer<float>;
  using I32 = DeviceBuffer<int32_t>;
  // Host staging of a forward's inputs, uploaded in line with the work (upload_queued:
  // page-locked on a GPU, so the host need not wait for the device first): [M] token ids
  // and targets, sequence-major, [M] the sparse head's rows, [B] lengths, [L, B] keep,
  // [B] a mixed batch's second targets and first targets' weights (Batch::mix_targets).
  HostBuffer<int32_t> tokens_h, targets_h, rows_h, lengths_h, mix_targets_h;
  HostBuffer<float> keep_h, mix_weights_h;
  I32 tokens, targets, lengths, rows;        // [M] ([B] lengths); rows: the sparse head's
  I32 mix_targets;                           // [B]
  F32 keep, mix_weights;                     // [L, B], [B]
  F32 images, patches;                       // vision: [B, C*H*W] (a device's, made on use), [M, C*ph*pw]
  DeviceBuffer<uint8_t> image_bytes;         // or the images as bytes (a device's, made on use)
  DeviceBuffer<uint16_t> patches16, patch_w16;  // and where bf16 is held, for its training forwards, the patches
                                                //   and patch_w ([d, C*ph*pw]) in bf16 as the patch embedding's
                                                //   products read them (the float patches then made on use, by a
                                                //   forward without gradients, which keeps floats)
  F32 pe;                                    // sinusoidal positions [T', d]
  F32 x;                                     // (L+1) x [M, d] (2 without grad)
  F32 ln_mean, ln_rstd, g_mean, g_rstd;      // L x [M]
  F32 u;                                     // L x [M, d_ffn] (1 without grad; beside u16 only for L = 1)
  F32 F;                                     // L x [M, g]
  DeviceBuffer<uint16_t> u16, F16;           // or, held in bf16 (block.h): L x [M, d_ffn], L x [M, g]
  DeviceBuffer<uint16_t> h16, S16, dF16;     // with them, in bf16: [M, d] the LayerNorm output (and the
                                             //   patch embedding's rounded dY), [M, s] S
                                             //   (and G), [M, g] dL/dF
  DeviceBuffer<uint16_t> dS16, dG16;         // and [M, s] dL/dS, [M, g] dL/dG, for dS and dG
  DeviceBuffer<uint16_t> kept_h16, kept_G16; // and L x [M, d], L x [M, g]: each layer's h and G as its
                                             //   forward wrote them, for its backward (block.h)
  DeviceBuffer<uint16_t> w16;                // L x ([d_ffn, d], [d, s]): proj_in_w and proj_out_w in bf16,
                                             //   rounded at each training forward
  DeviceBuffer<uint16_t> sw16;               // and, dense spatial weights, L x heads x spatial_w16_head(T)
  int64_t sw16_layer = 0;                    //   (ops.h), their copies for the products at that T
  F32 qkv, P, O;                             // aMLP: L x [M, 3da], [B, T, T], [M, da]
  F32 f_mean, f_rstd;                        // [M] final norm
  F32 pooled;                                // [B, d] classify/vision
  F32 h_sel;                                 // [M, d] the sparse head's rows
  F32 logits, dlogits;                       // [M or B, out]
  // Scratch reused by every layer.
  F32 h, dh, dx;                             // [M, d]
  F32 z;                                     // [M, d_ffn]: Z, no-SGU models only (block.cpp)
  F32 S, dS;                                 // [M, s]: S doubles as G
  F32 dF, dG, att;                           // [M, g]; att: the attention's output
  F32 dO, dP, dqkv;                          // aMLP backward
  F32 Wd, dWd;                               // Toeplitz: dense [heads, T, T]
};

struct Model::Mirror : HostMirror {};

Model::Model(const ModelConfig& config, Device device) : Model(config, backend_for(device)) {}

Model::Model(const ModelConfig& config, Backend& backend) : cfg_(config), be_(&backend) {
  cfg_.validate();
  layout_ = param_layout(cfg_);
  const size_t total = layout_.back().offset + layout_.back().size;
  weights_.assign(total, 0.f);
  w_ = param_views(cfg_, weights_.data());
  if (be_->host_memory()) {
    dw_ = w_;
  } else {
    dw_mirror_ = std::make_unique<Mirror>();
    dw_mirror_->dev = DeviceBuffer<float>(*be_, total);  // zero-filled, as the host vector
    dw_ = param_views(cfg_, dw_mirror_->dev.data());
  }
}

// The gradients, zero, on first use (zero_grad, backward, grads()): a model that only
// runs forwards (evaluation, generation, inference) never holds them, a parameter-sized
// buffer (the small config's inference peaked 12 MB higher with them).
void Model::ensure_grads() const {
  if (!grads_.empty()) return;
  // Everything is made first and kept last, so that a failed allocation (a device out of
  // memory) leaves the model as it was, to be asked again.
  std::vector<float> host(weights_.size(), 0.f);
  std::unique_ptr<Mirror> mirror;
  if (!be_->host_memory()) {
    mirror = std::make_unique<Mirror>();
    mirror->dev = DeviceBuffer<float>(*be_, host.size());  // zero-filled, as the host vector
  }
  grads_ = std::move(host);
  g_ = param_views(cfg_, grads_.data());
  dg_mirror_ = std::move(mirror);
  dg_ = dg_mirror_ ? param_views(cfg_, dg_mirror_->dev.data()) : g_;
}

Model::~Model() = default;

Device Model::device() const { return be_->device(); }

float* Model::weights() {
  if (dw_mirror_) {
    dw_mirror_->to_host(*be_, weights_);
    dw_mirror_->state = HostMirror::host_newer;
  }
  return weights_.data();
}
const float* Model::weights() const {
  if (dw_mirror_) dw_mirror_->to_host(*be_, weights_);
  return weights_.data();
}
const ParamViews& Model::views() const {
  weights();
  return w_;
}
float* Model::grads() {
  ensure_grads();
  if (dg_mirror_) {
    dg_mirror_->to_host(*be_, grads_);
    dg_mirror_->state = HostMirror::host_newer;
  }
  return grads_.data();
}
const float* Model::grads() const {
  ensure_grads();
  if (dg_mirror_) dg_mirror_->to_host(*be_, grads_);
  return grads_.data();
}
float* Model::device_weights(bool write) {
  if (!dw_mirror_) return weights_.data();
  dw_mirror_->to_device(*be_, weights_);
  if (write) dw_mirror_->state = HostMirror::device_newer;
  return dw_mirror_->dev.data();
}
float* Model::device_grads(bool write) {
  ensure_grads();
  if (!dg_mirror_) return grads_.data();
  dg_mirror_->to_device(*be_, grads_);
  if (write) dg_mirror_->state = HostMirror::device_newer;
  return dg_mirror_->dev.data();
}
const ParamViews& Model::backend_views() const {
  if (dw_mirror_) dw_mirror_->to_device(*be_, weights_);
  return dw_;
}

void Model::zero_grad() {
  if (grads_.empty()) return ensure_grads();  // born zero
  if (!dg_mirror_) {
    std::fill(grads_.begin(), grads_.end(), 0.f);
    return;
  }
  be_->zero(dg_mirror_->dev.data(), grads_.size() * sizeof(float));
  dg_mirror_->state = HostMirror::device_newer;
}

void Model::ensure_arena(int B, int T, bool grad) {
  // Training an SGU model on a backend that holds U and F in bf16 (a GPU under bf16),
  // each layer keeps them in half the bytes, and no float U or F is kept.
  // A training arena follows the precision set now; a forward without gradients takes
  // any arena that is large enough (Arena::layer gives it floats).
  const bool bf16 = grad && cfg_.has_sgu() && be_->stores_bf16();
  if (arena_ && B <= arena_->B && T <= arena_->T && (!grad || (arena_->training && arena_->bf16 == bf16))) return;
  if (arena_ && T > arena_->T) {
    // A longer window: by half again at least (within the model's window while the call
    // is), so that a window that grows a token at a time, as generation's recompute
    // does, reallocates a few times rather than on every call. Each layer's slots are
    // packed by the call's own B x T, so the room beyond it is never touched. The batch
    // stays exact: a larger one is a caller's choice, not a growing window.
    const int window = T <= cfg_.seq_len ? cfg_.seq_len : std::numeric_limits<int>::max();
    T = std::max(T, std::min(window, arena_->T + arena_->T / 2));
  }
  arena_.reset();  // free the old arena before allocating the new one
  try {
    arena_ = make_arena(B, T, grad, bf16);
  } catch (const Error& e) {
    if (be_->host_memory()) throw;
    // What was made of the arena is freed by now: what the device holds is the rest.
    char held[32];
    std::snprintf(held, sizeof held, "%.1f", double(be_->bytes_in_use()) / double(1 << 20));
    throw Error("the device ran out of memory making room for the activations of " +
                std::string(grad ? "a training batch" : "a batch") + " of " + std::to_string(B) + " x " +
                std::to_string(T) + " (" + e.what() + "; the device's other buffers hold " + held + " MiB): " +
                (grad ? "take each step's batch in pieces (--grad-accum K, train.grad_accum: the same run in the "
                        "memory of a batch K times smaller) or a smaller one"
                      : "a smaller batch would fit"));
  }
}

std::unique_ptr<Model::Arena> Model::make_arena(int B, int T, bool grad, bool bf16) const {
  const size_t M = size_t(B) * T, L = size_t(grad ? cfg_.n_layers : 1), d = cfg_.d_model, f = cfg_.d_ffn,
               g = cfg_.gate_channels(), s = cfg_.branch_channels(), da = cfg_.d_attn, out = cfg_.out_dim();
  auto a = std::make_unique<Arena>();
  Backend& be = *be_;
  auto f32 = [&](size_t n) { return DeviceBuffer<float>(be, n); };
  a->B = B;
  a->T = T;
  a->training = grad;
  a->bf16 = bf16;
  a->d = d;
  a->f = f;
  a->g = g;
  a->nb = s;
  a->da = da;
  a->tokens_h = HostBuffer<int32_t>(be, M);
  a->targets_h = HostBuffer<int32_t>(be, M);
  a->rows_h = HostBuffer<int32_t>(be, M);
  a->lengths_h = HostBuffer<int32_t>(be, size_t(B));
  a->keep_h = HostBuffer<float>(be, size_t(cfg_.n_layers) * B);
  a->mix_targets_h = HostBuffer<int32_t>(be, size_t(B));
  a->mix_weights_h = HostBuffer<float>(be, size_t(B));
  a->tokens = DeviceBuffer<int32_t>(be, M);
  a->targets = DeviceBuffer<int32_t>(be, M);
  a->rows = DeviceBuffer<int32_t>(be, M);
  a->lengths = DeviceBuffer<int32_t>(be, size_t(B));
  a->keep = f32(size_t(cfg_.n_layers) * B);
  a->mix_targets = DeviceBuffer<int32_t>(be, size_t(B));
  a->mix_weights = f32(size_t(B));
  // A device's image buffer is made at the first batch that needs uploading (one
  // already on the backend needs none).
  if (!cfg_.token_input() && bf16) {
    a->patches16 = DeviceBuffer<uint16_t>(be, M * size_t(cfg_.patch_dim()));
    a->patch_w16 = DeviceBuffer<uint16_t>(be, d * size_t(cfg_.patch_dim()));
  } else if (!cfg_.token_input()) {
    a->patches = f32(M * size_t(cfg_.patch_dim()));
  }
  a->x = f32((grad ? L + 1 : 2) * M * d);  // one slot per layer input, plus the output
  a->ln_mean = f32(L * M);
  a->ln_rstd = f32(L * M);
  // U, the projection before the GELU, per layer; without gradients one slot serves
  // every layer. Training under bf16 holds U and dU in u16 alone; a forward without
  // gradients in that arena (evaluation) takes its float U in u16's bytes, L x 2 bytes
  // a value where it needs 4 (a forward invalidates the saved tensors anyway), or in a
  // slot of its own for a single layer. Z = GELU(U) is stored only without an SGU, where
  // it is the branch (the SGU reads U, block.cpp); there, without gradients, nothing
  // reads U after its GELU, so the projection lands in z and the GELU runs in place.
  if (bf16) {
    a->u16 = DeviceBuffer<uint16_t>(be, L * M * f);
    a->F16 = DeviceBuffer<uint16_t>(be, L * M * g);
    a->h16 = DeviceBuffer<uint16_t>(be, M * d);
    a->S16 = DeviceBuffer<uint16_t>(be, M * s);  // and G: s == g in every SGU form (config.h)
    a->dF16 = DeviceBuffer<uint16_t>(be, M * g);
    a->dS16 = DeviceBuffer<uint16_t>(be, M * s);
    if (sgu_needs_dG(cfg_)) a->dG16 = DeviceBuffer<uint16_t>(be, M * g);
    a->kept_h16 = DeviceBuffer<uint16_t>(be, L * M * d);
    a->kept_G16 = DeviceBuffer<uint16_t>(be, L * M * g);
    a->w16 = DeviceBuffer<uint16_t>(be, L * (f * d + d * s));
    if (cfg_.has_sgu() && cfg_.spatial != Spatial::toeplitz) {
      a->sw16_layer = cfg_.sgu_heads * ops::spatial_w16_head(T);
      a->sw16 = DeviceBuffer<uint16_t>(be, L * size_t(a->sw16_layer));
    }
  }
  if (grad && !bf16) a->u = f32(L * M * f);
  else if (cfg_.has_sgu() && !(bf16 && L >= 2)) a->u = f32(M * f);
  if (cfg_.has_sgu()) {
    a->g_mean = f32(L * M);
    a->g_rstd = f32(L * M);
    if (!bf16) a->F = f32(L * M * g);
  }
  if (da > 0) {
    a->qkv = f32(L * M * 3 * da);
    a->P = f32(L * size_t(B) * T * T);
    a->O = f32(L * M * da);
    a->att = f32(M * g);
  }
  a->f_mean = f32(M);
  a->f_rstd = f32(M);
  const size_t rows_out = cfg_.per_token_output() ? M : size_t(B);
  a->logits = f32(rows_out * out);
  if (!cfg_.per_token_output()) a->pooled = f32(size_t(B) * d);
  if (cfg_.task == Task::mlm) a->h_sel = f32(M * d);
  a->h = f32(M * d);
  if (!cfg_.has_sgu()) a->z = f32(M * f);
  a->S = f32(M * s);
  if (cfg_.spatial == Spatial::toeplitz) a->Wd = f32(size_t(cfg_.sgu_heads) * T * T);
  if (grad) {
    a->dlogits = f32(rows_out * out);
    a->dh = f32(M * d);
    a->dx = f32(M * d);
    if (!bf16) a->dS = f32(M * s);
    // A bf16 arena's forward without gradients takes its float F in F16's bytes (below),
    // or in dF for a single layer.
    if (sgu_needs_dF(cfg_, bf16) || (bf16 && L < 2)) a->dF = f32(M * g);
    if (sgu_needs_dG(cfg_) && !bf16) a->dG = f32(M * g);
    if (da > 0) {
      a->dO = f32(M * da);
      a->dP = f32(size_t(be.attention_rows_at_once(B)) * T * T);
      a->dqkv = f32(M * 3 * da);
    }
    if (cfg_.spatial == Spatial::toeplitz) a->dWd = f32(size_t(cfg_.sgu_heads) * T * T);
  }
  return a;
}

const float* Model::logits() const {
  require(arena_ != nullptr, "Model::logits called before forward");
  if (be_->host_memory()) return arena_->logits.data();
  logits_host_.resize(size_t(logit_rows()) * cfg_.out_dim());
  be_->download(logits_host_.data(), arena_->logits.data(), logits_host_.size() * sizeof(float));
  return logits_host_.data();
}

int Model::logit_rows() const {
  if (last_sparse_) return head_rows_;
  return cfg_.per_token_output() ? B_ * T_ : B_;
}

// The arena's slot policy: with gradients every layer keeps its own tensors; without,
// every layer reuses slot 0 and the residual stream alternates between two rows.
BlockSaved Model::Arena::layer(int l, bool grad, int B, int T) {
  const size_t M = size_t(B) * T, k = grad ? size_t(l) : 0;
  auto at = []<typename E>(DeviceBuffer<E>& v, size_t off) { return v.empty() ? nullptr : v.data() + off; };
  BlockSaved s;
  s.x = stream(l, grad, B, T);
  s.ln_mean = at(ln_mean, k * M);
  s.ln_rstd = at(ln_rstd, k * M);
  if (bf16 && grad) {
    s.u16 = at(u16, k * M * f);
    s.F16 = at(F16, k * M * g);
    s.h16 = at(kept_h16, k * M * d);
    s.G16 = at(kept_G16, k * M * g);
  } else {  // in a bf16 arena a forward without gradients takes floats, as any inference
    if (!u.empty())
      s.u = at(u, k * M * f);
    else if (!u16.empty())
      s.u = reinterpret_cast<float*>(u16.data());  // device memory: only kernels read it, as floats
    else
      s.u = z.data();
    if (!bf16)
      s.F = at(F, k * M * g);
    else
      s.F = dF.empty() ? reinterpret_cast<float*>(F16.data()) : dF.data();  // as U above
  }
  s.g_mean = at(g_mean, k * M);
  s.g_rstd = at(g_rstd, k * M);
  s.qkv = at(qkv, k * M * 3 * da);
  s.P = at(P, k * M * T);
  s.O = at(O, k * M * da);
  return s;
}

float* Model::Arena::stream(int l, bool grad, int B, int T) {
  const size_t M = size_t(B) * T;
  return x.data() + (grad ? size_t(l) : size_t(l % 2)) * M * d;
}

BlockScratch Model::Arena::scratch() {
  auto at = []<typename E>(DeviceBuffer<E>& v) { return v.empty() ? nullptr : v.data(); };
  return {at(h), at(z), at(S), at(att), at(Wd), at(h16), at(S16), at(dF16), at(dS16), at(dG16), at(dh), at(dS),
          at(dF), at(dG), at(dO), at(dP), at(dqkv), at(dWd)};
}

void Model::forward_queued(const Batch& in) {
  const int B = in.B, T = in.T;
  require(B > 0 && T > 0, "forward: empty batch");
  // Row counts and offsets in int, with room: the kernels' and products' dimensions.
  constexpr int64_t kAtMost = (int64_t(1) << 31) / 8;
  require(int64_t(B) * T <= kAtMost,
          "forward: batch x sequence = " + std::to_string(int64_t(B) * T) + " tokens is more than one step can hold");
  // The spatial mixing takes a position's gate channels of every sequence as one row of
  // its products ([T, B g]: the products' and the GPU kernels' int dimensions), as
  // aMLP's attention takes B x 3 d_attn; the same margin.
  const int wide = std::max(cfg_.gate_channels(), 3 * cfg_.d_attn);
  const int64_t row = int64_t(B) * wide;
  require(!cfg_.has_sgu() || row <= kAtMost, [&] {
    return "forward: a batch of " + std::to_string(B) + " sequences x " + std::to_string(wide) +
           " gate channels = " + std::to_string(row) +
           " values at each position, more than the spatial mixing takes (" + std::to_string(kAtMost) + ")";
  });
  if (cfg_.token_input()) {
    require(in.tokens != nullptr, "forward: a token model needs tokens");
    require(T <= cfg_.seq_len || cfg_.any_length(),
            "forward: sequence of " + std::to_string(T) + " tokens is longer than the model's window n = " +
                std::to_string(cfg_.seq_len));
  } else {
    require(
        (in.images != nullptr) != (in.image_bytes != nullptr),
        in.images ? "forward: a batch's images are floats or bytes, not both" : "forward: a vision model needs images");
    require(T == cfg_.seq_len, "forward: a vision batch has T = " + std::to_string(cfg_.seq_len) + " patches, got " +
                                   std::to_string(T));
    if (in.image_bytes) image_table();  // made (and its normalisation read) before anything is queued
  }
  require(in.lengths == nullptr || (!cfg_.causal() && cfg_.token_input()),
          "forward: padding lengths are for bidirectional token models (mlm, classify)");
  ensure_arena(B, T, grad_enabled_);
  Arena& a = *arena_;
  // The staging is written below: the last forward's uploads from it must have read it.
  be_->finish_queued_uploads();
  backward_ready_ = false;
  B_ = B;
  T_ = T;

  last_lengths_ = in.lengths != nullptr;
  if (in.lengths) {
    for (int b = 0; b < B; ++b)
      require(in.lengths[b] >= 1 && in.lengths[b] <= T, [&] {
        return "forward: row " + std::to_string(b) + " has length " + std::to_string(in.lengths[b]) + ", outside [1, " +
               std::to_string(T) + "]";
      });
    std::copy(in.lengths, in.lengths + B, a.lengths_h.data());
    be_->upload_queued(a.lengths.data(), a.lengths_h.data(), sizeof(int32_t) * size_t(B));
  }
  last_keep_ = in.keep != nullptr;
  if (in.keep) {
    std::copy(in.keep, in.keep + size_t(cfg_.n_layers) * B, a.keep_h.data());
    be_->upload_queued(a.keep.data(), a.keep_h.data(), sizeof(float) * size_t(cfg_.n_layers) * B);
  }
  require(!in.dropout || has_dropout(cfg_), "forward: dropout needs model.dropout or model.head_dropout > 0");
  require(!in.dropout || grad_enabled_, "forward: dropout is for training forwards");
  require(in.row_offset >= 0, "forward: row_offset " + std::to_string(in.row_offset) + " is negative");
  require(in.mean_over >= 0 && in.mean_over <= INT32_MAX,
          "forward: mean_over " + std::to_string(in.mean_over) + " is outside [0, 2^31)");
  last_dropout_ = in.dropout;
  last_seed_ = in.dropout_seed;
  last_row_offset_ = in.row_offset;

  const ParamViews& W = backend_views();
  // Every input checked before the first op (an error leaves nothing half-queued).
  targets_forward(in);
  float* x0 = a.stream(0, grad_enabled_, B, T);
  embed_forward(in, x0);
  if (a.bf16 && grad_enabled_) {  // the weights as their bf16 products take them
    std::vector<ops::Bf16Copy> copies;
    copies.reserve(size_t(2) * cfg_.n_layers + 1);
    if (!a.patch_w16.empty()) copies.push_back({W.patch_w, a.patch_w16.size(), a.patch_w16.data()});
    for (int l = 0; l < cfg_.n_layers; ++l) {
      const BlockParams& p = W.blocks[size_t(l)];
      copies.push_back({p.proj_in_w, a.f * a.d, a.proj_w16(l)});
      copies.push_back({p.proj_out_w, a.d * a.nb, a.proj_w16(l) + a.f * a.d});
    }
    be_->to_bf16_many(copies.data(), int(copies.size()));
    // The patch embedding, its bf16 patches cut by embed_forward, once its weights' copy is made.
    if (!a.patch_w16.empty())
      be_->linear_forward_bf16(a.patches16.data(), B * T, cfg_.patch_dim(), a.patch_w16.data(), W.patch_b, cfg_.d_model,
                               x0);
    if (uint16_t* sw = a.spatial_w16(0)) {  // and the spatial products' copies of W, at this T
      std::vector<const float*> ws;
      for (int l = 0; l < cfg_.n_layers; ++l) ws.push_back(W.blocks[size_t(l)].spatial_w);
      be_->spatial_w_bf16_many(ws.data(), cfg_.n_layers, cfg_.seq_len, int64_t(cfg_.seq_len) * cfg_.seq_len,
                               cfg_.sgu_heads, T, cfg_.causal(), sw, a.sw16_layer);
    }
  }
  const BlockScratch scratch = a.scratch();
  // Stochastic depth's residual left by each block to the next one's LayerNorm (block.h),
  // where that reads the block's branch from scratch.h as floats: bf16 training without
  // dropout (its mask) or aMLP (whose LayerNorm writes floats to scratch.h).
  const bool leave = a.bf16 && grad_enabled_ && last_keep_ && !last_dropout_ && cfg_.d_attn == 0;
  for (int l = 0; l < cfg_.n_layers; ++l) {
    BlockCall call = block_call(l);
    call.leave_residual = leave && l + 1 < cfg_.n_layers;
    if (leave && l > 0) {
      call.x_before = a.stream(l - 1, true, B, T);
      call.keep_before = a.keep.data() + size_t(l - 1) * B;
      call.x_into = a.stream(l, true, B, T);
    }
    block_forward(*be_, cfg_, W.blocks[size_t(l)], call, a.layer(l, grad_enabled_, B, T), scratch,
                  a.stream(l + 1, grad_enabled_, B, T));
  }
  backward_ready_ = grad_enabled_ && in.targets != nullptr;
  head_forward(in, a.stream(cfg_.n_layers, grad_enabled_, B, T));
}

double Model::forward(const Batch& in) {
  forward_queued(in);
  if (!in.targets) return 0.0;  // nothing to wait for
  queue_read_step();            // this forward's loss, whatever an earlier queued read left pending
  return read_step().loss;
}

double* Model::step_scalars() {
  if (!scalars_) scalars_ = std::make_unique<DeviceBuffer<double>>(*be_, 2);
  return scalars_->data();
}

void Model::queue_read_step() {
  if (!scalars_h_) scalars_h_ = std::make_unique<HostBuffer<double>>(*be_, 2);
  be_->download_queued(scalars_h_->data(), step_scalars(), 2 * sizeof(double));
}

Model::StepScalars Model::read_step() {
  require(scalars_h_ != nullptr, "internal: Model::read_step before any queue_read_step");
  be_->finish_queued_downloads();
  const double* v = scalars_h_->data();
  return {v[0], v[1]};
}

BlockCall Model::block_call(int l) const {
  BlockCall call;
  call.T = T_;
  call.B = B_;
  // The arena's copies stay from earlier calls; only this forward's inputs count.
  call.lengths = last_lengths_ ? arena_->lengths.data() : nullptr;
  call.keep = last_keep_ ? arena_->keep.data() + size_t(l) * B_ : nullptr;
  if (last_dropout_) call.drop = ops::drop_mask(last_seed_, l, cfg_.dropout, last_row_offset_);
  if (uint16_t* w16 = arena_->proj_w16(l)) {
    call.proj_in_w16 = w16;
    call.proj_out_w16 = w16 + arena_->f * arena_->d;
    call.spatial_w16 = arena_->spatial_w16(l);
  }
  return call;
}

// A batch's ids or targets (B rows of T, stride apart) staged sequence-major (t * B + b),
// each batch row read in order. These loops and the checks below run between a step's
// read-back and its first launch, while a GPU waits (16,384 values a BERT-size step).
static void stage_sequence_major(const int32_t* src, int64_t stride, int B, int T, int32_t* dst) {
  for (int b = 0; b < B; ++b)
    for (int t = 0; t < T; ++t) dst[size_t(t) * B + b] = src[int64_t(b) * stride + t];
}

// The first of v[0, n) that `bad` holds for, or -1: every value tested without a branch,
// the first looked for only when one is bad (to name it).
template <typename V, typename Bad>
static int first_bad(const V* v, int n, Bad bad) {
  uint32_t any = 0;
  for (int i = 0; i < n; ++i) any |= uint32_t(bad(v[i]));
  for (int i = 0; any && i < n; ++i)
    if (bad(v[i])) return i;
  return -1;
}

// The classifier's input's mask: the stream after the blocks'.
static ops::DropMask head_mask(const ModelConfig& c, bool on, uint64_t seed, int row_offset) {
  return on ? ops::drop_mask(seed, c.n_layers, c.head_dropout, row_offset) : ops::DropMask{};
}

// What a byte of each channel stands for: the floats that normalising byte / 255 on the host
// gives (image.h's byte_table), in the backend's memory, made once.
const float* Model::image_table() {
  if (!image_table_) {
    const Normalization norm = cfg_.normalization.is_null()
                                   ? Normalization{}
                                   : Normalization::from_json(cfg_.normalization, "model config 'normalization'");
    const std::vector<float> table = byte_table(norm, cfg_.image_channels);
    image_table_ = std::make_unique<DeviceBuffer<float>>(*be_, table.size());
    be_->upload(image_table_->data(), table.data(), sizeof(float) * table.size());
  }
  return image_table_->data();
}

// Token ids (checked against the vocabulary) to embeddings, with positions when
// configured; or images to patch embeddings. x: [M, d], sequence-major.
void Model::embed_forward(const Batch& in, float* x) {
  Arena& a = *arena_;
  const int B = in.B, T = in.T, M = B * T, d = cfg_.d_model;
  const ParamViews& W = dw_;
  if (cfg_.token_input()) {
    const int V = cfg_.vocab_size;
    int32_t* staged = a.tokens_h.data();
    stage_sequence_major(in.tokens, in.stride, B, T, staged);
    const int r = first_bad(staged, M, [V](int32_t id) { return uint32_t(id) >= uint32_t(V); });
    require(r < 0, [&] {
      return "forward: token id " + std::to_string(staged[r]) + " outside the vocabulary of " + std::to_string(V);
    });
    be_->upload_queued(a.tokens.data(), a.tokens_h.data(), sizeof(int32_t) * size_t(M));
    if (cfg_.pos_embedding == PosEmbedding::sinusoidal && pe_.size() < size_t(T) * d) {
      pe_.resize(size_t(std::max(T, cfg_.seq_len)) * d);
      ops::sinusoidal_positions(std::max(T, cfg_.seq_len), d, pe_.data());
    }
    if (!pe_.empty() && a.pe.size() < pe_.size()) {
      a.pe = DeviceBuffer<float>(*be_, pe_.size());
      be_->upload(a.pe.data(), pe_.data(), sizeof(float) * pe_.size());
    }
    be_->embedding_forward(W.embed, d, a.tokens.data(), M, B, pe_.empty() ? nullptr : a.pe.data(), x);
  } else {
    ops::Pixels images =
        in.image_bytes ? ops::Pixels::of_bytes(in.image_bytes, image_table()) : ops::Pixels::floats(in.images);
    if (!be_->host_memory() && !in.images_on_backend) {
      const size_t per_image = size_t(cfg_.image_channels) * cfg_.image_height * cfg_.image_width;
      const size_t n = size_t(a.B) * per_image, used = size_t(B) * per_image;
      if (in.image_bytes) {
        if (a.image_bytes.size() < n) a.image_bytes = DeviceBuffer<uint8_t>(*be_, n);
        be_->upload(a.image_bytes.data(), in.image_bytes, used);
        images.bytes = a.image_bytes.data();
      } else {
        if (a.images.size() < n) a.images = DeviceBuffer<float>(*be_, n);
        be_->upload(a.images.data(), in.images, sizeof(float) * used);
        images.values = a.images.data();
      }
    }
    if (!a.patches16.empty() && grad_enabled_) {  // bf16: the product follows the weights' copies (forward_queued)
      be_->extract_patches_bf16(images, B, cfg_.image_channels, cfg_.image_height, cfg_.image_width, cfg_.patch_height,
                                cfg_.patch_width, a.patches16.data());
      return;
    }
    if (a.patches.empty()) a.patches = DeviceBuffer<float>(*be_, size_t(a.B) * a.T * cfg_.patch_dim());
    be_->extract_patches(images, B, cfg_.image_channels, cfg_.image_height, cfg_.image_width, cfg_.patch_height,
                         cfg_.patch_width, a.patches.data());
    be_->linear_forward(a.patches.data(), M, cfg_.patch_dim(), W.patch_w, W.patch_b, d, x);
  }
}

void Model::embed_backward(const float* dx) {
  Arena& a = *arena_;
  const int M = B_ * T_, d = cfg_.d_model;
  if (cfg_.token_input())
    be_->embedding_backward(dx, d, a.tokens.data(), M, cfg_.vocab_size, dg_.embed);
  else if (!a.patches16.empty()) {  // a training forward's bf16 patches (a backward follows no other forward):
                                    // dx rounded into h16 as its columns are summed (the bias), then dW in bf16
    be_->to_bf16_summing_columns(dx, M, d, a.h16.data(), dg_.patch_b, nullptr, 1);
    be_->linear_backward_bf16(a.h16.data(), nullptr, a.patches16.data(), M, cfg_.patch_dim(), nullptr, d, nullptr,
                              false, dg_.patch_w, nullptr);
  } else {
    be_->linear_backward(dx, a.patches.data(), M, cfg_.patch_dim(), dw_.patch_w, d, nullptr, false, dg_.patch_w,
                         dg_.patch_b);
  }
}

// The targets of a batch, checked and uploaded before any of its work is queued: an
// error leaves nothing half-done. The sparse masked-LM head's rows with a target are
// chosen here too.
void Model::targets_forward(const Batch& in) {
  Arena& a = *arena_;
  const int B = in.B, T = in.T, out = cfg_.out_dim();
  last_sparse_ = sparse_head_ && cfg_.task == Task::mlm && in.targets != nullptr;
  if (!in.targets) return;
  require(std::isfinite(in.label_smoothing) && in.label_smoothing >= 0.f && in.label_smoothing < 1.f,
          "forward: label smoothing must be in [0, 1), got " + std::to_string(in.label_smoothing));
  if (in.mix_targets || in.mix_weights) {
    require(in.mix_targets && in.mix_weights, "forward: a mixed batch needs both mix_targets and mix_weights");
    require(!cfg_.per_token_output(), "forward: mixed targets (mixup, CutMix) are a classifier's, one a row");
    const int bad = first_bad(in.mix_targets, B, [out](int32_t y) { return y < 0 || y >= out; });
    require(bad < 0, [&] {
      return "forward: mixed target " + std::to_string(in.mix_targets[bad]) + " outside the " + std::to_string(out) +
             " classes";
    });
    const int off = first_bad(in.mix_weights, B, [](float w) { return !(w >= 0.f && w <= 1.f); });
    require(off < 0, [&] { return "forward: mix weight " + std::to_string(in.mix_weights[off]) + " outside [0, 1]"; });
  }
  if (last_sparse_) {
    // Only the chosen positions have targets: the head (V columns per row, the largest
    // product of a big-vocabulary masked LM) runs on those rows alone.
    // Staged and checked as the dense head's are (below), then the rows with a target
    // kept in order, their targets moved down over the staging (row K <= r).
    int32_t *staged = a.targets_h.data(), *rows = a.rows_h.data();
    stage_sequence_major(in.targets, in.stride, B, T, staged);
    const int bad = first_bad(staged, B * T, [out](int32_t y) { return y >= out; });
    require(bad < 0, [&] {
      return "forward: target " + std::to_string(staged[bad]) + " outside the " + std::to_string(out) + " tokens";
    });
    int K = 0;
    for (int r = 0; r < B * T; ++r) {
      const int32_t y = staged[r];
      rows[K] = r;
      staged[K] = y;
      K += y >= 0;
    }
    head_rows_ = K;
    be_->upload_queued(a.rows.data(), rows, sizeof(int32_t) * size_t(K));
    be_->upload_queued(a.targets.data(), staged, sizeof(int32_t) * size_t(K));
    return;
  }
  const int rows = cfg_.per_token_output() ? B * T : B;
  int32_t* staged = a.targets_h.data();
  if (cfg_.per_token_output())
    stage_sequence_major(in.targets, in.stride, B, T, staged);
  else
    std::copy(in.targets, in.targets + B, staged);
  const int bad = first_bad(staged, rows, [out](int32_t y) { return y >= out; });
  require(bad < 0, [&] {
    return "forward: target " + std::to_string(staged[bad]) + " outside the " + std::to_string(out) +
           (cfg_.per_token_output() ? " tokens" : " classes");
  });
  be_->upload_queued(a.targets.data(), a.targets_h.data(), sizeof(int32_t) * size_t(rows));
  if (in.mix_targets) {  // checked above, uploaded once everything is checked
    std::copy(in.mix_targets, in.mix_targets + B, a.mix_targets_h.data());
    std::copy(in.mix_weights, in.mix_weights + B, a.mix_weights_h.data());
    be_->upload_queued(a.mix_targets.data(), a.mix_targets_h.data(), sizeof(int32_t) * size_t(B));
    be_->upload_queued(a.mix_weights.data(), a.mix_weights_h.data(), sizeof(float) * size_t(B));
  }
}

// The final LayerNorm of xL [M, d] into h, then the task's head and, with targets, the
// loss into step_scalars()[0] (0 without targets). When a backward can follow, the same
// pass writes d(loss)/d(logits): the softmax is computed once per step instead of once
// for the loss and again for the gradient.
void Model::head_forward(const Batch& in, const float* xL) {
  Arena& a = *arena_;
  const ParamViews& W = dw_;
  const int B = B_, T = T_, M = B * T, d = cfg_.d_model, out = cfg_.out_dim();
  double* loss = step_scalars();
  be_->layernorm_forward(xL, d, M, d, W.norm_w, W.norm_b, cfg_.norm_eps, a.h.data(), d, a.f_mean.data(),
                         a.f_rstd.data());
  float* dlogits = backward_ready_ ? a.dlogits.data() : nullptr;
  ops::SoftTargets soft;
  soft.smoothing = in.label_smoothing;
  if (in.mix_targets) {
    soft.second = a.mix_targets.data();
    soft.weight = a.mix_weights.data();
  }
  if (last_sparse_) {
    const int K = head_rows_;
    if (K == 0) return in.add_loss ? void() : be_->zero(loss, sizeof(double));
    be_->gather_rows(a.h.data(), a.rows.data(), K, d, a.h_sel.data());
    be_->linear_forward(a.h_sel.data(), K, d, W.head_w, W.head_b, out, a.logits.data());
    return be_->cross_entropy(a.logits.data(), K, out, a.targets.data(), dlogits, loss, in.mean_over, in.add_loss,
                              soft);
  }
  int rows = M;
  if (cfg_.per_token_output()) {
    be_->linear_forward(a.h.data(), M, d, W.head_w, W.head_b, out, a.logits.data());
  } else {
    // Mean over the real positions of each row, then the classifier.
    rows = B;
    be_->mean_pool_forward(a.h.data(), T, B, d, block_call(0).lengths, a.pooled.data());
    const ops::DropMask drop = head_mask(cfg_, last_dropout_, last_seed_, last_row_offset_);
    if (drop.active()) be_->dropout_apply(a.pooled.data(), drop, B, d, a.pooled.data());
    be_->linear_forward(a.pooled.data(), B, d, W.head_w, W.head_b, out, a.logits.data());
  }
  if (!in.targets) return in.add_loss ? void() : be_->zero(loss, sizeof(double));
  be_->cross_entropy(a.logits.data(), rows, out, a.targets.data(), dlogits, loss, in.mean_over, in.add_loss, soft);
}

// The head's and the final LayerNorm's backward: leaves dL/d(xL) in a.dx.
void Model::head_backward(const float* xL) {
  Arena& a = *arena_;
  const ParamViews& W = dw_;
  const int B = B_, T = T_, M = B * T, d = cfg_.d_model, out = cfg_.out_dim();
  be_->layernorm_apply(xL, d, M, d, W.norm_w, W.norm_b, a.f_mean.data(), a.f_rstd.data(), a.h.data(), d);
  if (last_sparse_) {
    // d(loss)/dh is zero at the rows the head did not read.
    const int K = head_rows_;
    float* dsel = a.dx.data();  // [K, d], dead until the final LayerNorm's backward
    if (K > 0)
      be_->linear_backward(a.dlogits.data(), a.h_sel.data(), K, d, W.head_w, out, dsel, false, dg_.head_w,
                           dg_.head_b);
    be_->scatter_rows(dsel, a.rows.data(), K, M, d, a.dh.data());
  } else if (cfg_.per_token_output()) {
    be_->linear_backward(a.dlogits.data(), a.h.data(), M, d, W.head_w, out, a.dh.data(), false, dg_.head_w,
                         dg_.head_b);
  } else {
    float* dpooled = a.dx.data();  // [B, d], dead until the final LayerNorm's backward
    be_->linear_backward(a.dlogits.data(), a.pooled.data(), B, d, W.head_w, out, dpooled, false, dg_.head_w,
                         dg_.head_b);
    const ops::DropMask drop = head_mask(cfg_, last_dropout_, last_seed_, last_row_offset_);
    if (drop.active()) be_->dropout_apply(dpooled, drop, B, d, dpooled);
    be_->mean_pool_backward(dpooled, T, B, d, block_call(0).lengths, a.dh.data());
  }
  be_->layernorm_backward(a.dh.data(), d, xL, d, a.f_mean.data(), a.f_rstd.data(), W.norm_w, M, d, a.dx.data(), d,
                          false, dg_.norm_w, dg_.norm_b);
}

void Model::backward() {
  require(arena_ != nullptr && backward_ready_,
          "Model::backward needs a forward with targets, made with gradients enabled (one backward per forward)");
  // The block's backward writes dU over the saved U and dF over F (block.cpp): what a
  // second backward would need is gone, so it needs a forward again.
  backward_ready_ = false;
  Arena& a = *arena_;
  const ParamViews& W = backend_views();
  device_grads(true);  // dg_ accumulates from here
  // The layout is [input layer][block 0]...[block L-1][final norm, head]; block l's
  // gradients start at its first tensor (its norm).
  auto start = [&](int l) {
    return size_t((l < cfg_.n_layers ? g_.blocks[size_t(l)].norm_w : g_.norm_w) - grads_.data());
  };
  auto ready = [&](size_t from, size_t to) {
    if (grad_ready_ && to > from) grad_ready_(from, to - from);
  };
  head_backward(a.stream(cfg_.n_layers, true, B_, T_));
  ready(start(cfg_.n_layers), grads_.size());
  const BlockScratch scratch = a.scratch();
  for (int l = cfg_.n_layers - 1; l >= 0; --l) {
    block_backward(*be_, cfg_, W.blocks[size_t(l)], dg_.blocks[size_t(l)], block_call(l), a.layer(l, true, B_, T_),
                   scratch, a.dx.data());
    ready(start(l), start(l + 1));
  }
  embed_backward(a.dx.data());
  ready(0, start(0));
}

}  // namespace gmlp
