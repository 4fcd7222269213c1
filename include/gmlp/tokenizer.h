#pragma once
// Tokenizers map text to integer ids. Three kinds:
//   "byte"          every byte is a token (ids 0..255), so any input encodes;
//   "char"          the distinct Unicode code points of a training corpus: smaller
//                   vocabulary, but text outside it is rejected;
//   "sentencepiece" a SentencePiece unigram or BPE subword model (libsentencepiece),
//                   trained in-process by train_sentencepiece_tokenizer.
// A tokenizer is saved with a model as JSON, so a checkpoint decodes exactly as it was
// trained:
//   {"kind":"byte"}                                         256 tokens
//   {"kind":"char","chars":"<all vocab chars in id order, UTF-8>"}
//   {"kind":"byte","specials":["[PAD]","[MASK]"]}          258 tokens: [PAD]=256, [MASK]=257
//   {"kind":"sentencepiece","model":"<base64 of the serialized ModelProto>"}
// "specials" (byte and char only) are extra tokens appended after the base vocabulary in
// the listed order, for masked-LM and classification. encode never produces them; decode
// gives their name; they count 0 bytes. A SentencePiece model holds its specials itself
// ([PAD] = id 0 as a control symbol, [MASK] as a user-defined symbol).
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
  virtual std::string kind() const = 0;  // "byte", "char" or "sentencepiece"
  // All ids, specials included: ids are in [0, vocab_size).
  virtual int vocab_size() const = 0;
  // Error naming the character (printable form and U+XXXX) and its byte offset when a
  // character is outside the vocabulary, or on invalid UTF-8 (char tokenizer).
  // A SentencePiece tokenizer maps characters it does not know to <unk> instead, and
  // normalises whitespace (runs of spaces collapse, leading/trailing spaces drop); it is
  // meant for one line at a time.
  virtual std::vector<int32_t> encode(std::string_view text) const = 0;
  // The text of one token (a special's name, e.g. "[MASK]"; a SentencePiece piece with
  // its '▁' as a space); Error when id is outside [0, vocab_size).
  virtual std::string decode(int32_t id) const = 0;
  // The concatenated decodes; SentencePiece drops the space its first piece starts with
  // (the "dummy prefix" it adds when encoding), so decode(encode(s)) == s for text that
  // is already normalised.
  virtual std::string decode(const std::vector<int32_t>& ids) const;
  // Bytes of source text the token stands for, so losses can be reported in bits per
  // byte: byte 1, char its UTF-8 length, SentencePiece the UTF-8 length of decode(id)
  // ('▁' counts as the one space byte it stands for; over a corpus encoded a line at a
  // time the leading '▁' of each line stands in for the line's newline, so the sum over
  // the lines equals the file's size for normalised text). Specials and <unk> count 0.
  virtual int token_bytes(int32_t id) const = 0;
  // The vocabulary entry as stored, for display: SentencePiece "▁the", others decode(id).
  virtual std::string piece(int32_t id) const { return decode(id); }
  // Id of [PAD] / [MASK], or -1 when the vocabulary has none.
  virtual int32_t pad_id() const = 0;
  virtual int32_t mask_id() const = 0;
  // True for ids that are not text: the specials of byte/char tokenizers, SentencePiece
  // control symbols ([PAD]) and [MASK]. <unk> is not special (it stands for text). False
  // for ids outside the vocabulary.
  virtual bool is_special(int32_t id) const = 0;
  // The JSON forms listed at the top of this file; tokenizer_from_json inverts it.
  virtual nlohmann::json to_json() const = 0;
};

// The specials for masked-LM and classification: {"[PAD]", "[MASK]"}.
std::vector<std::string> mlm_specials();

// Vocabulary 256 (+ specials), id = byte value, specials from 256 on.
std::unique_ptr<Tokenizer> make_byte_tokenizer(std::vector<std::string> specials = {});
// Distinct code points of a UTF-8 corpus, ids in code-point order, then the specials.
// Error on invalid UTF-8 (naming the byte offset) or an empty corpus.
std::unique_ptr<Tokenizer> build_char_tokenizer(std::string_view corpus, std::vector<std::string> specials = {});
// Inverse of to_json. Error on unknown kind, missing/invalid/duplicate chars or
// specials, or a SentencePiece model that does not load, naming the field.
std::unique_ptr<Tokenizer> tokenizer_from_json(const nlohmann::json& j);
// The vocabulary size of a tokenizer JSON (specials included), for config validation;
// Error as tokenizer_from_json (a "char" tokenizer without "chars" has no size yet: Error
// naming "chars").
int tokenizer_vocab_size(const nlohmann::json& j);
// The code points of UTF-8 text; Error naming `what` and the offset of invalid bytes.
std::vector<char32_t> utf8_code_points(std::string_view text, const std::string& what);
// A class name (a label of labelled text, a class folder's name, a config's class_names)
// is written into checkpoints as JSON and printed in reports: it must be UTF-8 with no
// control character, which could carry a terminal's escape sequences. Error naming `what`.
void check_class_name(std::string_view name, const std::string& what);
// The "specials" field of a tokenizer JSON: [] when absent; Error naming the field when
// it is not an array of distinct non-empty strings, or on kind "sentencepiece".
std::vector<std::string> tokenizer_specials(const nlohmann::json& j);

// --- SentencePiece (src/data/sentencepiece.cpp) ---

// A tokenizer over a serialized SentencePiece ModelProto (the bytes of a .model file).
// Error when it does not load.
std::unique_ptr<Tokenizer> make_sentencepiece_tokenizer(const std::string& serialized_model);

struct SentencePieceTrainOptions {
  int vocab_size = 8000;               // exact: too large for the corpus is an Error
  std::string model_type = "unigram";  // "unigram" or "bpe"
  int64_t max_lines = 0;               // use at most this many lines (after filtering); 0 = all
  // The corpus is KJV-formatted ("Ge1:1 In the beginning ..."): drop the verses of
  // chapters divisible by 5 (the classification test set, docs/data.md) and strip the
  // references, so training sees exactly data/kjv_groups/pretrain.txt. Error naming
  // file:line for a line not in that format.
  bool exclude_test_chapters = false;
  float character_coverage = 1.0f;  // every character of the corpus gets a piece
  // Lines beyond this many are sampled (seeded, so still deterministic).
  int64_t input_sentence_size = 2000000;
  uint32_t seed = 1;
};

struct SentencePieceTrainResult {
  std::unique_ptr<Tokenizer> tokenizer;
  int64_t lines = 0;  // lines given to the trainer
  int64_t bytes = 0;  // their bytes
};

// Trains in-process on a text file, one sentence per line (empty lines skipped). The
// model has [PAD] = 0 (pad_id), <unk> = 1, [MASK] = 2 (a user-defined symbol), no
// BOS/EOS; identity normalisation (text is kept as is, apart from whitespace runs),
// one thread and a fixed seed, so the same corpus and options give the same model bytes.
// Error naming the path when the file cannot be read or has no lines, on bad options,
// or with SentencePiece's own message when training fails.
SentencePieceTrainResult train_sentencepiece_tokenizer(const std::string& corpus_path,
                                                       const SentencePieceTrainOptions& opts = {});

// Standard base64 (RFC 4648, with '=' padding); decode: Error naming `what` on a
// character outside the alphabet or a bad length.
std::string base64_encode(std::string_view bytes);
std::string base64_decode(std::string_view text, const std::string& what = "base64 text");

}  // namespace gmlp
