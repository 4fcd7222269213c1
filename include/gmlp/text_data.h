#pragma once
// Text data beyond the causal LM's token stream: labelled sentences for classification
// ("label<TAB>text" files, e.g. data/kjv_groups/{train,test}.tsv), padding them into
// batches, BERT-style masking for the masked LM, a naive Bayes baseline, and confusion
// matrices. The KJV book-group files come from scripts/make_kjv_groups.sh (SPEC §7).
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "gmlp/rng.h"
#include "gmlp/tokenizer.h"

namespace gmlp {

// --- labelled sentences (src/data/labelled.cpp) ---

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

// Sentences tokenised and padded to a common length T: row i of tokens ([rows, T]) holds
// the first lengths[i] tokens of text i, then pad ids.
struct PaddedTokens {
  int rows = 0, T = 0;
  std::vector<int32_t> tokens;   // [rows * T]
  std::vector<int32_t> lengths;  // [rows], each in [1, T]
  int64_t truncated = 0;         // texts longer than T tokens, cut to their first T
};
// Error when the tokenizer has no [PAD] (naming the "specials" to add), when T < 1, or
// when a text encodes to no tokens (naming its index); encoding errors name the index.
PaddedTokens encode_padded(const std::vector<std::string>& texts, const Tokenizer& tok, int T);
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

// --- masked-LM corruption (src/data/mlm.cpp) ---

// BERT masking of one sequence of T ids. Eligible positions are those whose id is not
// special (so [PAD] and any [MASK] already there are never chosen). Exactly
// k = max(1, round(mask_prob * eligible)) of them are chosen, uniformly without
// replacement (none when no position is eligible); of the chosen, each independently
// becomes [MASK] with probability 0.8, a uniformly random non-special id with 0.1, or
// stays as it is with 0.1. inputs[t] = the corrupted id, targets[t] = in[t] at chosen
// positions and -1 elsewhere. `inputs` may be `in`. Returns k. Error when the tokenizer
// has no [MASK], mask_prob is outside (0, 1], or an id is outside the vocabulary.
int mask_tokens(const int32_t* in, int T, int32_t* inputs, int32_t* targets, const Tokenizer& tok, Rng& rng,
                float mask_prob = 0.15f);

// --- naive Bayes baseline (src/data/naive_bayes.cpp) ---

// Lowercased words: maximal runs of ASCII letters and digits (and bytes >= 0x80, so UTF-8
// letters stay inside words); everything else separates ("LORD's" -> "lord", "s").
std::vector<std::string> word_tokens(std::string_view text);

// Multinomial naive Bayes over word_tokens with add-alpha (Laplace) smoothing:
// score(c) = log P(c) + sum over words w of the text of log((n(w,c) + alpha) /
// (n(c) + alpha * |V|)), V the training vocabulary; words outside V are ignored; ties go
// to the lower class index.
class NaiveBayes {
 public:
  // Error on an empty set or alpha <= 0.
  void fit(const LabelledSet& train, double alpha = 1.0);
  int32_t predict(std::string_view text) const;
  std::vector<double> scores(std::string_view text) const;  // log-probabilities up to a constant
  int n_classes() const { return int(log_prior_.size()); }
  size_t vocabulary_size() const { return word_index_.size(); }

 private:
  std::unordered_map<std::string, int32_t> word_index_;
  std::vector<double> log_prior_;  // [k]
  std::vector<double> log_like_;   // [|V| * k]
};

// --- metrics (src/data/naive_bayes.cpp) ---

// k x k counts, row = true class, column = predicted, m[true * k + pred]. Error when the
// sizes differ or a label is outside [0, k).
std::vector<int64_t> confusion_matrix(const std::vector<int32_t>& truth, const std::vector<int32_t>& predicted,
                                      int k);
// Trace over total (0 for an empty matrix).
double confusion_accuracy(const std::vector<int64_t>& m);
// A table with the class names on rows (true) and columns (predicted), a row total and
// the per-class recall, e.g.
//   true \ predicted   law  history  ...  total  recall
//   law               1000       20  ...   1038   0.963
// Error when m is not names.size() squared.
std::string format_confusion(const std::vector<int64_t>& m, const std::vector<std::string>& names);
// {"classes": [...], "matrix": [[row of true class 0], ...]}
nlohmann::json confusion_json(const std::vector<int64_t>& m, const std::vector<std::string>& names);

}  // namespace gmlp
