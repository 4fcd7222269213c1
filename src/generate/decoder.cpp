// The cached decoder. prefill() is the training forward on one sequence, keeping each
// layer's normalised gate (and aMLP's q|k|v rows); step() does one token with plain
// loops, threaded only where a matrix is large enough to repay the fork/join.
#include "gmlp/decoder.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "gmlp/error.h"
#include "backend/backend.h"
#include "model/block.h"
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

// Y[r, :out] = W[out, in] X[r, :in] + b (+ Y when accumulate) for the R rows of X: each
// weight row is read once for every row of X. Each dot product is summed in the same
// order whatever R is, so a row's result does not depend on the rows beside it.
void gemv(const float* W, int out, int in, const float* X, int R, const float* b, float* Y, bool accumulate) {
#pragma omp parallel for schedule(static) if (int64_t(out) * in * R >= kParallelMacs)
  for (int o = 0; o < out; ++o) {
    const float* w = W + size_t(o) * in;
    for (int r = 0; r < R; ++r) {
      const float* x = X + size_t(r) * in;
      float acc = 0.f;
#pragma omp simd reduction(+ : acc)
      for (int i = 0; i < in; ++i) acc += w[i] * x[i];
      float& y = Y[size_t(r) * out + o];
      y = (accumulate ? y : 0.f) + b[o] + acc;
    }
  }
}

// F[c] = bias + sum_{j < rows} w[j] G[j, c] for c < cols: the cached gates (rows ldg
// apart) weighted by row i of W. One head's channel group is a column slice of G.
void mix_history(const float* G, int ldg, int rows, int cols, const float* w, float bias, float* F) {
#pragma omp parallel for schedule(static) if (int64_t(rows) * cols >= kParallelMacs)
  for (int c0 = 0; c0 < cols; c0 += 64) {
    const int c1 = std::min(cols, c0 + 64);
    for (int c = c0; c < c1; ++c) F[c] = bias;
    for (int j = 0; j < rows; ++j) {
      const float wj = w[j];
      const float* g = G + size_t(j) * ldg;
#pragma omp simd
      for (int c = c0; c < c1; ++c) F[c] += wj * g[c];
    }
  }
}

// aMLP at position i: appends this token's q|k|v row to the cache (qkv [n, 3 da]) and
// writes A = softmax(q K^T / sqrt(da)) V Wo^T + bo over the keys j <= i, as the
// training attention computes it.
void attention_step(const BlockParams& p, int d, int da, int dout, int i, const float* h, float* qkv,
                    float* P, float* O, float* A) {
  const int q3 = 3 * da;
  float* row = qkv + size_t(i) * q3;
  gemv(p.attn_qkv_w, q3, d, h, 1, p.attn_qkv_b, row, false);
  const float scale = 1.f / std::sqrt(float(da));
  float mx = -std::numeric_limits<float>::infinity();
  for (int j = 0; j <= i; ++j) {
    const float* k = qkv + size_t(j) * q3 + da;
    float acc = 0.f;
#pragma omp simd reduction(+ : acc)
    for (int c = 0; c < da; ++c) acc += row[c] * k[c];
    P[j] = scale * acc;
    mx = std::max(mx, P[j]);
  }
  double sum = 0.0;
  for (int j = 0; j <= i; ++j) {
    P[j] = std::exp(P[j] - mx);
    sum += P[j];
  }
  const float inv = float(1.0 / sum);
  std::fill(O, O + da, 0.f);
  for (int j = 0; j <= i; ++j) {
    const float pj = P[j] * inv;
    const float* v = qkv + size_t(j) * q3 + 2 * da;
#pragma omp simd
    for (int c = 0; c < da; ++c) O[c] += pj * v[c];
  }
  gemv(p.attn_out_w, dout, da, O, 1, p.attn_out_b, A, false);
}

}  // namespace

bool Decoder::supports(const ModelConfig& c) { return c.task == Task::causal_lm; }

