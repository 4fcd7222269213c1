// Forward and backward of every gMLP model (docs/variants.md), composed from src/ops.
//
// Kept for the backward, per layer: the block input x (residual stream), its LayerNorm
// statistics, the pre-GELU projection u, the gate's LayerNorm statistics, the spatial
// output F (with aMLP's attention added) and, for aMLP, the attention's qkv, P and O.
// Everything else (LayerNorm outputs, GELU(u), the normalised gate, the gated product
// S) is recomputed from those in the backward: elementwise work that is cheap next to
// the GEMMs and saves several [T*B, d_ffn] buffers per layer. Scratch buffers whose
// lifetimes do not overlap are shared: the gate G lives in S's buffer and dZ is
// computed in place over Z. With gradients disabled only one layer's slots exist and
// every layer reuses them.
#include <algorithm>
#include <cstring>

#include "gmlp/error.h"
#include "gmlp/model.h"
#include "model/block_params.h"
#include "ops/ops.h"

namespace gmlp {

struct Model::Arena {
  int B = 0, T = 0, layers = 0;  // capacity
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
  if (cfg_.spatial == "toeplitz") a->Wd.resize(size_t(cfg_.sgu_heads) * T * T);
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
    if (cfg_.spatial == "toeplitz") a->dWd.resize(size_t(cfg_.sgu_heads) * T * T);
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

ops::SguParams sgu_params(const ModelConfig& c, const BlockParams& p, int T, float* Wd,
                                 const int32_t* lengths) {
  ops::SguParams sp;
  sp.kind = ops::sgu_kind(c.sgu);
  sp.norm_w = p.sgu_norm_w;
  sp.norm_b = p.sgu_norm_b;
  sp.bias = p.spatial_b;
  sp.n = c.seq_len;
  sp.heads = c.sgu_heads;
  sp.causal = c.causal();
  sp.lengths = lengths;
  sp.eps = c.sgu_norm_eps;
  if (c.spatial == "toeplitz") {
    const int64_t wsz = c.spatial_weight_size();
    for (int k = 0; k < c.sgu_heads; ++k)
      ops::toeplitz_materialize(p.spatial_w + k * wsz, c.seq_len, c.causal(), T, Wd + int64_t(k) * T * T);
    sp.W = Wd;
    sp.ldw = T;
    sp.w_head_stride = int64_t(T) * T;
  } else {
    sp.W = p.spatial_w;
    sp.ldw = c.seq_len;
    sp.w_head_stride = int64_t(c.seq_len) * c.seq_len;
  }
  return sp;
}

ops::AttnParams attn_params(const ModelConfig& c, const BlockParams& p, const int32_t* lengths) {
  return {p.attn_qkv_w, p.attn_qkv_b, p.attn_out_w, p.attn_out_b, c.d_model, c.d_attn, c.d_ffn / 2, c.causal(),
          lengths};
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
  const int slots = grad_enabled_ ? cfg_.n_layers : 1;
  ensure_arena(B, T, slots);
  Arena& a = *arena_;
  backward_ready_ = false;
  B_ = B;
  T_ = T;
  const int M = B * T, d = cfg_.d_model, f = cfg_.d_ffn, s = cfg_.branch_channels(), out = cfg_.out_dim();
  const bool tanh_gelu = cfg_.gelu == "tanh";

  const int32_t* lengths = nullptr;
  if (in.lengths) {
    for (int b = 0; b < B; ++b) {
      require(in.lengths[b] >= 1 && in.lengths[b] <= T, "forward: row " + std::to_string(b) + " has length " +
                                                            std::to_string(in.lengths[b]) + ", outside [1, " +
                                                            std::to_string(T) + "]");
      a.lengths[size_t(b)] = in.lengths[b];
    }
    lengths = a.lengths.data();
  }
  last_lengths_ = lengths != nullptr;
  last_keep_ = in.keep != nullptr;
  const float* keep = nullptr;
  if (in.keep) {
    std::copy(in.keep, in.keep + size_t(cfg_.n_layers) * B, a.keep.begin());
    keep = a.keep.data();
  }

  float* x = a.x.data();
  if (cfg_.token_input()) {
    const int V = cfg_.vocab_size;
    for (int t = 0; t < T; ++t)
      for (int b = 0; b < B; ++b) {
        const int32_t id = in.tokens[int64_t(b) * in.stride + t];
        require(id >= 0 && id < V, "forward: token id " + std::to_string(id) + " outside the vocabulary of " +
                                       std::to_string(V));
        a.tokens[size_t(t) * B + b] = id;
      }
    if (cfg_.pos_embedding == "sinusoidal" && pe_.size() < size_t(T) * d) {
      pe_.resize(size_t(std::max(T, cfg_.seq_len)) * d);
      ops::sinusoidal_positions(std::max(T, cfg_.seq_len), d, pe_.data());
    }
    ops::embedding_forward(w_.embed, d, a.tokens.data(), M, B, pe_.empty() ? nullptr : pe_.data(), x);
  } else {
    ops::extract_patches(in.images, B, cfg_.image_channels, cfg_.image_height, cfg_.image_width, cfg_.patch_height,
                         cfg_.patch_width, a.patches.data());
    ops::linear_forward(a.patches.data(), M, cfg_.patch_dim(), w_.patch_w, w_.patch_b, d, x);
  }

  for (int l = 0; l < cfg_.n_layers; ++l) {
    const BlockParams& p = w_.blocks[size_t(l)];
    const size_t k = grad_enabled_ ? size_t(l) : 0;  // the layer's slot
    const float* xl = x + (grad_enabled_ ? size_t(l) : size_t(l % 2)) * M * d;
    float* xn = x + (grad_enabled_ ? size_t(l + 1) : size_t((l + 1) % 2)) * M * d;
    float* u = a.u.data() + k * M * f;
    ops::layernorm_forward(xl, d, M, d, p.norm_w, p.norm_b, cfg_.norm_eps, a.h.data(), d,
                           a.ln_mean.data() + k * M, a.ln_rstd.data() + k * M);
    ops::gemm(false, true, M, f, d, 1.f, a.h.data(), d, p.proj_in_w, d, 0.f, u, f);
    ops::bias_gelu_forward(u, p.proj_in_b, M, f, a.z.data(), tanh_gelu);
    const float* branch = a.z.data();  // s(Z) = Z for "none"
    if (cfg_.has_sgu()) {
      const float* extra = nullptr;
      if (cfg_.d_attn > 0) {
        const size_t da = size_t(cfg_.d_attn);
        ops::tiny_attention_forward(attn_params(cfg_, p, lengths), a.h.data(), T, B, a.qkv.data() + k * M * 3 * da,
                                    a.P.data() + k * size_t(B) * T * T, a.O.data() + k * M * da, a.att.data());
        extra = a.att.data();
      }
      const auto sp = sgu_params(cfg_, p, T, a.Wd.data(), lengths);
      ops::sgu_forward(sp, a.z.data(), T, B, f, a.S.data(), a.g_mean.data() + k * M, a.g_rstd.data() + k * M,
                       a.F.data() + k * M * cfg_.gate_channels(), a.S.data(), extra);
      branch = a.S.data();
    }
    if (!keep) {
      // x' = x + S V^T + v: seed the output with residual + bias, then let the GEMM add.
#pragma omp parallel for schedule(static)
      for (int r = 0; r < M; ++r)
        for (int c = 0; c < d; ++c) xn[size_t(r) * d + c] = xl[size_t(r) * d + c] + p.proj_out_b[c];
      ops::gemm(false, true, M, d, s, 1.f, branch, s, p.proj_out_w, s, 1.f, xn, d);
    } else {
      // Stochastic depth: x' = x + keep[l, b] (S V^T + v), the branch built in h.
      ops::linear_forward(branch, M, s, p.proj_out_w, p.proj_out_b, d, a.h.data());
      const float* kl = keep + size_t(l) * B;
#pragma omp parallel for schedule(static)
      for (int r = 0; r < M; ++r)
        for (int c = 0; c < d; ++c) xn[size_t(r) * d + c] = xl[size_t(r) * d + c] + kl[r % B] * a.h[size_t(r) * d + c];
    }
  }
  const float* xL = x + (grad_enabled_ ? size_t(cfg_.n_layers) : size_t(cfg_.n_layers % 2)) * M * d;
  ops::layernorm_forward(xL, d, M, d, w_.norm_w, w_.norm_b, cfg_.norm_eps, a.h.data(), d, a.f_mean.data(),
                         a.f_rstd.data());
  backward_ready_ = grad_enabled_ && in.targets != nullptr;
  int rows = M;
  last_sparse_ = sparse_head_ && cfg_.task == "mlm" && in.targets != nullptr;
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
    return ops::cross_entropy(a.logits.data(), K, out, sel_targets_.data(),
                              backward_ready_ ? a.dlogits.data() : nullptr, nullptr);
  }
  if (cfg_.per_token_output()) {
    ops::linear_forward(a.h.data(), M, d, w_.head_w, w_.head_b, out, a.logits.data());
  } else {
    // Mean over the real positions of each row, then the classifier.
    rows = B;
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
  // When a backward can follow, the same pass writes d(loss)/d(logits): the softmax
  // is computed once per step instead of once for the loss and again for the gradient.
  return ops::cross_entropy(a.logits.data(), rows, out, a.targets.data(), backward_ready_ ? a.dlogits.data() : nullptr,
                            nullptr);
}

void Model::backward() {
  require(arena_ != nullptr && backward_ready_,
          "Model::backward needs a forward with targets, made with gradients enabled");
  Arena& a = *arena_;
  const int B = B_, T = T_, M = B * T, d = cfg_.d_model, f = cfg_.d_ffn, g = cfg_.gate_channels(),
            s = cfg_.branch_channels(), out = cfg_.out_dim(), da = cfg_.d_attn;
  const bool tanh_gelu = cfg_.gelu == "tanh";
  const float* x = a.x.data();
  // lengths/keep are only meaningful when the forward was given them; the arena copies
  // are reused, so remember through the forward's pointers instead.
  const int32_t* lengths = nullptr;
  const float* keep = nullptr;
  if (last_lengths_) lengths = a.lengths.data();
  if (last_keep_) keep = a.keep.data();

  const float* xL = x + size_t(cfg_.n_layers) * M * d;
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

  for (int l = cfg_.n_layers - 1; l >= 0; --l) {
    const BlockParams& p = w_.blocks[size_t(l)];
    BlockParams& gp = g_.blocks[size_t(l)];
    const float* xl = x + size_t(l) * M * d;
    const float* u = a.u.data() + size_t(l) * M * f;
    const float* F = cfg_.has_sgu() ? a.F.data() + size_t(l) * M * g : nullptr;
    const float* ln_mean = a.ln_mean.data() + size_t(l) * M;
    const float* ln_rstd = a.ln_rstd.data() + size_t(l) * M;
    // a.dx holds dL/d(block output); the residual passes it to the input unchanged,
    // and the branch's contribution is added by the block LayerNorm's backward below.
    const float* dY = a.dx.data();
    if (keep) {
      const float* kl = keep + size_t(l) * B;
#pragma omp parallel for schedule(static)
      for (int r = 0; r < M; ++r)
        for (int c = 0; c < d; ++c) a.dh[size_t(r) * d + c] = kl[r % B] * a.dx[size_t(r) * d + c];
      dY = a.dh.data();
    }
    ops::gelu_forward(u, a.z.data(), int64_t(M) * f, tanh_gelu);
    const float* branch = a.z.data();
    if (cfg_.has_sgu()) {
      // S from Z and F again (the forward did not keep it).
      ops::sgu_combine(ops::sgu_kind(cfg_.sgu), a.z.data(), f, F, M, g, a.S.data());
      branch = a.S.data();
    }
    ops::linear_backward(dY, branch, M, s, p.proj_out_w, d, a.dS.data(), false, gp.proj_out_w, gp.proj_out_b);
    if (cfg_.has_sgu()) {
      const bool toeplitz = cfg_.spatial == "toeplitz";
      const auto sp = sgu_params(cfg_, p, T, a.Wd.data(), lengths);
      if (toeplitz) std::fill(a.dWd.begin(), a.dWd.begin() + size_t(cfg_.sgu_heads) * T * T, 0.f);
      const ops::SguGrads sg{gp.sgu_norm_w, gp.sgu_norm_b, toeplitz ? a.dWd.data() : gp.spatial_w, gp.spatial_b};
      // In place: dZ over Z, G in S's buffer (S is dead once proj_out's backward ran).
      ops::sgu_backward(sp, sg, a.dS.data(), a.z.data(), T, B, f, a.g_mean.data() + size_t(l) * M,
                        a.g_rstd.data() + size_t(l) * M, F, a.z.data(), a.S.data(), a.dF.data(), a.dG.data());
      if (toeplitz)
        for (int k = 0; k < cfg_.sgu_heads; ++k)
          ops::toeplitz_fold(a.dWd.data() + size_t(k) * T * T, T, cfg_.seq_len, cfg_.causal(),
                             gp.spatial_w + k * cfg_.spatial_weight_size());
    } else {
      std::copy(a.dS.begin(), a.dS.begin() + size_t(M) * f, a.z.begin());
    }
    ops::gelu_backward(u, a.z.data(), a.z.data(), int64_t(M) * f, tanh_gelu);
    ops::layernorm_apply(xl, d, M, d, p.norm_w, p.norm_b, ln_mean, ln_rstd, a.h.data(), d);
    ops::linear_backward(a.z.data(), a.h.data(), M, d, p.proj_in_w, f, a.dh.data(), false, gp.proj_in_w,
                         gp.proj_in_b);
    if (da > 0) {
      const ops::AttnGrads ag{gp.attn_qkv_w, gp.attn_qkv_b, gp.attn_out_w, gp.attn_out_b};
      ops::tiny_attention_backward(attn_params(cfg_, p, lengths), ag, a.dF.data(), a.h.data(), T, B,
                                   a.qkv.data() + size_t(l) * M * 3 * da, a.P.data() + size_t(l) * B * T * T,
                                   a.O.data() + size_t(l) * M * da, a.dh.data(), a.dO.data(), a.dP.data(),
                                   a.dqkv.data());
    }
    ops::layernorm_backward(a.dh.data(), d, xl, d, ln_mean, ln_rstd, p.norm_w, M, d, a.dx.data(), d, true, gp.norm_w,
                            gp.norm_b);
  }
  if (cfg_.token_input())
    ops::embedding_backward(a.dx.data(), d, a.tokens.data(), M, g_.embed);
  else
    ops::linear_backward(a.dx.data(), a.patches.data(), M, cfg_.patch_dim(), w_.patch_w, d, nullptr, false,
                         g_.patch_w, g_.patch_b);
}

}  // namespace gmlp
