#pragma once
// Token streams for language-model training: a corpus split into train/validation,
// random training windows, and deterministic validation windows.
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "gmlp/rng.h"
#include "gmlp/tokenizer.h"

namespace gmlp {

// A tokenised text corpus split into a training part and a held-out validation tail.
struct TextCorpus {
  std::string path;
  std::vector<int32_t> train, val;
  // Reads the file (Error: missing, unreadable, empty, or not encodable — each naming the
  // path), encodes it, and splits it: the last max(window, round(val_fraction * N)) tokens
  // are validation, the rest training; val_fraction 0 means no validation (val empty).
  // Error when the training part is shorter than `window` (= seq_len + 1) tokens, naming
  // the path, the token count and the window.
  static TextCorpus load(const std::string& path, const Tokenizer& tok, int window, float val_fraction);
  // The same for a corpus already in memory: `name` stands for the path in messages.
  static TextCorpus from_text(std::string_view text, const Tokenizer& tok, int window, float val_fraction,
                              const std::string& name);
  // Token ids already encoded: Error naming `name` and the index of an id outside
  // [0, vocab_size); then split as above.
  static TextCorpus from_tokens(std::vector<int32_t> ids, int vocab_size, int window, float val_fraction,
                                const std::string& name);
};

// `batch` random windows of `window` tokens from `tokens` (start uniform in
// [0, size - window]) into out[batch * window], row b = one window. Draws via rng.below.
void sample_windows(const std::vector<int32_t>& tokens, int batch, int window, Rng& rng, int32_t* out);

// Deterministic validation windows. Window i starts at token i * (window - 1), so
// consecutive windows share one token (each window's last token is the next one's first)
// and every token from 1 to count * (window - 1) is predicted exactly once. The count is
// floor((size - 1) / (window - 1)); a tail of fewer than window - 1 tokens is not scored.
int64_t eval_window_count(const std::vector<int32_t>& tokens, int window);
// Fills out[rows * window] with windows k*batch .. k*batch + rows - 1 and returns rows:
// `batch`, fewer in the last batch, 0 once k is past the last batch.
int eval_batch(const std::vector<int32_t>& tokens, int window, int batch, int64_t k, int32_t* out);

}  // namespace gmlp