Decoder::Decoder(const Model& model, int streams) : cfg_(model.config()), w_(model.views()), streams_(streams) {
  require(supports(cfg_), "the cached decoder needs a causal language model; this one is \"" + name_of(cfg_.task) + "\"");
  require(streams >= 1 && streams <= 4096, "a decoder holds 1 to 4096 streams, not " + std::to_string(streams));
  const size_t n = size_t(cfg_.seq_len), d = size_t(cfg_.d_model), f = size_t(cfg_.d_ffn),
               L = size_t(cfg_.n_layers), da = size_t(cfg_.d_attn), H = size_t(cfg_.sgu_heads),
               S = size_t(streams), rows = std::max(n, S);
  g_ = cfg_.gate_channels();
  s_ = cfg_.branch_channels();
  goff_ = cfg_.sgu == Sgu::split ? cfg_.d_ffn / 2 : 0;
  gh_ = g_ / cfg_.sgu_heads;
  const size_t g = size_t(g_), s = size_t(s_);
  if (cfg_.has_sgu()) {
    gates_.assign(L, std::vector<float>(S * n * g));
    F_.resize(rows * g);
    gstats_.resize(2 * n);
    if (cfg_.spatial == Spatial::toeplitz) Wd_.resize(H * n);  // step's rows; prefill grows it to its T
  }
  if (da > 0) {
    qkv_.assign(L, std::vector<float>(S * n * 3 * da));
    P_.resize(n * n);
    O_.resize(n * da);
    A_.resize(rows * g);
  }
  x_.resize(rows * d);
  h_.resize(rows * d);
  u_.resize(rows * f);
  z_.resize(rows * f);
  S_.resize(n * s);
  logits_.resize(S * size_t(cfg_.vocab_size));
  out_.resize(S * size_t(cfg_.vocab_size));
  len_.assign(S, 0);
  if (cfg_.pos_embedding == PosEmbedding::sinusoidal) {
    pe_.resize(n * d);
    ops::sinusoidal_positions(cfg_.seq_len, cfg_.d_model, pe_.data());
  }
}

void Decoder::reset() { std::fill(len_.begin(), len_.end(), 0); }

const float* Decoder::prefill(const int32_t* tokens, int T, int stream) {
  require(stream >= 0 && stream < streams_, "prefill: no stream " + std::to_string(stream));
  require(T >= 1 && T <= cfg_.seq_len, "prefill: " + std::to_string(T) + " tokens do not fit the window of " +
                                           std::to_string(cfg_.seq_len));
  const int n = cfg_.seq_len, d = cfg_.d_model, V = cfg_.vocab_size;
  for (int t = 0; t < T; ++t)
    require(tokens[t] >= 0 && tokens[t] < V, "prefill: token id " + std::to_string(tokens[t]) + " outside the vocabulary");
  const size_t st = size_t(stream);
  len_[st] = 0;
  float* x = x_.data();
  ops::embedding_forward(w_.embed, d, tokens, T, 1, pe_.empty() ? nullptr : pe_.data(), x);
  // Toeplitz weights are expanded for this prefill's T only, never for the whole window:
  // a model with a long window and a short prompt stays small.
  const size_t wd = cfg_.spatial == Spatial::toeplitz ? size_t(cfg_.sgu_heads) * T * T : 0;
  if (Wd_.size() < wd) Wd_.resize(wd);
  BlockCall call;
  call.T = T;
  call.B = 1;
  const BlockScratch scratch{h_.data(), z_.data(), S_.data(), A_.data(), Wd_.data()};
  for (int l = 0; l < cfg_.n_layers; ++l) {
    // The training block, in place on x, with the layer's caches as its gate and q|k|v
    // buffers: prefill leaves exactly the rows step() extends.
    BlockSaved saved;
    saved.x = x;
    saved.u = u_.data();
    saved.g_mean = gstats_.data();
    saved.g_rstd = gstats_.data() + n;
    saved.F = F_.data();
    if (cfg_.d_attn > 0) {
      saved.qkv = qkv_[size_t(l)].data() + st * n * 3 * cfg_.d_attn;
      saved.P = P_.data();
      saved.O = O_.data();
    }
    call.gate = cfg_.has_sgu() ? gates_[size_t(l)].data() + st * n * g_ : nullptr;
    block_forward(cpu_backend(), cfg_, w_.blocks[size_t(l)], call, saved, scratch, x);
  }
  len_[st] = T;
  const float* last = x + size_t(T - 1) * d;
  layernorm_row(last, d, w_.norm_w, w_.norm_b, cfg_.norm_eps, h_.data());
  float* row = logits_.data() + st * V;
  gemv(w_.head_w, V, d, h_.data(), 1, w_.head_b, row, false);
  return row;
}

const float* Decoder::step(int32_t token) {
  require(streams_ == 1, "step(token) is for a one-stream decoder; this one has " + std::to_string(streams_));
  const int zero = 0;
  return step(&token, &zero, 1);
}

