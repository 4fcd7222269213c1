#include "gmlp/dataset.h"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "gmlp/error.h"
#include "gmlp/files.h"

namespace gmlp {
namespace {

// The shared reader, with a corpus's own messages for the common mistakes.
std::string read_corpus(const std::string& path) {
  namespace fs = std::filesystem;
  std::error_code ec;
  require(fs::exists(path, ec), "corpus " + path + " not found");
  require(!fs::is_directory(path, ec), "corpus " + path + " is a directory, not a text file");
  std::string text = read_file(path);
  require(!text.empty(), "corpus " + path + " is empty");
  return text;
}

void check_window(int window, const char* fn) {
  require(window >= 2, std::string(fn) + ": window " + std::to_string(window) +
                           " is too small (need at least 2 tokens: one input and one target)");
}

}  // namespace

TextCorpus TextCorpus::load(const std::string& path, const Tokenizer& tok, int window, float val_fraction) {
  check_window(window, "TextCorpus::load");
  return from_text(read_corpus(path), tok, window, val_fraction, path);
}

TextCorpus TextCorpus::from_text(std::string_view text, const Tokenizer& tok, int window, float val_fraction,
                                 const std::string& name) {
  check_window(window, "TextCorpus::from_text");
  require(!text.empty(), "corpus " + name + " is empty");
  std::vector<int32_t> ids;
  try {
    if (tok.kind() == "sentencepiece") {
      // SentencePiece normalises whitespace and is meant for a line at a time; each
      // line's leading piece then carries its word boundary (see Tokenizer::token_bytes).
      size_t start = 0;
      while (start < text.size()) {
        size_t end = text.find('\n', start);
        if (end == std::string::npos) end = text.size();
        const auto line = tok.encode(text.substr(start, end - start));
        ids.insert(ids.end(), line.begin(), line.end());
        start = end + 1;
      }
    } else {
      ids = tok.encode(text);
    }
  } catch (const Error& e) {
    throw Error("corpus " + name + ": " + e.what());  // the tokenizer knows the offset, not the file
  }
  return from_tokens(std::move(ids), tok.vocab_size(), window, val_fraction, name);
}

TextCorpus TextCorpus::from_tokens(std::vector<int32_t> ids, int vocab_size, int window, float val_fraction,
                                   const std::string& name) {
  check_window(window, "TextCorpus::from_tokens");
  require(std::isfinite(val_fraction) && val_fraction >= 0.0f && val_fraction < 1.0f,
          "TextCorpus: val_fraction " + std::to_string(val_fraction) + " is outside [0, 1)");
  for (size_t i = 0; i < ids.size(); ++i)
    require(ids[i] >= 0 && ids[i] < vocab_size, [&] {
      return "corpus " + name + ": token id " + std::to_string(ids[i]) + " at index " + std::to_string(i) +
             " is outside the vocabulary of " + std::to_string(vocab_size);
    });
  const int64_t n = int64_t(ids.size());
  require(n >= window, "corpus " + name + " has " + std::to_string(n) + " tokens, fewer than one window of " +
                           std::to_string(window));
  // The validation tail is at least one window, so it can always be evaluated.
  const int64_t n_val = val_fraction == 0.0f ? 0 : std::max<int64_t>(window, std::llround(double(val_fraction) * n));
  const int64_t n_train = n - n_val;
  require(n_train >= window, "corpus " + name + " has " + std::to_string(n) + " tokens; after holding out " +
                                 std::to_string(n_val) + " for validation (val_fraction " +
                                 std::to_string(val_fraction) + ") the training part has " +
                                 std::to_string(std::max<int64_t>(n_train, 0)) +
                                 ", fewer than one window of " + std::to_string(window));
  TextCorpus c;
  c.path = name;
  c.val.assign(ids.begin() + n_train, ids.end());
  ids.resize(size_t(n_train));
  c.train = std::move(ids);
  return c;
}

void sample_windows(const std::vector<int32_t>& tokens, int batch, int window, Rng& rng, int32_t* out) {
  check_window(window, "sample_windows");
  require(batch >= 0, "sample_windows: batch " + std::to_string(batch) + " is negative");
  require(tokens.size() >= size_t(window), "sample_windows: " + std::to_string(tokens.size()) +
                                               " tokens, fewer than one window of " + std::to_string(window));
  const uint64_t starts = tokens.size() - size_t(window) + 1;
  for (int b = 0; b < batch; ++b) {
    const auto* src = tokens.data() + rng.below(starts);
    std::copy(src, src + window, out + size_t(b) * size_t(window));
  }
}

int64_t eval_window_count(const std::vector<int32_t>& tokens, int window) {
  check_window(window, "eval_window_count");
  if (tokens.size() < 2) return 0;
  return int64_t((tokens.size() - 1) / size_t(window - 1));
}

int eval_batch(const std::vector<int32_t>& tokens, int window, int batch, int64_t k, int32_t* out) {
  require(batch >= 1, "eval_batch: batch " + std::to_string(batch) + " must be at least 1");
  require(k >= 0, "eval_batch: batch index " + std::to_string(k) + " is negative");
  const int64_t count = eval_window_count(tokens, window);
  const int64_t first = k * batch;
  if (first >= count) return 0;
  const int rows = int(std::min<int64_t>(batch, count - first));
  const size_t stride = size_t(window - 1);  // windows share their boundary token
  for (int r = 0; r < rows; ++r) {
    const auto* src = tokens.data() + size_t(first + r) * stride;
    std::copy(src, src + window, out + size_t(r) * size_t(window));
  }
  return rows;
}

}  // namespace gmlp
