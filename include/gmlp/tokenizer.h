#pragma once
// Tokenizers map text to integer ids. Two kinds: "byte" (every byte is a token, so any
// input encodes) and "char" (the distinct Unicode code points of a training corpus,
// smaller vocabulary but text outside it is rejected). A tokenizer is saved with a
// model as JSON, so a checkpoint decodes exactly as it was trained.
#include <cstdint>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

namespace gmlp {

class Tokenizer {
 public:
  virtual ~Tokenizer() = default;
  virtual std::string kind() const = 0;  // "byte" or "char"
  virtual int vocab_size() const = 0;
  // Error naming the character (printable form and U+XXXX) and its byte offset when a
  // character is outside the vocabulary, or on invalid UTF-8 (char tokenizer).
  virtual std::vector<int32_t> encode(std::string_view text) const = 0;
  // The bytes of one token; Error when id is outside [0, vocab_size).
  virtual std::string decode(int32_t id) const = 0;
  std::string decode(const std::vector<int32_t>& ids) const;
  // UTF-8 bytes of the token, so losses can be reported in bits per byte.
  virtual int token_bytes(int32_t id) const = 0;
  // {"kind":"byte"} or {"kind":"char","chars":"<all vocab chars in id order, UTF-8>"}
  virtual nlohmann::json to_json() const = 0;
};

// Vocabulary 256, id = byte value.
std::unique_ptr<Tokenizer> make_byte_tokenizer();
// Distinct code points of a UTF-8 corpus, ids in code-point order. Error on invalid
// UTF-8 (naming the byte offset) or an empty corpus.
std::unique_ptr<Tokenizer> build_char_tokenizer(std::string_view corpus);
// Inverse of to_json. Error on unknown kind, missing/invalid/duplicate chars, naming the field.
std::unique_ptr<Tokenizer> tokenizer_from_json(const nlohmann::json& j);

}  // namespace gmlp
