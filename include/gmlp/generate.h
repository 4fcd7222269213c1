#pragma once
// Text generation from a causal model: temperature, top-k and top-p sampling.
#include <cstdint>
#include <functional>
#include <vector>

#include "gmlp/model.h"
#include "gmlp/rng.h"

namespace gmlp {

struct SamplingOptions {
  float temperature = 0.8f;  // 0 = greedy (argmax)
  int top_k = 0;             // keep the k most likely tokens; 0 = all
  float top_p = 1.0f;        // keep the smallest set whose probability reaches p; 1 = all
  void validate() const;     // Error naming the bad option
};

// Draws one token id from logits[V] under the options.
int32_t sample_token(const float* logits, int V, const SamplingOptions& opt, Rng& rng);

// Generates up to max_new tokens after `prompt` (1..n tokens; Error when empty or longer
// than the window). on_token is called with each new id as soon as it is drawn and may
// return false to stop early. The context grows to the window of n tokens; then it
// slides, keeping its last n - n/2 tokens. use_cache picks the cached Decoder (one
// token's work per step) or a full forward over the context for every token; both give
// the same logits.
std::vector<int32_t> generate(Model& model, const std::vector<int32_t>& prompt, int max_new,
                              const SamplingOptions& opt, Rng& rng,
                              const std::function<bool(int32_t)>& on_token = nullptr, bool use_cache = true);

// Several prompts at once, stream k drawing from rngs[k] (one per prompt): the same
// tokens generate() gives for each prompt with that generator, but every step advances
// all unfinished streams together (Decoder::step over several streams), so the weights
// are read once per step instead of once per stream. on_token(k, id) may return false
// to stop stream k. Returns each stream's new tokens.
std::vector<std::vector<int32_t>> generate_batch(Model& model, const std::vector<std::vector<int32_t>>& prompts,
                                                 int max_new, const SamplingOptions& opt, std::vector<Rng>& rngs,
                                                 const std::function<bool(int, int32_t)>& on_token = nullptr);

}  // namespace gmlp
