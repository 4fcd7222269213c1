// SentencePiece tokenizers (libsentencepiece, Debian libsentencepiece-dev 0.1.97):
// loading a serialized model, encoding and decoding, and in-process training.
#include <sentencepiece_processor.h>
#include <sentencepiece_trainer.h>

#include <array>
#include <fstream>
#include <mutex>
#include <unordered_map>

#include "gmlp/error.h"
#include "gmlp/labelled.h"
#include "gmlp/tokenizer.h"

namespace gmlp {
namespace {

constexpr std::string_view kSpace = "\xE2\x96\x81";  // U+2581 '▁', SentencePiece's space

std::string replace_spaces(const std::string& piece) {
  std::string out;
  for (size_t i = 0; i < piece.size();) {
    if (piece.compare(i, kSpace.size(), kSpace) == 0) {
      out += ' ';
      i += kSpace.size();
    } else {
      out += piece[i++];
    }
  }
  return out;
}

class SentencePieceTokenizer final : public Tokenizer {
 public:
  explicit SentencePieceTokenizer(const std::string& serialized) : serialized_(serialized) {
    const auto st = sp_.LoadFromSerializedProto(serialized);
    require(st.ok(), "sentencepiece model does not load (" + std::to_string(serialized.size()) + " bytes): " +
                         st.ToString());
    const int n = sp_.GetPieceSize();
    require(n > 0, "sentencepiece model has an empty vocabulary");
    text_.resize(size_t(n));
    bytes_.resize(size_t(n));
    special_.resize(size_t(n));
    for (int id = 0; id < n; ++id) {
      const std::string& p = sp_.IdToPiece(id);
      if (p == "[MASK]" && !sp_.IsControl(id) && !sp_.IsUnknown(id)) mask_ = id;
      if (p == "[PAD]" || (id == sp_.pad_id() && sp_.IsControl(id))) {
        if (pad_ < 0) pad_ = id;
      }
    }
    for (int id = 0; id < n; ++id) {
      const std::string& p = sp_.IdToPiece(id);
      if (sp_.IsControl(id) || id == mask_) {
        special_[id] = 1;
        text_[id] = p;
        bytes_[id] = 0;
      } else if (sp_.IsUnknown(id)) {
        text_[id] = p;  // "<unk>": the text it replaced is not known
        bytes_[id] = 0;
      } else if (sp_.IsByte(id)) {  // byte fallback pieces "<0xAB>"
        text_[id] = std::string(1, char(std::stoi(p.substr(3, 2), nullptr, 16)));
        bytes_[id] = 1;
      } else {
        text_[id] = replace_spaces(p);
        bytes_[id] = int(text_[id].size());
      }
    }
  }

  std::string kind() const override { return "sentencepiece"; }
  int vocab_size() const override { return int(text_.size()); }
  std::vector<int32_t> encode(std::string_view text) const override {
    std::vector<int> ids;
    const auto st = sp_.Encode(absl::string_view(text.data(), text.size()), &ids);
    require(st.ok(), "sentencepiece: cannot encode text: " + st.ToString());
    return std::vector<int32_t>(ids.begin(), ids.end());
  }
  std::string decode(int32_t id) const override { return text_[check(id)]; }
  std::string decode(const std::vector<int32_t>& ids) const override {
    std::string out;
    for (int32_t id : ids) out += text_[check(id)];
    // The dummy prefix: encoding puts a '▁' before the first word of the text.
    if (!ids.empty() && !special_[size_t(ids[0])] && sp_.IdToPiece(ids[0]).compare(0, kSpace.size(), kSpace) == 0)
      out.erase(0, 1);
    return out;
  }
  int token_bytes(int32_t id) const override { return bytes_[check(id)]; }
  std::string piece(int32_t id) const override { return sp_.IdToPiece(int(check(id))); }
  int32_t pad_id() const override { return pad_; }
  int32_t mask_id() const override { return mask_; }
  bool is_special(int32_t id) const override { return id >= 0 && id < vocab_size() && special_[size_t(id)]; }
  nlohmann::json to_json() const override {
    return {{"kind", "sentencepiece"}, {"model", base64_encode(serialized_)}};
  }

