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

namespace {

void check_generation(const Model& model, const std::vector<int32_t>& prompt, int max_new, const SamplingOptions& opt) {
  opt.validate();
  require(model.config().task == Task::causal_lm, "generation needs a causal language model; this one is \"" +
                                                  name_of(model.config().task) + "\"");
  const int n = model.config().seq_len;
  require(!prompt.empty(), "the prompt is empty: give at least one token");
  require(int(prompt.size()) <= n, "the prompt is " + std::to_string(prompt.size()) +
                                       " tokens, longer than the model's window of " + std::to_string(n));
  require(max_new >= 0, "max tokens must be >= 0, got " + std::to_string(max_new));
}

// One stream's context. Both paths (cached and recomputing) and every stream follow one
// policy, so they produce the same logits: the context grows to n tokens, then slides by
// keeping its last n - n/2 (the cache is rebuilt once per n/2 new tokens, which
// amortises the rebuild).
struct Context {
  std::vector<int32_t> tokens;
  // Appends id; true when the window was full, so that the context was cut and must be
  // run again (prefill) instead of extended by one step.
  bool push(int32_t id, int n) {
    const bool full = int(tokens.size()) == n;
    if (full) tokens.erase(tokens.begin(), tokens.end() - ((n - n / 2) - 1));
    tokens.push_back(id);
    return full;
  }
};

}  // namespace

std::vector<int32_t> generate(Model& model, const std::vector<int32_t>& prompt, int max_new,
                              const SamplingOptions& opt, Rng& rng, const std::function<bool(int32_t)>& on_token,
                              bool use_cache) {
  check_generation(model, prompt, max_new, opt);
  use_cache = use_cache && Decoder::supports(model.config());
  const int n = model.config().seq_len, V = model.config().vocab_size;
  Context ctx{prompt};
  std::vector<int32_t> out;
  std::optional<Decoder> dec;
  if (use_cache) dec.emplace(model);
  NoGrad no_grad(model);
  auto logits_of_context = [&]() -> const float* {
    const int T = int(ctx.tokens.size());
    if (use_cache) return dec->prefill(ctx.tokens.data(), T);
    model.forward(ctx.tokens.data(), nullptr, T, 1, T);
    return model.logits() + size_t(T - 1) * V;
  };
  const float* logits = logits_of_context();
  for (int i = 0; i < max_new; ++i) {
    const int32_t id = sample_token(logits, V, opt, rng);
    out.push_back(id);
    if (on_token && !on_token(id)) break;
    if (i + 1 == max_new) break;
    const bool cut = ctx.push(id, n);
    logits = cut || !use_cache ? logits_of_context() : dec->step(id);
  }
  return out;
}

std::vector<std::vector<int32_t>> generate_batch(Model& model, const std::vector<std::vector<int32_t>>& prompts,
                                                 int max_new, const SamplingOptions& opt, std::vector<Rng>& rngs,
                                                 const std::function<bool(int, int32_t)>& on_token) {
  require(!prompts.empty(), "no prompts to generate from");
  require(rngs.size() == prompts.size(), "generate_batch: " + std::to_string(rngs.size()) + " generators for " +
                                             std::to_string(prompts.size()) + " prompts");
  for (const auto& p : prompts) check_generation(model, p, max_new, opt);
  require(Decoder::supports(model.config()), "batched generation needs the cached decoder");
  const int S = int(prompts.size()), n = model.config().seq_len, V = model.config().vocab_size;
  Decoder dec(model, S);
  NoGrad no_grad(model);
  std::vector<Context> ctx(static_cast<size_t>(S));
  std::vector<std::vector<int32_t>> out(static_cast<size_t>(S));
  std::vector<int> which;
  std::vector<int32_t> next;
  const float* all = nullptr;
  for (int k = 0; k < S; ++k) {
    ctx[size_t(k)].tokens = prompts[size_t(k)];
    all = dec.prefill(ctx[size_t(k)].tokens.data(), int(prompts[size_t(k)].size()), k) - size_t(k) * V;
  }
  std::vector<char> live(static_cast<size_t>(S), max_new > 0);
  while (std::find(live.begin(), live.end(), 1) != live.end()) {
    which.clear();
    next.clear();
    for (int k = 0; k < S; ++k) {
      if (!live[size_t(k)]) continue;
      const int32_t id = sample_token(all + size_t(k) * V, V, opt, rngs[size_t(k)]);
      out[size_t(k)].push_back(id);
      if ((on_token && !on_token(k, id)) || int(out[size_t(k)].size()) == max_new) {
        live[size_t(k)] = 0;
        continue;
      }
      if (ctx[size_t(k)].push(id, n)) {  // window cut: this stream alone runs its context again
        dec.prefill(ctx[size_t(k)].tokens.data(), int(ctx[size_t(k)].tokens.size()), k);
      } else {
        which.push_back(k);
        next.push_back(id);
      }
    }
    if (!which.empty()) all = dec.step(next.data(), which.data(), int(which.size()));
  }
  return out;
}

}  // namespace gmlp
