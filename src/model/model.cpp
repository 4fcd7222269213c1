// Forward and backward of the causal gMLP LM, composed from src/ops.
//
// Kept for the backward, per layer: the block input x (residual stream), its LayerNorm
// statistics, the pre-GELU projection u, the gate's LayerNorm statistics and the
// spatial output F. Everything else (LayerNorm outputs, GELU(u), the normalised gate,
// the gated product S) is recomputed from those in the backward: elementwise work that
// is cheap next to the GEMMs and saves several [T*B, d_ffn] buffers per layer.
// Scratch buffers whose lifetimes do not overlap are shared: the gate G lives in S's
// buffer, dG in dS's, and dZ is computed in place over Z.
// With gradients disabled only one layer's slots exist and every layer reuses them.
#include <algorithm>
#include <cstring>

#include "gmlp/error.h"
#include "gmlp/model.h"
#include "ops/ops.h"

namespace gmlp {

struct Model::Arena {
  int B = 0, T = 0, layers = 0;  // capacity
  std::vector<int32_t> tokens, targets;                 // [M] sequence-major
  std::vector<float> x;                                 // (L+1) x [M, d] (2 without grad)
  std::vector<float> ln_mean, ln_rstd, g_mean, g_rstd;  // L x [M]
  std::vector<float> u;                                 // L x [M, d_ffn]
  std::vector<float> F;                                 // L x [M, dh]
  std::vector<float> f_mean, f_rstd;                    // [M] final norm
  std::vector<float> logits, dlogits;                   // [M, V]
  // Scratch reused by every layer.
  std::vector<float> h, dh, dx;                         // [M, d]
  std::vector<float> z;                                 // [M, d_ffn]: Z, then dZ in place
  std::vector<float> S, dS, dF;                         // [M, dh]: S doubles as G, dS as dG
};

Model::Model(const ModelConfig& config) : cfg_(config) {
  cfg_.validate();
  layout_ = param_layout(cfg_);
  const size_t total = layout_.back().offset + layout_.back().size;
  weights_.assign(total, 0.f);
  grads_.assign(total, 0.f);
  w_ = param_views(cfg_, weights_.data());
  g_ = param_views(cfg_, grads_.data());
  if (cfg_.pos_embedding == "sinusoidal") {
    pe_.resize(size_t(cfg_.seq_len) * cfg_.d_model);
    ops::sinusoidal_positions(cfg_.seq_len, cfg_.d_model, pe_.data());
  }
}

Model::~Model() = default;

void Model::zero_grad() { std::fill(grads_.begin(), grads_.end(), 0.f); }

void Model::ensure_arena(int B, int T, int layers) {
  if (arena_ && B * T <= arena_->B * arena_->T && layers <= arena_->layers) return;
  arena_.reset();  // free the old arena before allocating the new one
  const size_t M = size_t(B) * T, L = size_t(layers), d = cfg_.d_model, f = cfg_.d_ffn, h = f / 2,
               V = cfg_.vocab_size;
  auto a = std::make_unique<Arena>();
  a->B = B;
  a->T = T;
  a->layers = layers;
  a->tokens.resize(M);
  a->targets.resize(M);
  a->x.resize((L + 1) * M * d);  // one slot per layer input, plus the output
  for (auto* v : {&a->ln_mean, &a->ln_rstd, &a->g_mean, &a->g_rstd}) v->resize(L * M);
  a->u.resize(L * M * f);
  a->F.resize(L * M * h);
  a->f_mean.resize(M);
  a->f_rstd.resize(M);
  a->logits.resize(M * V);
  if (layers == cfg_.n_layers) a->dlogits.resize(M * V);
  a->h.resize(M * d);
  a->z.resize(M * f);
  a->S.resize(M * h);
  if (layers == cfg_.n_layers)
    for (auto* v : {&a->dh, &a->dx}) v->resize(M * d);
  if (layers == cfg_.n_layers)
    for (auto* v : {&a->dS, &a->dF}) v->resize(M * h);
  arena_ = std::move(a);
}

const float* Model::logits() const {
  require(arena_ != nullptr, "Model::logits called before forward");
  return arena_->logits.data();
}

double Model::forward(const int32_t* tokens, const int32_t* targets, int stride, int B, int T) {
  require(B > 0 && T > 0, "forward: empty batch");
  require(int64_t(B) * T <= (int64_t(1) << 31) / 8, "forward: batch x sequence = " + std::to_string(int64_t(B) * T) +
                                                        " tokens is more than one step can hold");
  require(T <= cfg_.seq_len, "forward: sequence of " + std::to_string(T) + " tokens is longer than the model's window n = " +
                                 std::to_string(cfg_.seq_len));
  // Without gradients one slot set serves every layer (x alternates between two).
  const int slots = grad_enabled_ ? cfg_.n_layers : 1;
  ensure_arena(B, T, slots);
  Arena& a = *arena_;
  backward_ready_ = false;
  B_ = B;
  T_ = T;
  const int M = B * T, d = cfg_.d_model, f = cfg_.d_ffn, h = f / 2, V = cfg_.vocab_size;
  for (int t = 0; t < T; ++t)
    for (int b = 0; b < B; ++b) {
      const int32_t id = tokens[int64_t(b) * stride + t];
      require(id >= 0 && id < V, "forward: token id " + std::to_string(id) + " outside the vocabulary of " +
                                     std::to_string(V));
      a.tokens[size_t(t) * B + b] = id;
      a.targets[size_t(t) * B + b] = targets ? targets[int64_t(b) * stride + t] : -1;
    }
  const bool tanh_gelu = cfg_.gelu == "tanh";

  float* x = a.x.data();
  ops::embedding_forward(w_.embed, d, a.tokens.data(), M, B, pe_.empty() ? nullptr : pe_.data(), x);
  for (int l = 0; l < cfg_.n_layers; ++l) {
    const BlockParams& p = w_.blocks[size_t(l)];
    const size_t k = grad_enabled_ ? size_t(l) : 0;  // the layer's slot
    const float* xl = x + (grad_enabled_ ? size_t(l) : size_t(l % 2)) * M * d;
    float* xn = x + (grad_enabled_ ? size_t(l + 1) : size_t((l + 1) % 2)) * M * d;
    float* u = a.u.data() + k * M * f;
    float* F = a.F.data() + k * M * h;
    ops::layernorm_forward(xl, d, M, d, p.norm_w, p.norm_b, cfg_.norm_eps, a.h.data(), d,
                           a.ln_mean.data() + k * M, a.ln_rstd.data() + k * M);
    ops::gemm(false, true, M, f, d, 1.f, a.h.data(), d, p.proj_in_w, d, 0.f, u, f);
    ops::bias_gelu_forward(u, p.proj_in_b, M, f, a.z.data(), tanh_gelu);
    const ops::SguParams sp{p.sgu_norm_w, p.sgu_norm_b, p.spatial_w, p.spatial_b, cfg_.seq_len, cfg_.norm_eps};
    ops::sgu_forward(sp, a.z.data(), T, B, h, a.S.data(), a.g_mean.data() + k * M, a.g_rstd.data() + k * M, F,
                     a.S.data());
    // x' = x + S V^T + v: seed the output with residual + bias, then let the GEMM add.
#pragma omp parallel for schedule(static)
    for (int r = 0; r < M; ++r)
      for (int c = 0; c < d; ++c) xn[size_t(r) * d + c] = xl[size_t(r) * d + c] + p.proj_out_b[c];
    ops::gemm(false, true, M, d, h, 1.f, a.S.data(), h, p.proj_out_w, h, 1.f, xn, d);
  }
  const float* xL = x + (grad_enabled_ ? size_t(cfg_.n_layers) : size_t(cfg_.n_layers % 2)) * M * d;
  ops::layernorm_forward(xL, d, M, d, w_.norm_w, w_.norm_b, cfg_.norm_eps, a.h.data(), d, a.f_mean.data(),
                         a.f_rstd.data());
  backward_ready_ = grad_enabled_ && targets != nullptr;
  ops::linear_forward(a.h.data(), M, d, w_.head_w, w_.head_b, V, a.logits.data());
  if (!targets) return 0.0;
  for (int r = 0; r < M; ++r)
    require(a.targets[size_t(r)] < V, "forward: target id " + std::to_string(a.targets[size_t(r)]) +
                                          " outside the vocabulary of " + std::to_string(V));
  // When a backward can follow, the same pass writes d(loss)/d(logits): the softmax
  // is computed once per step instead of once for the loss and again for the gradient.
  return ops::cross_entropy(a.logits.data(), M, V, a.targets.data(), backward_ready_ ? a.dlogits.data() : nullptr,
                            nullptr);
}

void Model::backward() {
  require(arena_ != nullptr && backward_ready_,
          "Model::backward needs a forward with targets, made with gradients enabled");
  Arena& a = *arena_;
  const int B = B_, T = T_, M = B * T, d = cfg_.d_model, f = cfg_.d_ffn, h = f / 2, V = cfg_.vocab_size;
  const bool tanh_gelu = cfg_.gelu == "tanh";
  const float* x = a.x.data();

  const float* xL = x + size_t(cfg_.n_layers) * M * d;
  ops::layernorm_apply(xL, d, M, d, w_.norm_w, w_.norm_b, a.f_mean.data(), a.f_rstd.data(), a.h.data(), d);
  ops::linear_backward(a.dlogits.data(), a.h.data(), M, d, w_.head_w, V, a.dh.data(), false, g_.head_w, g_.head_b);
  ops::layernorm_backward(a.dh.data(), d, xL, d, a.f_mean.data(), a.f_rstd.data(), w_.norm_w, M, d, a.dx.data(), d,
                          false, g_.norm_w, g_.norm_b);

  for (int l = cfg_.n_layers - 1; l >= 0; --l) {
    const BlockParams& p = w_.blocks[size_t(l)];
    BlockParams& gp = g_.blocks[size_t(l)];
    const float* xl = x + size_t(l) * M * d;
    const float* u = a.u.data() + size_t(l) * M * f;
    const float* F = a.F.data() + size_t(l) * M * h;
    const float* gmean = a.g_mean.data() + size_t(l) * M;
    const float* grstd = a.g_rstd.data() + size_t(l) * M;
    // a.dx holds dL/d(block output); the residual passes it to the input unchanged,
    // and the branch's contribution is added by the block LayerNorm's backward below.
    ops::gelu_forward(u, a.z.data(), int64_t(M) * f, tanh_gelu);
#pragma omp parallel for schedule(static)
    for (int r = 0; r < M; ++r)
      for (int c = 0; c < h; ++c) a.S[size_t(r) * h + c] = a.z[size_t(r) * f + c] * F[size_t(r) * h + c];
    ops::linear_backward(a.dx.data(), a.S.data(), M, h, p.proj_out_w, d, a.dS.data(), false, gp.proj_out_w,
                         gp.proj_out_b);
    const ops::SguParams sp{p.sgu_norm_w, p.sgu_norm_b, p.spatial_w, p.spatial_b, cfg_.seq_len, cfg_.norm_eps};
    const ops::SguGrads sg{gp.sgu_norm_w, gp.sgu_norm_b, gp.spatial_w, gp.spatial_b};
    // In place: dZ over Z, G in S's buffer, dG in dS's (see ops.h for why that is safe).
    ops::sgu_backward(sp, sg, a.dS.data(), a.z.data(), T, B, h, gmean, grstd, F, a.z.data(), a.S.data(),
                      a.dF.data(), a.dS.data());
    ops::gelu_backward(u, a.z.data(), a.z.data(), int64_t(M) * f, tanh_gelu);
    ops::layernorm_apply(xl, d, M, d, p.norm_w, p.norm_b, a.ln_mean.data() + size_t(l) * M,
                         a.ln_rstd.data() + size_t(l) * M, a.h.data(), d);
    ops::linear_backward(a.z.data(), a.h.data(), M, d, p.proj_in_w, f, a.dh.data(), false, gp.proj_in_w,
                         gp.proj_in_b);
    ops::layernorm_backward(a.dh.data(), d, xl, d, a.ln_mean.data() + size_t(l) * M,
                            a.ln_rstd.data() + size_t(l) * M, p.norm_w, M, d, a.dx.data(), d, true, gp.norm_w,
                            gp.norm_b);
  }
  ops::embedding_backward(a.dx.data(), d, a.tokens.data(), M, g_.embed);
}

}  // namespace gmlp
