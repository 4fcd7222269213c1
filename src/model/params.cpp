// The parameter layout: SPEC §6 names, in a fixed order, packed into one buffer.
#include <cmath>

#include "gmlp/error.h"
#include "gmlp/model.h"

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
  const int64_t d = c.d_model, f = c.d_ffn, h = c.d_ffn / 2, n = c.seq_len, V = c.vocab_size;
  add("embed.weight", {V, d});
  for (int i = 0; i < c.n_layers; ++i) {
    const std::string p = "blocks." + std::to_string(i) + ".";
    add(p + "norm.weight", {d});
    add(p + "norm.bias", {d});
    add(p + "proj_in.weight", {f, d});
    add(p + "proj_in.bias", {f});
    add(p + "sgu.norm.weight", {h});
    add(p + "sgu.norm.bias", {h});
    add(p + "sgu.spatial.weight", {n, n});
    add(p + "sgu.spatial.bias", {n});
    add(p + "proj_out.weight", {d, h});
    add(p + "proj_out.bias", {d});
  }
  add("norm.weight", {d});
  add("norm.bias", {d});
  add("head.weight", {V, d});
  add("head.bias", {V});
  return out;
}

ParamViews param_views(const ModelConfig& c, float* base) {
  // Walks the same order as param_layout; the sizes are recomputed there, so views and
  // layout cannot disagree as long as both follow one order.
  const auto layout = param_layout(c);
  size_t k = 0;
  auto next = [&]() { return base + layout[k++].offset; };
  ParamViews v;
  v.embed = next();
  v.blocks.resize(size_t(c.n_layers));
  for (auto& b : v.blocks) {
    b.norm_w = next();
    b.norm_b = next();
    b.proj_in_w = next();
    b.proj_in_b = next();
    b.sgu_norm_w = next();
    b.sgu_norm_b = next();
    b.spatial_w = next();
    b.spatial_b = next();
    b.proj_out_w = next();
    b.proj_out_b = next();
  }
  v.norm_w = next();
  v.norm_b = next();
  v.head_w = next();
  v.head_b = next();
  return v;
}

void Model::init(Rng& rng) {
  const int d = cfg_.d_model, f = cfg_.d_ffn, h = f / 2, n = cfg_.seq_len, V = cfg_.vocab_size;
  auto uniform = [&](float* p, size_t count, float bound) {
    for (size_t i = 0; i < count; ++i) p[i] = rng.uniform(-bound, bound);
  };
  auto fill = [](float* p, size_t count, float v) { std::fill(p, p + count, v); };
  for (size_t i = 0; i < size_t(V) * d; ++i) w_.embed[i] = rng.normal();
  for (auto& b : w_.blocks) {
    fill(b.norm_w, d, 1.f);
    fill(b.norm_b, d, 0.f);
    uniform(b.proj_in_w, size_t(f) * d, 1.f / std::sqrt(float(d)));
    uniform(b.proj_in_b, f, 1.f / std::sqrt(float(d)));
    fill(b.sgu_norm_w, h, 1.f);
    fill(b.sgu_norm_b, h, 0.f);
    uniform(b.spatial_w, size_t(n) * n, cfg_.spatial_init);
    fill(b.spatial_b, n, 1.f);
    uniform(b.proj_out_w, size_t(d) * h, 1.f / std::sqrt(float(h)));
    uniform(b.proj_out_b, d, 1.f / std::sqrt(float(h)));
  }
  fill(w_.norm_w, d, 1.f);
  fill(w_.norm_b, d, 0.f);
  uniform(w_.head_w, size_t(V) * d, 1.f / std::sqrt(float(d)));
  uniform(w_.head_b, V, 1.f / std::sqrt(float(d)));
}

double forward_flops_per_token(const ModelConfig& c, int T) {
  const double d = c.d_model, f = c.d_ffn, h = c.d_ffn / 2, V = c.vocab_size;
  const double per_layer = 2.0 * d * f + 2.0 * h * d + (double(T) + 1.0) * h;
  return c.n_layers * per_layer + 2.0 * d * V;
}

const ParamInfo& Model::param(const std::string& name) const {
  for (const auto& p : layout_)
    if (p.name == name) return p;
  throw Error("model has no parameter '" + name + "'");
}

}  // namespace gmlp
