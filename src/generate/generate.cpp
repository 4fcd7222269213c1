#include <algorithm>
#include <cmath>
#include <numeric>
#include <optional>

#include "gmlp/decoder.h"
#include "gmlp/error.h"
#include "gmlp/generate.h"

namespace gmlp {

void SamplingOptions::validate() const {
  require(std::isfinite(temperature) && temperature >= 0,
          "temperature must be >= 0 (0 = greedy), got " + std::to_string(temperature));
  require(top_k >= 0, "top-k must be >= 0 (0 = off), got " + std::to_string(top_k));
  require(top_p > 0 && top_p <= 1, "top-p must be in (0, 1], got " + std::to_string(top_p));
}

int32_t sample_token(const float* logits, int V, const SamplingOptions& opt, Rng& rng) {
  if (opt.temperature == 0.f) return int32_t(std::max_element(logits, logits + V) - logits);
  // Candidates sorted by logit, best first; top-k and top-p both cut a prefix of this order.
  std::vector<int32_t> idx(size_t(V), 0);
  std::iota(idx.begin(), idx.end(), 0);
  std::stable_sort(idx.begin(), idx.end(), [&](int32_t a, int32_t b) { return logits[a] > logits[b]; });
  size_t keep = (opt.top_k > 0 && opt.top_k < V) ? size_t(opt.top_k) : size_t(V);
  std::vector<double> p(keep);
  const double mx = logits[idx[0]];
  double total = 0.0;
  for (size_t i = 0; i < keep; ++i) total += p[i] = std::exp((double(logits[idx[i]]) - mx) / opt.temperature);
  if (opt.top_p < 1.f) {
    double cum = 0.0;
    size_t cut = keep;
    for (size_t i = 0; i < keep; ++i) {
      cum += p[i] / total;
      if (cum >= opt.top_p) {
        cut = i + 1;
        break;
      }
    }
    keep = cut;
    total = std::accumulate(p.begin(), p.begin() + long(keep), 0.0);
  }
  double r = double(rng.uniform()) * total;
  for (size_t i = 0; i < keep; ++i) {
    r -= p[i];
    if (r < 0) return idx[i];
  }
  return idx[keep - 1];
}

std::vector<int32_t> generate(Model& model, const std::vector<int32_t>& prompt, int max_new,
                              const SamplingOptions& opt, Rng& rng, const std::function<bool(int32_t)>& on_token,
                              bool use_cache) {
  opt.validate();
  require(model.config().task == Task::causal_lm, "generation needs a causal language model; this one is \"" +
                                                  name_of(model.config().task) + "\"");
  use_cache = use_cache && Decoder::supports(model.config());
  const int n = model.config().seq_len, V = model.config().vocab_size;
  require(!prompt.empty(), "the prompt is empty: give at least one token");
  require(int(prompt.size()) <= n, "the prompt is " + std::to_string(prompt.size()) +
                                       " tokens, longer than the model's window of " + std::to_string(n));
  require(max_new >= 0, "max tokens must be >= 0, got " + std::to_string(max_new));
  // Both paths follow one context policy, so they produce the same logits: the context
  // grows to n tokens, then slides by keeping its last n - n/2 (the cache is rebuilt
  // once per n/2 new tokens, which amortises the rebuild).
  const int keep = n - n / 2;
  std::vector<int32_t> ctx = prompt, out;
  std::optional<Decoder> dec;
  if (use_cache) dec.emplace(model);
  NoGrad no_grad(model);
  auto logits_of_context = [&]() -> const float* {
    if (use_cache) return dec->prefill(ctx.data(), int(ctx.size()));
    const int T = int(ctx.size());
    model.forward(ctx.data(), nullptr, T, 1, T);
    return model.logits() + size_t(T - 1) * V;
  };
  const float* logits = logits_of_context();
  for (int i = 0; i < max_new; ++i) {
    const int32_t id = sample_token(logits, V, opt, rng);
    out.push_back(id);
    if (on_token && !on_token(id)) break;
    if (i + 1 == max_new) break;
    if (int(ctx.size()) == n) {
      ctx.erase(ctx.begin(), ctx.end() - (keep - 1));
      ctx.push_back(id);
      logits = logits_of_context();
    } else {
      ctx.push_back(id);
      logits = use_cache ? dec->step(id) : logits_of_context();
    }
  }
  return out;
}

}  // namespace gmlp