 private:
  size_t check(int32_t id) const {
    require(id >= 0 && id < vocab_size(), [&] {
      return "sentencepiece tokenizer: token id " + std::to_string(id) + " outside [0, " +
             std::to_string(vocab_size()) + ")";
    });
    return size_t(id);
  }
  std::string serialized_;
  sentencepiece::SentencePieceProcessor sp_;
  std::vector<std::string> text_;  // decode(id)
  std::vector<int> bytes_;         // token_bytes(id)
  std::vector<uint8_t> special_;
  int32_t pad_ = -1, mask_ = -1;
};

// Feeds the trainer one line at a time from the file, filtered as the options say.
class LineIterator final : public sentencepiece::SentenceIterator {
 public:
  LineIterator(const std::string& path, const SentencePieceTrainOptions& o) : path_(path), opts_(o), in_(path) {
    Next();
  }
  bool done() const override { return done_; }
  void Next() override {
    if (opts_.max_lines > 0 && lines_ >= opts_.max_lines) {
      done_ = true;
      return;
    }
    std::string line;
    while (std::getline(in_, line)) {
      ++line_no_;
      if (!line.empty() && line.back() == '\r') line.pop_back();
      if (opts_.exclude_test_chapters) {
        KjvVerse v;
        if (!parse_kjv_line(line, &v)) {  // no throwing through the library: stop and report
          error_ = path_ + ":" + std::to_string(line_no_) +
                   ": not a KJV verse line (\"<book><chapter>:<verse> <text>\"), needed by exclude_test_chapters";
          done_ = true;
          return;
        }
        if (v.chapter % 5 == 0) continue;
        line = v.text;
      }
      if (line.empty()) continue;
      value_ = std::move(line);
      ++lines_;
      bytes_ += int64_t(value_.size());
      return;
    }
    if (in_.bad()) error_ = path_ + ": read error after line " + std::to_string(line_no_);
    done_ = true;
  }
  const std::string& value() const override { return value_; }
  sentencepiece::util::Status status() const override {
    if (error_.empty()) return {};
    return sentencepiece::util::Status(sentencepiece::util::StatusCode::kInvalidArgument, error_);
  }
  const std::string& error() const { return error_; }
  int64_t lines() const { return lines_; }
  int64_t bytes() const { return bytes_; }

