#include "gmlp/tokenizer.h"

#include <algorithm>
#include <array>
#include <cstdio>
#include <unordered_map>

#include "gmlp/error.h"

namespace gmlp {
namespace {

std::string hex(uint32_t v, int digits) {
  char buf[16];
  std::snprintf(buf, sizeof buf, "%0*X", digits, v);
  return buf;
}

std::string utf8(char32_t cp) {
  std::string s;
  if (cp < 0x80) {
    s += char(cp);
  } else if (cp < 0x800) {
    s += char(0xC0 | (cp >> 6));
    s += char(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    s += char(0xE0 | (cp >> 12));
    s += char(0x80 | ((cp >> 6) & 0x3F));
    s += char(0x80 | (cp & 0x3F));
  } else {
    s += char(0xF0 | (cp >> 18));
    s += char(0x80 | ((cp >> 12) & 0x3F));
    s += char(0x80 | ((cp >> 6) & 0x3F));
    s += char(0x80 | (cp & 0x3F));
  }
  return s;
}

// "'é' (U+00E9)"; control characters are escaped so the message stays on one line.
std::string describe(char32_t cp) {
  std::string shown;
  if (cp == '\n') shown = "\\n";
  else if (cp == '\t') shown = "\\t";
  else if (cp == '\r') shown = "\\r";
  else if (cp < 0x20 || cp == 0x7F) shown = "\\x" + hex(cp, 2);
  else if (cp >= 0x80 && cp < 0xA0) shown = "\\u" + hex(cp, 4);  // C1 controls
  else shown = utf8(cp);
  return "'" + shown + "' (U+" + hex(cp, 4) + ")";
}

// Decodes the code point starting at text[pos] and advances pos. Strict: rejects
// truncated sequences, stray continuation bytes, overlong forms, surrogates and values
// above U+10FFFF, so every accepted text re-encodes to the same bytes.
char32_t next_code_point(std::string_view text, size_t& pos, const char* what) {
  const size_t start = pos;
  auto bad = [&](const std::string& why) {
    throw Error(std::string(what) + " is not valid UTF-8 at byte offset " + std::to_string(start) +
                " (byte 0x" + hex(uint8_t(text[start]), 2) + ": " + why + ")");
  };
  const uint8_t b0 = uint8_t(text[pos]);
  int len = 0;  // set below; bad() throws, which the compiler cannot see
  char32_t cp = 0;
  if (b0 < 0x80) { pos += 1; return b0; }
  if ((b0 & 0xE0) == 0xC0) { len = 2; cp = b0 & 0x1F; }
  else if ((b0 & 0xF0) == 0xE0) { len = 3; cp = b0 & 0x0F; }
  else if ((b0 & 0xF8) == 0xF0) { len = 4; cp = b0 & 0x07; }
  else bad((b0 & 0xC0) == 0x80 ? "unexpected continuation byte" : "invalid lead byte");
  if (start + len > text.size()) bad("truncated sequence");
  for (int i = 1; i < len; ++i) {
    const uint8_t b = uint8_t(text[start + i]);
    if ((b & 0xC0) != 0x80) bad("truncated sequence");
    cp = (cp << 6) | (b & 0x3F);
  }
  static constexpr char32_t kMin[5] = {0, 0, 0x80, 0x800, 0x10000};
  if (cp < kMin[len]) bad("overlong encoding");
  if (cp >= 0xD800 && cp <= 0xDFFF) bad("surrogate code point");
  if (cp > 0x10FFFF) bad("code point above U+10FFFF");
  pos += len;
  return cp;
}

std::vector<char32_t> code_points(std::string_view text, const char* what) {
  std::vector<char32_t> out;
  out.reserve(text.size());
  for (size_t pos = 0; pos < text.size();) out.push_back(next_code_point(text, pos, what));
  return out;
}

// Extra tokens after a base vocabulary of `base` ids: names, ids base .. base + n - 1.
class Specials {
 public:
  Specials(int base, std::vector<std::string> names) : base_(base), names_(std::move(names)) {
    for (size_t i = 0; i < names_.size(); ++i) {
      if (names_[i] == "[PAD]") pad_ = base_ + int32_t(i);
      if (names_[i] == "[MASK]") mask_ = base_ + int32_t(i);
    }
  }
  int size() const { return int(names_.size()); }
  bool has(int32_t id) const { return id >= base_ && id < base_ + size(); }
  const std::string& name(int32_t id) const { return names_[size_t(id - base_)]; }
  int32_t pad() const { return pad_; }
  int32_t mask() const { return mask_; }
  void add_to(nlohmann::json& j) const {
    if (!names_.empty()) j["specials"] = names_;
  }

 private:
  int base_;
  std::vector<std::string> names_;
  int32_t pad_ = -1, mask_ = -1;
};

class ByteTokenizer final : public Tokenizer {
 public:
  using Tokenizer::decode;
  explicit ByteTokenizer(std::vector<std::string> specials) : specials_(256, std::move(specials)) {}
  std::string kind() const override { return "byte"; }
  int vocab_size() const override { return 256 + specials_.size(); }
  std::vector<int32_t> encode(std::string_view text) const override {
    std::vector<int32_t> ids(text.size());
    for (size_t i = 0; i < text.size(); ++i) ids[i] = uint8_t(text[i]);
    return ids;
  }
  std::string decode(int32_t id) const override {
    check(id);
    if (id >= 256) return specials_.name(id);
    return std::string(1, char(uint8_t(id)));
  }
  int token_bytes(int32_t id) const override { check(id); return id < 256 ? 1 : 0; }
  int32_t pad_id() const override { return specials_.pad(); }
  int32_t mask_id() const override { return specials_.mask(); }
  bool is_special(int32_t id) const override { return specials_.has(id); }
  nlohmann::json to_json() const override {
    nlohmann::json j = {{"kind", "byte"}};
    specials_.add_to(j);
    return j;
  }

 private:
  void check(int32_t id) const {
    require(id >= 0 && id < vocab_size(), [&] {
      return "byte tokenizer: token id " + std::to_string(id) + " outside [0, " + std::to_string(vocab_size()) + ")";
    });
  }
  Specials specials_;
};

class CharTokenizer final : public Tokenizer {
 public:
  using Tokenizer::decode;
  // chars must be distinct; ids follow their order.
  explicit CharTokenizer(std::vector<char32_t> chars, std::vector<std::string> specials)
      : chars_(std::move(chars)), specials_(int(chars_.size()), std::move(specials)) {
    ascii_.fill(-1);
    for (size_t id = 0; id < chars_.size(); ++id) {
      const char32_t c = chars_[id];
      if (c < 0x80) ascii_[c] = int32_t(id);
      else other_[c] = int32_t(id);
      pieces_.push_back(utf8(c));
    }
  }
  std::string kind() const override { return "char"; }
  int vocab_size() const override { return int(chars_.size()) + specials_.size(); }
  std::vector<int32_t> encode(std::string_view text) const override {
    std::vector<int32_t> ids;
    ids.reserve(text.size());
    for (size_t pos = 0; pos < text.size();) {
      const size_t start = pos;
      const char32_t c = next_code_point(text, pos, "text");
      int32_t id = -1;
      if (c < 0x80) {  // a table for ASCII: the common case costs no hashing
        id = ascii_[c];
      } else if (auto it = other_.find(c); it != other_.end()) {
        id = it->second;
      }
      if (id < 0)
        throw Error("character " + describe(c) + " at byte offset " + std::to_string(start) +
                    " is not in the char tokenizer's vocabulary (" + std::to_string(chars_.size()) +
                    " characters)");
      ids.push_back(id);
    }
    return ids;
  }
  std::string decode(int32_t id) const override {
    const size_t i = check(id);
    return i < pieces_.size() ? pieces_[i] : specials_.name(id);
  }
  int token_bytes(int32_t id) const override {
    const size_t i = check(id);
    return i < pieces_.size() ? int(pieces_[i].size()) : 0;
  }
  int32_t pad_id() const override { return specials_.pad(); }
  int32_t mask_id() const override { return specials_.mask(); }
  bool is_special(int32_t id) const override { return specials_.has(id); }
  nlohmann::json to_json() const override {
    std::string all;
    for (const auto& p : pieces_) all += p;
    nlohmann::json j = {{"kind", "char"}, {"chars", all}};
    specials_.add_to(j);
    return j;
  }

 private:
  size_t check(int32_t id) const {
    require(id >= 0 && id < vocab_size(), [&] {
      return "char tokenizer: token id " + std::to_string(id) + " outside [0, " + std::to_string(vocab_size()) + ")";
    });
    return size_t(id);
  }
  std::vector<char32_t> chars_;
  Specials specials_;
  std::vector<std::string> pieces_;  // UTF-8 of each id, precomputed for decode
  std::array<int32_t, 128> ascii_;
  std::unordered_map<char32_t, int32_t> other_;
};

// Error unless the names are distinct and non-empty; `where` names the field.
void check_specials(const std::vector<std::string>& names, const std::string& where) {
  constexpr size_t kMaxSpecials = 1024;
  require(names.size() <= kMaxSpecials, where + ": more than " + std::to_string(kMaxSpecials) + " specials (" +
                                            std::to_string(names.size()) + ")");
  std::unordered_map<std::string, size_t> seen;
  for (size_t i = 0; i < names.size(); ++i) {
    require(!names[i].empty(), where + ": special " + std::to_string(i) + " is an empty string");
    auto [it, fresh] = seen.emplace(names[i], i);
    require(fresh, where + ": \"" + names[i] + "\" is listed twice (positions " + std::to_string(it->second) +
                       " and " + std::to_string(i) + ")");
  }
}

}  // namespace

std::string Tokenizer::decode(const std::vector<int32_t>& ids) const {
  std::string out;
  for (int32_t id : ids) out += decode(id);
  return out;
}

std::vector<std::string> mlm_specials() { return {"[PAD]", "[MASK]"}; }

std::unique_ptr<Tokenizer> make_byte_tokenizer(std::vector<std::string> specials) {
  check_specials(specials, "byte tokenizer specials");
  return std::make_unique<ByteTokenizer>(std::move(specials));
}

std::unique_ptr<Tokenizer> build_char_tokenizer(std::string_view corpus, std::vector<std::string> specials) {
  require(!corpus.empty(), "build_char_tokenizer: corpus is empty");
  check_specials(specials, "char tokenizer specials");
  std::vector<char32_t> chars = code_points(corpus, "corpus");
  std::sort(chars.begin(), chars.end());
  chars.erase(std::unique(chars.begin(), chars.end()), chars.end());
  return std::make_unique<CharTokenizer>(std::move(chars), std::move(specials));
}

std::vector<std::string> tokenizer_specials(const nlohmann::json& j) {
  require(j.is_object(), "tokenizer JSON: expected an object, got " + std::string(j.type_name()));
  if (!j.contains("specials")) return {};
  require(j.value("kind", "") != "sentencepiece",
          "tokenizer JSON: field \"specials\" is not allowed for kind \"sentencepiece\" (its model holds [PAD] and [MASK])");
  const auto& s = j["specials"];
  require(s.is_array(), "tokenizer JSON: field \"specials\" must be an array of strings, got " + s.dump());
  std::vector<std::string> names;
  for (size_t i = 0; i < s.size(); ++i) {
    require(s[i].is_string(), "tokenizer JSON: field \"specials\"[" + std::to_string(i) + "] must be a string, got " +
                                  s[i].dump());
    names.push_back(s[i].get<std::string>());
  }
  check_specials(names, "tokenizer JSON: field \"specials\"");
  return names;
}

std::unique_ptr<Tokenizer> sentencepiece_from_json(const nlohmann::json& j);  // sentencepiece.cpp

std::unique_ptr<Tokenizer> tokenizer_from_json(const nlohmann::json& j) {
  require(j.is_object(), "tokenizer JSON: expected an object, got " + std::string(j.type_name()));
  require(j.contains("kind") && j["kind"].is_string(), "tokenizer JSON: field \"kind\" missing or not a string");
  const std::string kind = j["kind"].get<std::string>();
  if (kind == "sentencepiece") {
    tokenizer_specials(j);  // rejects a "specials" field
    return sentencepiece_from_json(j);
  }
  require(kind == "byte" || kind == "char", "tokenizer JSON: field \"kind\" is \"" + kind +
                                                "\", expected \"byte\", \"char\" or \"sentencepiece\"");
  std::vector<std::string> specials = tokenizer_specials(j);
  if (kind == "byte") return make_byte_tokenizer(std::move(specials));
  require(j.contains("chars") && j["chars"].is_string(),
          "tokenizer JSON: field \"chars\" missing or not a string (required for kind \"char\")");
  const std::string text = j["chars"].get<std::string>();
  require(!text.empty(), "tokenizer JSON: field \"chars\" is empty");
  std::vector<char32_t> chars = code_points(text, "tokenizer JSON field \"chars\"");
  // Ids are positions in "chars", so a repeated character would make ids ambiguous.
  std::unordered_map<char32_t, size_t> seen;
  for (size_t i = 0; i < chars.size(); ++i) {
    auto [it, fresh] = seen.emplace(chars[i], i);
    require(fresh, "tokenizer JSON: field \"chars\" repeats character " + describe(chars[i]) + " (ids " +
                       std::to_string(it->second) + " and " + std::to_string(i) + ")");
  }
  return std::make_unique<CharTokenizer>(std::move(chars), std::move(specials));
}

std::vector<char32_t> utf8_code_points(std::string_view text, const std::string& what) {
  return code_points(text, what.c_str());
}

void check_class_name(std::string_view name, const std::string& what) {
  code_points(name, what.c_str());
  for (const unsigned char ch : name)
    require(ch >= 0x20 && ch != 0x7f,
            [&] { return what + " holds a control character (byte " + std::to_string(int(ch)) + ")"; });
}

int tokenizer_vocab_size(const nlohmann::json& j) { return tokenizer_from_json(j)->vocab_size(); }

}  // namespace gmlp
