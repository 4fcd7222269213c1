#pragma once
// Labelled sentences for classification ("label<TAB>text" files, e.g. the KJV book
// groups of scripts/make_kjv_groups.sh, docs/data.md), and padding them into batches.
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "gmlp/kinds.h"
#include "gmlp/tokenizer.h"

namespace gmlp {

struct LabelledSet {
  std::vector<std::string> texts;
  std::vector<int32_t> labels;           // indices into class_names
  std::vector<std::string> class_names;  // label i's name
  size_t size() const { return texts.size(); }
};

// Reads "label<TAB>text" lines (a trailing '\r' is dropped; the last line may lack its
// '\n'). Class names are numbered in order of first appearance in the file (for the KJV
// groups: law, history, wisdom, prophets, gospels+acts, letters+revelation). Error naming
// path:line for an empty line, a line without a tab, an empty label or an empty text;
// naming the path when it cannot be read or holds no lines.
LabelledSet load_labelled(const std::string& path);
// The same, with the classes fixed (a test file read against its training file's
// classes): a label outside class_names is an Error naming path:line and the label.
LabelledSet load_labelled(const std::string& path, const std::vector<std::string>& class_names);
// The same checks for examples already in memory (`what` names them in messages, with
// the example's index): labels[i] is text i's class name. class_names empty: numbered in
// order of first appearance; given: a label outside them is an Error.
LabelledSet make_labelled(std::vector<std::string> texts, const std::vector<std::string>& labels,
                          const std::vector<std::string>& class_names, const std::string& what);

// Sentences tokenised and padded to a common length T: row i of tokens ([rows, T]) holds
// lengths[i] tokens of text owner[i], then pad ids. A text longer than T becomes, by
// `mode`: its first T tokens (head); its first T/4 and last T - T/4 tokens (head_tail,
// as Sun et al. 2019 found best for BERT); or ceil(len / T) rows, the windows
// [0, T), [T, 2T), ..., the last one the text's final T tokens (chunks). Every other
// mode gives one row per text.
struct PaddedTokens {
  int rows = 0, T = 0;
  std::vector<int32_t> tokens;   // [rows * T]
  std::vector<int32_t> lengths;  // [rows], each in [1, T]
  std::vector<int32_t> owner;    // [rows]: the text each row comes from (ascending)
  int64_t truncated = 0;         // texts longer than T tokens
};
// Error when the tokenizer has no [PAD] (naming the "specials" to add), when T < 1, or
// when a text encodes to no tokens (naming its index); encoding errors name the index.
PaddedTokens encode_padded(const std::vector<std::string>& texts, const Tokenizer& tok, int T,
                           LongText mode = LongText::head);
// Copies rows idx[0..n) of p into tokens_out [n * T] and lengths_out [n] (a batch).
void gather_rows(const PaddedTokens& p, const size_t* idx, int n, int32_t* tokens_out, int32_t* lengths_out);

// One line of data/kjv.txt: "Ge1:1 In the beginning ..." -> book "Ge", chapter 1,
// verse 1, text "In the beginning ...". False when the line is not in that form
// (book: an optional digit then letters; one space after the reference; text non-empty).
struct KjvVerse {
  std::string book;
  int chapter = 0, verse = 0;
  std::string text;
};
bool parse_kjv_line(std::string_view line, KjvVerse* out);

}  // namespace gmlp