const float* Decoder::step(const int32_t* tokens, const int* which, int R) {
  const int n = cfg_.seq_len, d = cfg_.d_model, f = cfg_.d_ffn, g = g_, gh = gh_, V = cfg_.vocab_size;
  require(R >= 1 && R <= streams_, "step: " + std::to_string(R) + " streams asked of " + std::to_string(streams_));
  for (int r = 0; r < R; ++r) {
    const int s = which[r];
    require(s >= 0 && s < streams_, "step: no stream " + std::to_string(s));
    require(len_[size_t(s)] < n, "step: the context of stream " + std::to_string(s) + " is full (" +
                                     std::to_string(n) + " tokens)");
    require(tokens[r] >= 0 && tokens[r] < V, "step: token id " + std::to_string(tokens[r]) + " outside the vocabulary");
    for (int q = 0; q < r; ++q) require(which[q] != s, "step: stream " + std::to_string(s) + " given twice");
  }
  const bool tanh_gelu = cfg_.gelu == Gelu::tanh, toeplitz = cfg_.spatial == Spatial::toeplitz;
  const Sgu kind = cfg_.sgu;
  const int heads = cfg_.sgu_heads;
  const int64_t wsz = cfg_.spatial_weight_size();
  // Row r of every scratch buffer is stream which[r] at its position len_[which[r]].
  float* x = x_.data();
  for (int r = 0; r < R; ++r) {
    const int i = len_[size_t(which[r])];
    const float* e = w_.embed + size_t(tokens[r]) * d;
    float* xr = x + size_t(r) * d;
    for (int c = 0; c < d; ++c) xr[c] = e[c] + (pe_.empty() ? 0.f : pe_[size_t(i) * d + c]);
  }
  float* h = h_.data();
  float* u = u_.data();
  float* z = z_.data();
  float* F = F_.data();
  for (int l = 0; l < cfg_.n_layers; ++l) {
    const BlockParams& p = w_.blocks[size_t(l)];
    for (int r = 0; r < R; ++r)
      layernorm_row(x + size_t(r) * d, d, p.norm_w, p.norm_b, cfg_.norm_eps, h + size_t(r) * d);
    gemv(p.proj_in_w, f, d, h, R, p.proj_in_b, u, false);
    const int64_t fr = int64_t(f) * R;
    if (tanh_gelu) {
#pragma omp simd
      for (int64_t c = 0; c < fr; ++c) z[c] = ops::fast::gelu_tanh(u[c]);
    } else {
#pragma omp simd
      for (int64_t c = 0; c < fr; ++c) z[c] = ops::fast::gelu_erf(u[c]);
    }
    if (!cfg_.has_sgu()) {
      gemv(p.proj_out_w, d, f, z, R, p.proj_out_b, x, true);
      continue;
    }
    for (int r = 0; r < R; ++r) {
      const size_t st = size_t(which[r]);
      const int i = len_[st];
      float* G = gates_[size_t(l)].data() + st * n * g;
      float* zr = z + size_t(r) * f;
      float* Fr = F + size_t(r) * g;
      layernorm_row(zr + goff_, g, p.sgu_norm_w, p.sgu_norm_b, cfg_.sgu_norm_eps, G + size_t(i) * g);
      // F = b_k[i] + G[0..i]^T W_k[i, 0..i] per head k: the only place the history enters.
      const int bi = std::min(i, n - 1);
      for (int k = 0; k < heads; ++k) {
        const float* wrow;
        if (toeplitz) {
          float* row = Wd_.data() + size_t(k) * n;
          ops::toeplitz_row(p.spatial_w + k * wsz, n, true, i, i + 1, row);
          wrow = row;
        } else {
          wrow = p.spatial_w + k * wsz + size_t(i) * n;
        }
        mix_history(G + k * gh, g, i + 1, gh, wrow, p.spatial_b[size_t(k) * n + bi], Fr + k * gh);
      }
      if (cfg_.d_attn > 0) {
        float* Ar = A_.data() + size_t(r) * g;
        attention_step(p, d, cfg_.d_attn, f / 2, i, h + size_t(r) * d,
                       qkv_[size_t(l)].data() + st * n * 3 * cfg_.d_attn, P_.data(), O_.data(), Ar);
        for (int c = 0; c < g; ++c) Fr[c] += Ar[size_t(c)];
      }
      ops::sgu_combine_row(kind, zr, Fr, Fr, g);  // split: Z1 = z[0, g)
    }
    gemv(p.proj_out_w, d, g, F, R, p.proj_out_b, x, true);
  }
  for (int r = 0; r < R; ++r) {
    ++len_[size_t(which[r])];
    layernorm_row(x + size_t(r) * d, d, w_.norm_w, w_.norm_b, cfg_.norm_eps, h + size_t(r) * d);
  }
  gemv(w_.head_w, V, d, h, R, w_.head_b, out_.data(), false);
  for (int r = 0; r < R; ++r)
    std::memcpy(logits_.data() + size_t(which[r]) * V, out_.data() + size_t(r) * V, sizeof(float) * size_t(V));
  return logits_.data();
}

}  // namespace gmlp
