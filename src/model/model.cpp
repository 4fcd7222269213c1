// The gMLP model of every task (docs/variants.md): the task's input (token or patch
// embeddings), L blocks (src/model/block.cpp) and the task's head and loss, over one
// parameter buffer and one activation arena.
//
// The arena holds, per layer, what block.h's BlockSaved lists, plus scratch that every
// layer shares. With gradients disabled only one layer's slots exist and every layer
// reuses them.
#include <algorithm>

#include "gmlp/error.h"
#include "gmlp/model.h"
#include "model/block.h"
#include "ops/ops.h"

namespace gmlp {

struct Model::Arena {
  int B = 0, T = 0, layers = 0;  // capacity
  size_t d = 0, f = 0, g = 0, da = 0;
  // The slots of a forward of B x T: layer l's saved tensors, and the residual stream
  // entering layer l (l = L: the blocks' output).
  BlockSaved layer(int l, bool grad, int B, int T);
  float* stream(int l, bool grad, int B, int T);
  BlockScratch scratch();
  std::vector<int32_t> tokens, targets, lengths;        // [M] (or [B]) sequence-major
  std::vector<float> keep;                              // [L, B]
  std::vector<float> patches;                           // vision: [M, C*ph*pw]
  std::vector<float> x;                                 // (L+1) x [M, d] (2 without grad)
  std::vector<float> ln_mean, ln_rstd, g_mean, g_rstd;  // L x [M]
  std::vector<float> u;                                 // L x [M, d_ffn]
  std::vector<float> F;                                 // L x [M, g]
  std::vector<float> qkv, P, O;                         // aMLP: L x [M, 3da], [B, T, T], [M, da]
  std::vector<float> f_mean, f_rstd;                    // [M] final norm
  std::vector<float> pooled;                            // [B, d] classify/vision
  std::vector<float> logits, dlogits;                   // [M or B, out]
  // Scratch reused by every layer.
  std::vector<float> h, dh, dx;                         // [M, d]
  std::vector<float> z;                                 // [M, d_ffn]: Z, then dZ in place
  std::vector<float> S, dS;                             // [M, s]: S doubles as G
  std::vector<float> dF, dG, att;                       // [M, g]; att: the attention's output
  std::vector<float> dO, dP, dqkv;                      // aMLP backward
  std::vector<float> Wd, dWd;                           // Toeplitz: dense [heads, T, T]
};

Model::Model(const ModelConfig& config) : cfg_(config) {
  cfg_.validate();
  layout_ = param_layout(cfg_);
  const size_t total = layout_.back().offset + layout_.back().size;
  weights_.assign(total, 0.f);
  grads_.assign(total, 0.f);
  w_ = param_views(cfg_, weights_.data());
  g_ = param_views(cfg_, grads_.data());
}

Model::~Model() = default;

void Model::zero_grad() { std::fill(grads_.begin(), grads_.end(), 0.f); }

void Model::ensure_arena(int B, int T, int layers) {
  if (arena_ && B * T <= arena_->B * arena_->T && B <= arena_->B && T <= arena_->T && layers <= arena_->layers)
    return;
  arena_.reset();  // free the old arena before allocating the new one
  const size_t M = size_t(B) * T, L = size_t(layers), d = cfg_.d_model, f = cfg_.d_ffn,
               g = cfg_.gate_channels(), s = cfg_.branch_channels(), da = cfg_.d_attn, out = cfg_.out_dim();
  const bool grad = layers == cfg_.n_layers;
  auto a = std::make_unique<Arena>();
  a->B = B;
  a->T = T;
  a->layers = layers;
  a->d = d;
  a->f = f;
  a->g = g;
  a->da = da;
  a->tokens.resize(M);
  a->targets.resize(M);
  a->lengths.resize(size_t(B));
  a->keep.resize(size_t(cfg_.n_layers) * B);
  if (!cfg_.token_input()) a->patches.resize(M * size_t(cfg_.patch_dim()));
  a->x.resize((grad ? L + 1 : 2) * M * d);  // one slot per layer input, plus the output
  for (auto* v : {&a->ln_mean, &a->ln_rstd}) v->resize(L * M);
  a->u.resize(L * M * f);
  if (cfg_.has_sgu()) {
    for (auto* v : {&a->g_mean, &a->g_rstd}) v->resize(L * M);
    a->F.resize(L * M * g);
  }
  if (da > 0) {
    a->qkv.resize(L * M * 3 * da);
    a->P.resize(L * size_t(B) * T * T);
    a->O.resize(L * M * da);
    a->att.resize(M * g);
  }
  a->f_mean.resize(M);
  a->f_rstd.resize(M);
  const size_t rows_out = cfg_.per_token_output() ? M : size_t(B);
  a->logits.resize(rows_out * out);
  if (!cfg_.per_token_output()) a->pooled.resize(size_t(B) * d);
  a->h.resize(M * d);
  a->z.resize(M * f);
  a->S.resize(M * s);
  if (cfg_.spatial == Spatial::toeplitz) a->Wd.resize(size_t(cfg_.sgu_heads) * T * T);
  if (grad) {
    a->dlogits.resize(rows_out * out);
    for (auto* v : {&a->dh, &a->dx}) v->resize(M * d);
    a->dS.resize(M * s);
    if (cfg_.has_sgu())
      for (auto* v : {&a->dF, &a->dG}) v->resize(M * g);
    if (da > 0) {
      a->dO.resize(M * da);
      a->dP.resize(size_t(T) * T);
      a->dqkv.resize(M * 3 * da);
    }
    if (cfg_.spatial == Spatial::toeplitz) a->dWd.resize(size_t(cfg_.sgu_heads) * T * T);
  }
  arena_ = std::move(a);
}

const float* Model::logits() const {
  require(arena_ != nullptr, "Model::logits called before forward");
  return arena_->logits.data();
}

int Model::logit_rows() const {
  if (last_sparse_) return int(head_rows_.size());
  return cfg_.per_token_output() ? B_ * T_ : B_;
}

// The arena's slot policy: with gradients every layer keeps its own tensors; without,
// every layer reuses slot 0 and the residual stream alternates between two rows.
BlockSaved Model::Arena::layer(int l, bool grad, int B, int T) {
  const size_t M = size_t(B) * T, k = grad ? size_t(l) : 0;
  auto at = [](std::vector<float>& v, size_t off) { return v.empty() ? nullptr : v.data() + off; };
  BlockSaved s;
  s.x = stream(l, grad, B, T);
  s.ln_mean = at(ln_mean, k * M);
  s.ln_rstd = at(ln_rstd, k * M);
  s.u = at(u, k * M * f);
  s.g_mean = at(g_mean, k * M);
  s.g_rstd = at(g_rstd, k * M);
  s.F = at(F, k * M * g);
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
  auto at = [](std::vector<float>& v) { return v.empty() ? nullptr : v.data(); };
  return {at(h), at(z), at(S), at(att), at(Wd), at(dh), at(dS), at(dF), at(dG), at(dO), at(dP), at(dqkv), at(dWd)};
}

double Model::forward(const Batch& in) {
  const int B = in.B, T = in.T;
  require(B > 0 && T > 0, "forward: empty batch");
  require(int64_t(B) * T <= (int64_t(1) << 31) / 8, "forward: batch x sequence = " + std::to_string(int64_t(B) * T) +
                                                        " tokens is more than one step can hold");
  if (cfg_.token_input()) {
    require(in.tokens != nullptr, "forward: a token model needs tokens");
    require(T <= cfg_.seq_len || cfg_.any_length(),
            "forward: sequence of " + std::to_string(T) + " tokens is longer than the model's window n = " +
                std::to_string(cfg_.seq_len));
  } else {
    require(in.images != nullptr, "forward: a vision model needs images");
    require(T == cfg_.seq_len, "forward: a vision batch has T = " + std::to_string(cfg_.seq_len) + " patches, got " +
                                   std::to_string(T));
  }
  require(in.lengths == nullptr || (!cfg_.causal() && cfg_.token_input()),
          "forward: padding lengths are for bidirectional token models (mlm, classify)");
  ensure_arena(B, T, grad_enabled_ ? cfg_.n_layers : 1);
  Arena& a = *arena_;
  backward_ready_ = false;
  B_ = B;
  T_ = T;

  last_lengths_ = in.lengths != nullptr;
  if (in.lengths) {
    for (int b = 0; b < B; ++b) {
      require(in.lengths[b] >= 1 && in.lengths[b] <= T, "forward: row " + std::to_string(b) + " has length " +
                                                            std::to_string(in.lengths[b]) + ", outside [1, " +
                                                            std::to_string(T) + "]");
      a.lengths[size_t(b)] = in.lengths[b];
    }
  }
  last_keep_ = in.keep != nullptr;
  if (in.keep) std::copy(in.keep, in.keep + size_t(cfg_.n_layers) * B, a.keep.begin());

  embed_forward(in, a.stream(0, grad_enabled_, B, T));
  const BlockScratch scratch = a.scratch();
  for (int l = 0; l < cfg_.n_layers; ++l)
    block_forward(cfg_, w_.blocks[size_t(l)], block_call(l), a.layer(l, grad_enabled_, B, T), scratch,
                  a.stream(l + 1, grad_enabled_, B, T));
  backward_ready_ = grad_enabled_ && in.targets != nullptr;
  return head_forward(in, a.stream(cfg_.n_layers, grad_enabled_, B, T));
}

BlockCall Model::block_call(int l) const {
  BlockCall call;
  call.T = T_;
  call.B = B_;
  // The arena's copies stay from earlier calls; only this forward's inputs count.
  call.lengths = last_lengths_ ? arena_->lengths.data() : nullptr;
  call.keep = last_keep_ ? arena_->keep.data() + size_t(l) * B_ : nullptr;
  return call;
}

// Token ids (checked against the vocabulary) to embeddings, with positions when
// configured; or images to patch embeddings. x: [M, d], sequence-major.
void Model::embed_forward(const Batch& in, float* x) {
  Arena& a = *arena_;
  const int B = in.B, T = in.T, M = B * T, d = cfg_.d_model;
  if (cfg_.token_input()) {
    const int V = cfg_.vocab_size;
    for (int t = 0; t < T; ++t)
      for (int b = 0; b < B; ++b) {
        const int32_t id = in.tokens[int64_t(b) * in.stride + t];
        require(id >= 0 && id < V, "forward: token id " + std::to_string(id) + " outside the vocabulary of " +
                                       std::to_string(V));
        a.tokens[size_t(t) * B + b] = id;
      }
    if (cfg_.pos_embedding == PosEmbedding::sinusoidal && pe_.size() < size_t(T) * d) {
      pe_.resize(size_t(std::max(T, cfg_.seq_len)) * d);
      ops::sinusoidal_positions(std::max(T, cfg_.seq_len), d, pe_.data());
    }
    ops::embedding_forward(w_.embed, d, a.tokens.data(), M, B, pe_.empty() ? nullptr : pe_.data(), x);
  } else {
    ops::extract_patches(in.images, B, cfg_.image_channels, cfg_.image_height, cfg_.image_width, cfg_.patch_height,
                         cfg_.patch_width, a.patches.data());
    ops::linear_forward(a.patches.data(), M, cfg_.patch_dim(), w_.patch_w, w_.patch_b, d, x);
  }
}

void Model::embed_backward(const float* dx) {
  Arena& a = *arena_;
  const int M = B_ * T_, d = cfg_.d_model;
  if (cfg_.token_input())
    ops::embedding_backward(dx, d, a.tokens.data(), M, g_.embed);
  else
    ops::linear_backward(dx, a.patches.data(), M, cfg_.patch_dim(), w_.patch_w, d, nullptr, false, g_.patch_w,
                         g_.patch_b);
}

// The final LayerNorm of xL [M, d] into h, then the task's head and, with targets, the
// loss. When a backward can follow, the same pass writes d(loss)/d(logits): the softmax
// is computed once per step instead of once for the loss and again for the gradient.
double Model::head_forward(const Batch& in, const float* xL) {
  Arena& a = *arena_;
  const int B = B_, T = T_, M = B * T, d = cfg_.d_model, out = cfg_.out_dim();
  ops::layernorm_forward(xL, d, M, d, w_.norm_w, w_.norm_b, cfg_.norm_eps, a.h.data(), d, a.f_mean.data(),
                         a.f_rstd.data());
  float* dlogits = backward_ready_ ? a.dlogits.data() : nullptr;
  last_sparse_ = sparse_head_ && cfg_.task == Task::mlm && in.targets != nullptr;
  if (last_sparse_) {
    // Only the chosen positions have targets: the head (V columns per row, the largest
    // product of a big-vocabulary masked LM) runs on those rows alone.
    head_rows_.clear();
    sel_targets_.clear();
    for (int t = 0; t < T; ++t)
      for (int b = 0; b < B; ++b) {
        const int32_t y = in.targets[int64_t(b) * in.stride + t];
        if (y < 0) continue;
        require(y < out, "forward: target " + std::to_string(y) + " outside the " + std::to_string(out) + " tokens");
        head_rows_.push_back(t * B + b);
        sel_targets_.push_back(y);
      }
    const int K = int(head_rows_.size());
    h_sel_.resize(size_t(K) * d);
    for (int k = 0; k < K; ++k)
      std::copy(a.h.begin() + size_t(head_rows_[size_t(k)]) * d, a.h.begin() + size_t(head_rows_[size_t(k)] + 1) * d,
                h_sel_.begin() + size_t(k) * d);
    if (K == 0) return 0.0;
    ops::linear_forward(h_sel_.data(), K, d, w_.head_w, w_.head_b, out, a.logits.data());
    return ops::cross_entropy(a.logits.data(), K, out, sel_targets_.data(), dlogits, nullptr);
  }
  int rows = M;
  if (cfg_.per_token_output()) {
    ops::linear_forward(a.h.data(), M, d, w_.head_w, w_.head_b, out, a.logits.data());
  } else {
    // Mean over the real positions of each row, then the classifier.
    rows = B;
    const int32_t* lengths = block_call(0).lengths;
    std::fill(a.pooled.begin(), a.pooled.begin() + size_t(B) * d, 0.f);
    for (int b = 0; b < B; ++b) {
      const int len = lengths ? lengths[b] : T;
      float* pb = a.pooled.data() + size_t(b) * d;
      for (int t = 0; t < len; ++t) {
        const float* hr = a.h.data() + (size_t(t) * B + b) * d;
        for (int c = 0; c < d; ++c) pb[c] += hr[c];
      }
      for (int c = 0; c < d; ++c) pb[c] /= float(len);
    }
    ops::linear_forward(a.pooled.data(), B, d, w_.head_w, w_.head_b, out, a.logits.data());
  }
  if (!in.targets) return 0.0;
  if (cfg_.per_token_output()) {
    for (int t = 0; t < T; ++t)
      for (int b = 0; b < B; ++b) a.targets[size_t(t) * B + b] = in.targets[int64_t(b) * in.stride + t];
  } else {
    std::copy(in.targets, in.targets + B, a.targets.begin());
  }
  for (int r = 0; r < rows; ++r)
    require(a.targets[size_t(r)] < out, "forward: target " + std::to_string(a.targets[size_t(r)]) + " outside the " +
                                            std::to_string(out) + (cfg_.per_token_output() ? " tokens" : " classes"));
  return ops::cross_entropy(a.logits.data(), rows, out, a.targets.data(), dlogits, nullptr);
}

// The head's and the final LayerNorm's backward: leaves dL/d(xL) in a.dx.
void Model::head_backward(const float* xL) {
  Arena& a = *arena_;
  const int B = B_, T = T_, M = B * T, d = cfg_.d_model, out = cfg_.out_dim();
  ops::layernorm_apply(xL, d, M, d, w_.norm_w, w_.norm_b, a.f_mean.data(), a.f_rstd.data(), a.h.data(), d);
  if (last_sparse_) {
    // d(loss)/dh is zero at the rows the head did not read.
    const int K = int(head_rows_.size());
    std::fill(a.dh.begin(), a.dh.begin() + size_t(M) * d, 0.f);
    float* dsel = a.dx.data();  // [K, d], dead until the final LayerNorm's backward
    if (K > 0)
      ops::linear_backward(a.dlogits.data(), h_sel_.data(), K, d, w_.head_w, out, dsel, false, g_.head_w, g_.head_b);
    for (int k = 0; k < K; ++k)
      std::copy(dsel + size_t(k) * d, dsel + size_t(k + 1) * d, a.dh.begin() + size_t(head_rows_[size_t(k)]) * d);
  } else if (cfg_.per_token_output()) {
    ops::linear_backward(a.dlogits.data(), a.h.data(), M, d, w_.head_w, out, a.dh.data(), false, g_.head_w,
                         g_.head_b);
  } else {
    float* dpooled = a.dx.data();  // [B, d], dead until the final LayerNorm's backward
    ops::linear_backward(a.dlogits.data(), a.pooled.data(), B, d, w_.head_w, out, dpooled, false, g_.head_w,
                         g_.head_b);
    const int32_t* lengths = block_call(0).lengths;
#pragma omp parallel for schedule(static)
    for (int t = 0; t < T; ++t)
      for (int b = 0; b < B; ++b) {
        const int len = lengths ? lengths[b] : T;
        float* dr = a.dh.data() + (size_t(t) * B + b) * d;
        for (int c = 0; c < d; ++c) dr[c] = t < len ? dpooled[size_t(b) * d + c] / float(len) : 0.f;
      }
  }
  ops::layernorm_backward(a.dh.data(), d, xL, d, a.f_mean.data(), a.f_rstd.data(), w_.norm_w, M, d, a.dx.data(), d,
                          false, g_.norm_w, g_.norm_b);
}

void Model::backward() {
  require(arena_ != nullptr && backward_ready_,
          "Model::backward needs a forward with targets, made with gradients enabled");
  Arena& a = *arena_;
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
    block_backward(cfg_, w_.blocks[size_t(l)], g_.blocks[size_t(l)], block_call(l), a.layer(l, true, B_, T_),
                   scratch, a.dx.data());
    ready(start(l), start(l + 1));
  }
  embed_backward(a.dx.data());
  ready(0, start(0));
}

}  // namespace gmlp