 private:
  std::string path_;
  SentencePieceTrainOptions opts_;
  std::ifstream in_;
  std::string value_, error_;
  bool done_ = false;
  int64_t line_no_ = 0, lines_ = 0, bytes_ = 0;
};

// Training touches process-wide SentencePiece state (its seed, its log level).
std::mutex train_mutex;

}  // namespace

std::unique_ptr<Tokenizer> make_sentencepiece_tokenizer(const std::string& serialized_model) {
  return std::make_unique<SentencePieceTokenizer>(serialized_model);
}

std::unique_ptr<Tokenizer> sentencepiece_from_json(const nlohmann::json& j) {
  require(j.contains("model") && j["model"].is_string(),
          "tokenizer JSON: field \"model\" missing or not a string (required for kind \"sentencepiece\": base64 of "
          "the serialized model)");
  const std::string bytes = base64_decode(j["model"].get<std::string>(), "tokenizer JSON field \"model\"");
  require(!bytes.empty(), "tokenizer JSON: field \"model\" is empty");
  try {
    return make_sentencepiece_tokenizer(bytes);
  } catch (const Error& e) {
    throw Error(std::string("tokenizer JSON: field \"model\": ") + e.what());
  }
}

SentencePieceTrainResult train_sentencepiece_tokenizer(const std::string& corpus_path,
                                                       const SentencePieceTrainOptions& o) {
  require(o.vocab_size >= 4 && o.vocab_size <= (1 << 20),
          "sentencepiece training: vocab_size must be in [4, 1048576], got " + std::to_string(o.vocab_size));
  require(o.model_type == "unigram" || o.model_type == "bpe",
          "sentencepiece training: model_type must be \"unigram\" or \"bpe\", got \"" + o.model_type + "\"");
  require(o.max_lines >= 0, "sentencepiece training: max_lines must be >= 0, got " + std::to_string(o.max_lines));
  require(o.character_coverage > 0 && o.character_coverage <= 1,
          "sentencepiece training: character_coverage must be in (0, 1], got " + std::to_string(o.character_coverage));
  require(o.input_sentence_size >= 0, "sentencepiece training: input_sentence_size must be >= 0");
  {
    std::ifstream probe(corpus_path);
    require(bool(probe), "sentencepiece training: cannot read corpus " + corpus_path);
  }
  LineIterator lines(corpus_path, o);
  require(lines.error().empty(), lines.error());
  require(!lines.done(), "sentencepiece training: corpus " + corpus_path + " has no non-empty lines" +
                             (o.exclude_test_chapters ? " outside the test chapters" : ""));

  const std::unordered_map<std::string, std::string> args = {
      {"vocab_size", std::to_string(o.vocab_size)},
      {"model_type", o.model_type},
      {"pad_id", "0"},
      {"pad_piece", "[PAD]"},
      {"unk_id", "1"},
      {"bos_id", "-1"},
      {"eos_id", "-1"},
      {"user_defined_symbols", "[MASK]"},
      {"character_coverage", std::to_string(o.character_coverage)},
      {"input_sentence_size", std::to_string(o.input_sentence_size)},
      {"shuffle_input_sentence", "true"},
      {"normalization_rule_name", "identity"},
      // The unigram trainer splits its E-step per thread, so the model depends on the
      // thread count: one thread makes it the same on every machine (KJV: ~1 s anyway).
      {"num_threads", "1"},
      {"minloglevel", "1"},  // no INFO lines on stderr
  };
  std::string serialized;
  {
    std::lock_guard<std::mutex> lock(train_mutex);
    sentencepiece::SetRandomGeneratorSeed(o.seed);
    const auto st = sentencepiece::SentencePieceTrainer::Train(args, &lines, &serialized);
    require(lines.error().empty(), lines.error());
    require(st.ok(), "sentencepiece training on " + corpus_path + " failed: " + st.ToString());
  }
  SentencePieceTrainResult r;
  r.tokenizer = make_sentencepiece_tokenizer(serialized);
  r.lines = lines.lines();
  r.bytes = lines.bytes();
  return r;
}

// --- base64 ---

namespace {
constexpr char kB64[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
}

std::string base64_encode(std::string_view in) {
  std::string out;
  out.reserve((in.size() + 2) / 3 * 4);
  size_t i = 0;
  for (; i + 3 <= in.size(); i += 3) {
    const uint32_t v = uint32_t(uint8_t(in[i])) << 16 | uint32_t(uint8_t(in[i + 1])) << 8 | uint8_t(in[i + 2]);
    out += kB64[v >> 18];
    out += kB64[(v >> 12) & 63];
    out += kB64[(v >> 6) & 63];
    out += kB64[v & 63];
  }
  if (i < in.size()) {
    uint32_t v = uint32_t(uint8_t(in[i])) << 16;
    if (i + 1 < in.size()) v |= uint32_t(uint8_t(in[i + 1])) << 8;
    out += kB64[v >> 18];
    out += kB64[(v >> 12) & 63];
    out += i + 1 < in.size() ? kB64[(v >> 6) & 63] : '=';
    out += '=';
  }
  return out;
}

std::string base64_decode(std::string_view in, const std::string& what) {
  static const std::array<int8_t, 256> table = [] {
    std::array<int8_t, 256> t;
    t.fill(-1);
    for (int i = 0; i < 64; ++i) t[uint8_t(kB64[i])] = int8_t(i);
    return t;
  }();
  require(in.size() % 4 == 0, what + ": base64 length " + std::to_string(in.size()) + " is not a multiple of 4");
  std::string out;
  out.reserve(in.size() / 4 * 3);
  for (size_t i = 0; i < in.size(); i += 4) {
    const bool last = i + 4 == in.size();
    int pad = 0;
    uint32_t v = 0;
    for (size_t k = 0; k < 4; ++k) {
      const char c = in[i + k];
      int d;
      if (c == '=' && last && k >= 2 && (k == 3 || in[i + 3] == '=')) {
        ++pad;
        d = 0;
      } else {
        d = table[uint8_t(c)];
        require(d >= 0 && pad == 0,
                [&] { return what + ": invalid base64 character at offset " + std::to_string(i + k); });
      }
      v = v << 6 | uint32_t(d);
    }
    out += char(v >> 16);
    if (pad < 2) out += char((v >> 8) & 0xFF);
    if (pad < 1) out += char(v & 0xFF);
  }
  return out;
}

}  // namespace gmlp
