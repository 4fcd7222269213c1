#pragma once
// The naive Bayes baseline for sentence classification (`gmlp baseline`).
#include <cstdint>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "gmlp/labelled.h"

namespace gmlp {

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

}  // namespace gmlp
