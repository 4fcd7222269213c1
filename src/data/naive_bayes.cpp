// The multinomial naive Bayes baseline for sentence classification.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>

#include "gmlp/error.h"
#include "gmlp/naive_bayes.h"

namespace gmlp {

std::vector<std::string> word_tokens(std::string_view text) {
  std::vector<std::string> words;
  std::string cur;
  for (char ch : text) {
    const auto c = uint8_t(ch);
    if ((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c >= 0x80) {
      cur += char(c);
    } else if (c >= 'A' && c <= 'Z') {
      cur += char(c - 'A' + 'a');
    } else if (!cur.empty()) {
      words.push_back(std::move(cur));
      cur.clear();
    }
  }
  if (!cur.empty()) words.push_back(std::move(cur));
  return words;
}

void NaiveBayes::fit(const LabelledSet& train, double alpha) {
  require(train.size() > 0, "naive Bayes: the training set is empty");
  require(alpha > 0 && std::isfinite(alpha), "naive Bayes: alpha must be positive, got " + std::to_string(alpha));
  require(train.labels.size() == train.texts.size(), "naive Bayes: texts and labels differ in number");
  const int k = int(train.class_names.size());
  require(k >= 1, "naive Bayes: no classes");
  word_index_.clear();
  std::vector<int64_t> docs(size_t(k), 0), totals(size_t(k), 0);
  std::vector<int64_t> counts;  // [|V| * k], grown as words appear
  for (size_t i = 0; i < train.size(); ++i) {
    const int32_t c = train.labels[i];
    require(c >= 0 && c < k, [&] {
      return "naive Bayes: label " + std::to_string(c) + " of example " + std::to_string(i) + " outside [0, " +
             std::to_string(k) + ")";
    });
    ++docs[size_t(c)];
    for (auto& w : word_tokens(train.texts[i])) {
      auto [it, fresh] = word_index_.emplace(std::move(w), int32_t(word_index_.size()));
      if (fresh) counts.resize(counts.size() + size_t(k), 0);
      ++counts[size_t(it->second) * k + size_t(c)];
      ++totals[size_t(c)];
    }
  }
  const double V = double(word_index_.size());
  log_prior_.assign(size_t(k), 0);
  for (int c = 0; c < k; ++c)
    log_prior_[size_t(c)] = docs[size_t(c)] ? std::log(double(docs[size_t(c)]) / double(train.size()))
                                            : -std::numeric_limits<double>::infinity();
  log_like_.resize(counts.size());
  for (size_t w = 0; w < word_index_.size(); ++w)
    for (int c = 0; c < k; ++c)
      log_like_[w * k + size_t(c)] =
          std::log((double(counts[w * k + size_t(c)]) + alpha) / (double(totals[size_t(c)]) + alpha * V));
}

std::vector<double> NaiveBayes::scores(std::string_view text) const {
  require(!log_prior_.empty(), "naive Bayes: predict before fit");
  const size_t k = log_prior_.size();
  std::vector<double> s = log_prior_;
  for (const auto& w : word_tokens(text)) {
    auto it = word_index_.find(w);
    if (it == word_index_.end()) continue;
    const double* l = log_like_.data() + size_t(it->second) * k;
    for (size_t c = 0; c < k; ++c) s[c] += l[c];
  }
  return s;
}

int32_t NaiveBayes::predict(std::string_view text) const {
  const auto s = scores(text);
  return int32_t(std::max_element(s.begin(), s.end()) - s.begin());  // first of equals
}

}  // namespace gmlp
