// The cached decoder. prefill() is the training forward on one sequence, keeping each
// layer's normalised gate; step() does one token with plain loops, threaded only where
// a matrix is large enough to repay the fork/join.
#include "gmlp/decoder.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "gmlp/error.h"
#include "ops/fast_math.h"
#include "ops/ops.h"

namespace gmlp {
namespace {

void layernorm_row(const float* x, int C, const float* w, const float* b, float eps, float* y) {
  float s = 0.f;
  for (int c = 0; c < C; ++c) s += x[c];
  const float mu = s / float(C);
  float v = 0.f;
  for (int c = 0; c < C; ++c) v += (x[c] - mu) * (x[c] - mu);
  const float rs = 1.f / std::sqrt(v / float(C) + eps);
  for (int c = 0; c < C; ++c) y[c] = (x[c] - mu) * rs * w[c] + b[c];
}

// Below this many multiply-adds a product runs on one thread: waking the team costs
// more than it saves (with 2 threads, 17 small BLAS GEMVs per token took 0.8 ms against
// 0.06 ms on one thread).
constexpr int64_t kParallelMacs = int64_t(1) << 18;

// y[out] = W[out, in] x + b (+ y when accumulate).
void gemv(const float* W, int out, int in, const float* x, const float* b, float* y, bool accumulate) {
#pragma omp parallel for schedule(static) if (int64_t(out) * in >= kParallelMacs)
  for (int o = 0; o < out; ++o) {
    const float* w = W + size_t(o) * in;
    float acc = 0.f;
#pragma omp simd reduction(+ : acc)
    for (int i = 0; i < in; ++i) acc += w[i] * x[i];
    y[o] = (accumulate ? y[o] : 0.f) + b[o] + acc;
  }
}

// F[c] = bias + sum_{j < rows} w[j] G[j, c]: the cached gates weighted by row i of W.
void mix_history(const float* G, int rows, int cols, const float* w, float bias, float* F) {
#pragma omp parallel for schedule(static) if (int64_t(rows) * cols >= kParallelMacs)
  for (int c0 = 0; c0 < cols; c0 += 64) {
    const int c1 = std::min(cols, c0 + 64);
    for (int c = c0; c < c1; ++c) F[c] = bias;
    for (int j = 0; j < rows; ++j) {
      const float wj = w[j];
      const float* g = G + size_t(j) * cols;
#pragma omp simd
      for (int c = c0; c < c1; ++c) F[c] += wj * g[c];
    }
  }
}

}  // namespace

Decoder::Decoder(const Model& model)
    : model_(model), cfg_(model.config()), w_(param_views(cfg_, const_cast<float*>(model.weights()))) {
  const size_t n = size_t(cfg_.seq_len), d = size_t(cfg_.d_model), f = size_t(cfg_.d_ffn), h = f / 2;
  gates_.assign(size_t(cfg_.n_layers), std::vector<float>(n * h));
  x_.resize(n * d);
  h_.resize(n * d);
  u_.resize(n * f);
  z_.resize(n * f);
  F_.resize(n * h);
  S_.resize(n * h);
  logits_.resize(size_t(cfg_.vocab_size));
  gstats_.resize(2 * n);
  if (cfg_.pos_embedding == "sinusoidal") {
    pe_.resize(n * d);
    ops::sinusoidal_positions(cfg_.seq_len, cfg_.d_model, pe_.data());
  }
}

void Decoder::reset() { len_ = 0; }

const float* Decoder::prefill(const int32_t* tokens, int T) {
  require(T >= 1 && T <= cfg_.seq_len, "prefill: " + std::to_string(T) + " tokens do not fit the window of " +
                                           std::to_string(cfg_.seq_len));
  const int d = cfg_.d_model, f = cfg_.d_ffn, h = f / 2, V = cfg_.vocab_size;
  for (int t = 0; t < T; ++t)
    require(tokens[t] >= 0 && tokens[t] < V, "prefill: token id " + std::to_string(tokens[t]) + " outside the vocabulary");
  const bool tanh_gelu = cfg_.gelu == "tanh";
  float* x = x_.data();
  ops::embedding_forward(w_.embed, d, tokens, T, 1, pe_.empty() ? nullptr : pe_.data(), x);
  for (int l = 0; l < cfg_.n_layers; ++l) {
    const BlockParams& p = w_.blocks[size_t(l)];
    float* G = gates_[size_t(l)].data();
    ops::layernorm_forward(x, d, T, d, p.norm_w, p.norm_b, cfg_.norm_eps, h_.data(), d, nullptr, nullptr);
    ops::linear_forward(h_.data(), T, d, p.proj_in_w, p.proj_in_b, f, u_.data());
    ops::gelu_forward(u_.data(), z_.data(), int64_t(T) * f, tanh_gelu);
    // The training SGU, with the layer's gate cache as its gate buffer: prefill leaves
    // exactly the rows step() extends.
    const ops::SguParams sp{p.sgu_norm_w, p.sgu_norm_b, p.spatial_w, p.spatial_b, cfg_.seq_len, cfg_.norm_eps};
    ops::sgu_forward(sp, z_.data(), T, 1, h, S_.data(), gstats_.data(), gstats_.data() + cfg_.seq_len, F_.data(), G);
    for (int t = 0; t < T; ++t)
      for (int c = 0; c < d; ++c) x[size_t(t) * d + c] += p.proj_out_b[c];
    ops::gemm(false, true, T, d, h, 1.f, S_.data(), h, p.proj_out_w, h, 1.f, x, d);
  }
  len_ = T;
  const float* last = x + size_t(T - 1) * d;
  layernorm_row(last, d, w_.norm_w, w_.norm_b, cfg_.norm_eps, h_.data());
  gemv(w_.head_w, V, d, h_.data(), w_.head_b, logits_.data(), false);
  return logits_.data();
}

const float* Decoder::step(int32_t token) {
  require(len_ < cfg_.seq_len, "step: the context is full (" + std::to_string(cfg_.seq_len) + " tokens)");
  const int d = cfg_.d_model, f = cfg_.d_ffn, h = f / 2, V = cfg_.vocab_size, i = len_;
  require(token >= 0 && token < V, "step: token id " + std::to_string(token) + " outside the vocabulary");
  const bool tanh_gelu = cfg_.gelu == "tanh";
  float* x = x_.data();
  const float* e = w_.embed + size_t(token) * d;
  for (int c = 0; c < d; ++c) x[c] = e[c] + (pe_.empty() ? 0.f : pe_[size_t(i) * d + c]);
  float* u = u_.data();
  float* z = z_.data();
  float* F = F_.data();
  for (int l = 0; l < cfg_.n_layers; ++l) {
    const BlockParams& p = w_.blocks[size_t(l)];
    float* G = gates_[size_t(l)].data();
    layernorm_row(x, d, p.norm_w, p.norm_b, cfg_.norm_eps, h_.data());
    gemv(p.proj_in_w, f, d, h_.data(), p.proj_in_b, u, false);
    if (tanh_gelu) {
#pragma omp simd
      for (int c = 0; c < f; ++c) z[c] = ops::fast::gelu_tanh(u[c]);
    } else {
#pragma omp simd
      for (int c = 0; c < f; ++c) z[c] = ops::fast::gelu_erf(u[c]);
    }
    layernorm_row(z + h, h, p.sgu_norm_w, p.sgu_norm_b, cfg_.norm_eps, G + size_t(i) * h);
    // F = b_i + G[0..i]^T W[i, 0..i]: the only place the history enters.
    mix_history(G, i + 1, h, p.spatial_w + size_t(i) * cfg_.seq_len, p.spatial_b[i], F);
    for (int c = 0; c < h; ++c) F[c] *= z[c];
    gemv(p.proj_out_w, d, h, F, p.proj_out_b, x, true);
  }
  ++len_;
  layernorm_row(x, d, w_.norm_w, w_.norm_b, cfg_.norm_eps, h_.data());
  gemv(w_.head_w, V, d, h_.data(), w_.head_b, logits_.data(), false);
  return logits_.data();
}

}  // namespace gmlp
