// Labelled sentences ("label<TAB>text" files), padding into batches, KJV verse lines.
#include <algorithm>
#include <cctype>
#include <cstring>
#include <string_view>
#include <unordered_map>

#include "gmlp/error.h"
#include "gmlp/files.h"
#include "gmlp/labelled.h"

namespace gmlp {
namespace {

// Adds examples one by one with the checks every source of labelled data gets.
class LabelledBuilder {
 public:
  explicit LabelledBuilder(const std::vector<std::string>* fixed) : fixed_(fixed) {
    if (fixed) {
      s_.class_names = *fixed;
      for (size_t i = 0; i < fixed->size(); ++i) index_.emplace((*fixed)[i], int32_t(i));
    }
  }
  // `where` names the example (path:line, or a list and an index) in errors.
  void add(const std::string& label, std::string_view text, const std::string& where) {
    require(!label.empty(), [&] { return where + ": empty label"; });
    check_class_name(label, where + ": the label");
    require(!text.empty(), [&] { return where + ": empty text after the label \"" + label + "\""; });
    auto it = index_.find(label);
    if (it == index_.end()) {
      if (fixed_) {
        std::string known;
        for (const auto& n : *fixed_) known += (known.empty() ? "" : ", ") + n;
        throw Error(where + ": label \"" + label + "\" is not one of the training classes (" + known + ")");
      }
      it = index_.emplace(label, int32_t(s_.class_names.size())).first;
      s_.class_names.push_back(label);
    }
    s_.labels.push_back(it->second);
    s_.texts.emplace_back(text);
  }
  LabelledSet take() { return std::move(s_); }

 private:
  const std::vector<std::string>* fixed_;
  LabelledSet s_;
  std::unordered_map<std::string, int32_t> index_;
};

LabelledSet load(const std::string& path, const std::vector<std::string>* fixed) {
  std::string text;
  try {
    text = read_file(path);
  } catch (const Error& e) {
    throw Error(std::string("labelled data: cannot read ") + e.what());
  }
  LabelledBuilder b(fixed);
  int64_t no = 0;
  for (const std::string_view line : split_lines(text)) {
    ++no;
    const std::string where = path + ":" + std::to_string(no);
    require(!line.empty(), where + ": empty line (expected \"label<TAB>text\")");
    const size_t tab = line.find('\t');
    require(tab != std::string::npos, where + ": no tab (expected \"label<TAB>text\")");
    b.add(std::string(line.substr(0, tab)), line.substr(tab + 1), where);
  }
  LabelledSet s = b.take();
  require(!s.texts.empty(), "labelled data: " + path + " holds no lines");
  return s;
}

}  // namespace

LabelledSet load_labelled(const std::string& path) { return load(path, nullptr); }

LabelledSet load_labelled(const std::string& path, const std::vector<std::string>& class_names) {
  require(!class_names.empty(), "labelled data: no classes given for " + path);
  return load(path, &class_names);
}

LabelledSet make_labelled(std::vector<std::string> texts, const std::vector<std::string>& labels,
                          const std::vector<std::string>& class_names, const std::string& what) {
  require(texts.size() == labels.size(), what + ": " + std::to_string(texts.size()) + " texts but " +
                                             std::to_string(labels.size()) + " labels");
  require(!texts.empty(), what + ": no examples");
  LabelledBuilder b(class_names.empty() ? nullptr : &class_names);
  for (size_t i = 0; i < texts.size(); ++i) b.add(labels[i], texts[i], what + "[" + std::to_string(i) + "]");
  return b.take();
}

PaddedTokens encode_padded(const std::vector<std::string>& texts, const Tokenizer& tok, int T, LongText mode) {
  require(T >= 1, "encode_padded: length T must be at least 1, got " + std::to_string(T));
  const int32_t pad = tok.pad_id();
  require(pad >= 0, "encode_padded: the " + tok.kind() +
                        " tokenizer has no [PAD] token (give it \"specials\": [\"[PAD]\", \"[MASK]\"])");
  PaddedTokens p;
  p.T = T;
  auto add_row = [&](const int32_t* ids, size_t n, size_t text) {
    p.tokens.insert(p.tokens.end(), ids, ids + n);
    p.tokens.insert(p.tokens.end(), size_t(T) - n, pad);
    p.lengths.push_back(int32_t(n));
    p.owner.push_back(int32_t(text));
  };
  for (size_t i = 0; i < texts.size(); ++i) {
    std::vector<int32_t> ids;
    try {
      ids = tok.encode(texts[i]);
    } catch (const Error& e) {
      throw Error("encode_padded: text " + std::to_string(i) + ": " + e.what());
    }
    require(!ids.empty(), [&] { return "encode_padded: text " + std::to_string(i) + " encodes to no tokens"; });
    const size_t len = ids.size(), t = size_t(T);
    if (len <= t) {
      add_row(ids.data(), len, i);
      continue;
    }
    ++p.truncated;
    if (mode == LongText::head) {
      add_row(ids.data(), t, i);
    } else if (mode == LongText::head_tail) {
      const size_t head = t / 4;
      std::copy(ids.end() - ptrdiff_t(t - head), ids.end(), ids.begin() + ptrdiff_t(head));
      add_row(ids.data(), t, i);
    } else {
      for (size_t s = 0; s < len; s += t) add_row(ids.data() + std::min(s, len - t), t, i);
    }
  }
  p.rows = int(p.lengths.size());
  return p;
}

void gather_rows(const PaddedTokens& p, const size_t* idx, int n, int32_t* tokens_out, int32_t* lengths_out) {
  for (int r = 0; r < n; ++r) {
    const size_t i = idx[r];
    require(i < size_t(p.rows),
            [&] { return "gather_rows: row " + std::to_string(i) + " outside [0, " + std::to_string(p.rows) + ")"; });
    std::memcpy(tokens_out + size_t(r) * p.T, p.tokens.data() + i * size_t(p.T), sizeof(int32_t) * size_t(p.T));
    lengths_out[r] = p.lengths[i];
  }
}

bool parse_kjv_line(std::string_view line, KjvVerse* out) {
  auto is_digit = [](char c) { return c >= '0' && c <= '9'; };
  auto is_alpha = [](char c) { return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z'); };
  size_t i = 0;
  if (i < line.size() && is_digit(line[i])) ++i;
  const size_t book_start = 0;
  const size_t letters = i;
  while (i < line.size() && is_alpha(line[i])) ++i;
  if (i == letters) return false;
  const size_t book_end = i;
  auto number = [&](int* v) {
    const size_t start = i;
    long long n = 0;
    while (i < line.size() && is_digit(line[i]) && i - start < 6) n = n * 10 + (line[i++] - '0');
    *v = int(n);
    return i > start && (i >= line.size() || !is_digit(line[i]));
  };
  int chapter = 0, verse = 0;
  if (!number(&chapter)) return false;
  if (i >= line.size() || line[i] != ':') return false;
  ++i;
  if (!number(&verse)) return false;
  if (i >= line.size() || line[i] != ' ') return false;
  ++i;
  if (i >= line.size()) return false;
  out->book.assign(line.substr(book_start, book_end - book_start));
  out->chapter = chapter;
  out->verse = verse;
  out->text.assign(line.substr(i));
  return true;
}

}  // namespace gmlp
