// The parameter layout: the tensor names of docs/checkpoint.md, in a fixed order, packed into one buffer.
#include <algorithm>
#include <cmath>

#include "gmlp/error.h"
#include "gmlp/model.h"
#include "ops/ops.h"

namespace gmlp {

std::vector<ParamInfo> param_layout(const ModelConfig& c) {
  std::vector<ParamInfo> out;
  size_t off = 0;
  auto add = [&](std::string name, std::vector<int64_t> shape) {
    size_t n = 1;
    for (int64_t s : shape) n *= size_t(s);
    // Decay matrices only: LayerNorm parameters and every bias (the SGU's too) are exempt.
    const bool is_weight = name.size() >= 6 && name.compare(name.size() - 6, 6, "weight") == 0;
    const bool decay = is_weight && name.find("norm") == std::string::npos;
    out.push_back({std::move(name), std::move(shape), off, n, decay});
    off += n;
  };
  const int64_t d = c.d_model, f = c.d_ffn, g = c.gate_channels(), s = c.branch_channels(), n = c.seq_len,
                H = c.sgu_heads, A = c.d_attn;
  // One head keeps the plain shapes of docs/checkpoint.md; several get a leading head axis.
  auto per_head = [&](std::vector<int64_t> shape) {
    if (H > 1) shape.insert(shape.begin(), H);
    return shape;
  };
  if (c.token_input()) {
    add("embed.weight", {c.vocab_size, d});
  } else {
    add("patch.weight", {d, c.patch_dim()});
    add("patch.bias", {d});
  }
  for (int i = 0; i < c.n_layers; ++i) {
    const std::string p = "blocks." + std::to_string(i) + ".";
    add(p + "norm.weight", {d});
    add(p + "norm.bias", {d});
    add(p + "proj_in.weight", {f, d});
    add(p + "proj_in.bias", {f});
    if (c.has_sgu()) {
      add(p + "sgu.norm.weight", {g});
      add(p + "sgu.norm.bias", {g});
      add(p + "sgu.spatial.weight", per_head(c.spatial == Spatial::full ? std::vector<int64_t>{n, n}
                                                                 : std::vector<int64_t>{c.spatial_weight_size()}));
      add(p + "sgu.spatial.bias", per_head({n}));
    }
    if (A > 0) {
      add(p + "attn.qkv.weight", {3 * A, d});
      add(p + "attn.qkv.bias", {3 * A});
      add(p + "attn.out.weight", {f / 2, A});
      add(p + "attn.out.bias", {f / 2});
    }
    add(p + "proj_out.weight", {d, s});
    add(p + "proj_out.bias", {d});
  }
  add("norm.weight", {d});
  add("norm.bias", {d});
  add("head.weight", {c.out_dim(), d});
  add("head.bias", {c.out_dim()});
  return out;
}

ParamViews param_views(const ModelConfig& c, float* base) {
  // Walks the same order as param_layout, so views and layout cannot disagree.
  const auto layout = param_layout(c);
  size_t k = 0;
  auto next = [&]() { return base + layout[k++].offset; };
  ParamViews v;
  if (c.token_input()) {
    v.embed = next();
  } else {
    v.patch_w = next();
    v.patch_b = next();
  }
  v.blocks.resize(size_t(c.n_layers));
  for (auto& b : v.blocks) {
    b = BlockParams{};
    b.norm_w = next();
    b.norm_b = next();
    b.proj_in_w = next();
    b.proj_in_b = next();
    if (c.has_sgu()) {
      b.sgu_norm_w = next();
      b.sgu_norm_b = next();
      b.spatial_w = next();
      b.spatial_b = next();
    }
    if (c.d_attn > 0) {
      b.attn_qkv_w = next();
      b.attn_qkv_b = next();
      b.attn_out_w = next();
      b.attn_out_b = next();
    }
    b.proj_out_w = next();
    b.proj_out_b = next();
  }
  v.norm_w = next();
  v.norm_b = next();
  v.head_w = next();
  v.head_b = next();
  return v;
}

float survival_probability(const ModelConfig& c, int l) {
  return 1.f - float(l + 1) / float(c.n_layers) * (1.f - c.survival_prob);
}

void draw_keep(const ModelConfig& c, int B, Rng& rng, float* keep) {
  for (int l = 0; l < c.n_layers; ++l) {
    const float p = survival_probability(c, l);
    for (int b = 0; b < B; ++b) keep[size_t(l) * B + b] = rng.uniform(0.f, 1.f) < p ? 1.f / p : 0.f;
  }
}

bool has_dropout(const ModelConfig& c) {
  return c.dropout > 0 || (c.head_dropout > 0 && !c.per_token_output());
}

void draw_dropout(const ModelConfig& c, Rng& rng, Batch& batch) {
  batch.dropout = has_dropout(c);
  batch.dropout_seed = batch.dropout ? rng.next_u64() : 0;
}

void Model::init(Rng& rng) {
  const int d = cfg_.d_model, f = cfg_.d_ffn, g = cfg_.gate_channels(), s = cfg_.branch_channels(),
            n = cfg_.seq_len, H = cfg_.sgu_heads, A = cfg_.d_attn, out = cfg_.out_dim();
  auto uniform = [&](float* p, size_t count, float bound) {
    for (size_t i = 0; i < count; ++i) p[i] = rng.uniform(-bound, bound);
  };
  // PyTorch's nn.Linear default: weight and bias both U(+-1/sqrt(fan_in)).
  auto linear = [&](float* w, float* b, int out_dim, int in_dim) {
    uniform(w, size_t(out_dim) * in_dim, 1.f / std::sqrt(float(in_dim)));
    uniform(b, size_t(out_dim), 1.f / std::sqrt(float(in_dim)));
  };
  auto fill = [](float* p, size_t count, float v) { std::fill(p, p + count, v); };
  weights();  // written through the host views: on a device model the host copy is now the newer
  if (cfg_.token_input())
    for (size_t i = 0; i < size_t(cfg_.vocab_size) * d; ++i) w_.embed[i] = rng.normal();
  else
    linear(w_.patch_w, w_.patch_b, d, cfg_.patch_dim());
  for (auto& b : w_.blocks) {
    fill(b.norm_w, d, 1.f);
    fill(b.norm_b, d, 0.f);
    linear(b.proj_in_w, b.proj_in_b, f, d);
    if (cfg_.has_sgu()) {
      fill(b.sgu_norm_w, g, 1.f);
      fill(b.sgu_norm_b, g, 0.f);
      uniform(b.spatial_w, size_t(H) * size_t(cfg_.spatial_weight_size()), cfg_.spatial_init);
      fill(b.spatial_b, size_t(H) * n, 1.f);
    }
    if (A > 0) {
      linear(b.attn_qkv_w, b.attn_qkv_b, 3 * A, d);
      linear(b.attn_out_w, b.attn_out_b, f / 2, A);
    }
    linear(b.proj_out_w, b.proj_out_b, d, s);
  }
  fill(w_.norm_w, d, 1.f);
  fill(w_.norm_b, d, 0.f);
  linear(w_.head_w, w_.head_b, out, d);
}

double forward_flops_per_token(const ModelConfig& c, int T) {
  const double d = c.d_model, f = c.d_ffn, g = c.gate_channels(), s = c.branch_channels(), A = c.d_attn;
  const double mix = c.has_sgu() ? (c.causal() ? (double(T) + 1.0) * g : 2.0 * T * g) : 0.0;
  const double attn = A > 0 ? 2.0 * d * 3 * A + 2.0 * A * (f / 2) + (c.causal() ? 2.0 : 4.0) * T * A : 0.0;
  const double per_layer = 2.0 * d * f + 2.0 * s * d + mix + attn;
  const double in = c.token_input() ? 0.0 : 2.0 * c.patch_dim() * d;
  const double head = c.per_token_output() ? 2.0 * d * c.out_dim() : 2.0 * d * c.out_dim() / T;
  return in + c.n_layers * per_layer + head;
}

std::vector<float> dense_spatial_weights(const Model& m, int layer, int head) {
  const ModelConfig& c = m.config();
  require(c.has_sgu(), "the model has no spatial weights ('sgu' is \"none\")");
  require(layer >= 0 && layer < c.n_layers, "no layer " + std::to_string(layer));
  require(head >= 0 && head < c.sgu_heads, "no head " + std::to_string(head));
  const int n = c.seq_len;
  const float* w = m.views().blocks[size_t(layer)].spatial_w + head * c.spatial_weight_size();
  std::vector<float> W(size_t(n) * n);
  if (c.spatial == Spatial::toeplitz)
    ops::toeplitz_materialize(w, n, c.causal(), n, W.data());
  else
    std::copy(w, w + W.size(), W.begin());
  if (c.causal())
    for (int i = 0; i < n; ++i) std::fill(W.begin() + size_t(i) * n + i + 1, W.begin() + size_t(i + 1) * n, 0.f);
  return W;
}

const ParamInfo& Model::param(const std::string& name) const {
  for (const auto& p : layout_)
    if (p.name == name) return p;
  throw Error("model has no parameter '" + name + "'");
}

}  // namespace gmlp
