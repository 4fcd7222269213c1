// BERT-style masking for the masked language model (docs/model.md §4): choose 15% of the
// non-special positions; of those, 80% become [MASK], 10% a random token, 10% stay.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "gmlp/error.h"
#include "gmlp/mlm.h"

namespace gmlp {

int mask_tokens(const int32_t* in, int T, int32_t* inputs, int32_t* targets, const Tokenizer& tok, Rng& rng,
                float mask_prob) {
  const int32_t mask = tok.mask_id();
  require(mask >= 0, "mask_tokens: the " + tok.kind() +
                         " tokenizer has no [MASK] token (give it \"specials\": [\"[PAD]\", \"[MASK]\"])");
  require(mask_prob > 0 && mask_prob <= 1, "mask_tokens: mask_prob must be in (0, 1], got " + std::to_string(mask_prob));
  require(T >= 0, "mask_tokens: T must be >= 0, got " + std::to_string(T));
  const int V = tok.vocab_size();
  // Candidates first, from `in`, before `inputs` (which may alias it) is written.
  std::vector<int> eligible;
  eligible.reserve(size_t(T));
  for (int t = 0; t < T; ++t) {
    const int32_t id = in[t];
    require(id >= 0 && id < V, [&] {
      return "mask_tokens: id " + std::to_string(id) + " at position " + std::to_string(t) +
             " is outside the vocabulary [0, " + std::to_string(V) + ")";
    });
    if (!tok.is_special(id)) eligible.push_back(t);
  }
  if (inputs != in) std::memcpy(inputs, in, sizeof(int32_t) * size_t(T));
  std::fill(targets, targets + T, -1);
  const int n = int(eligible.size());
  if (n == 0) return 0;
  const int k = std::clamp(int(std::lround(double(mask_prob) * n)), 1, n);
  // Partial Fisher-Yates: the first k entries become a uniform k-subset, in draw order.
  for (int i = 0; i < k; ++i) {
    const int j = i + int(rng.below(uint64_t(n - i)));
    std::swap(eligible[size_t(i)], eligible[size_t(j)]);
  }
  for (int i = 0; i < k; ++i) {
    const int t = eligible[size_t(i)];
    targets[t] = inputs[t];
    const float u = rng.uniform();
    if (u < 0.8f) {
      inputs[t] = mask;
    } else if (u < 0.9f) {
      int32_t r;  // specials are few, so rejection ends fast
      do r = int32_t(rng.below(uint64_t(V))); while (tok.is_special(r));
      inputs[t] = r;
    }  // else: kept
  }
  return k;
}

}  // namespace gmlp
