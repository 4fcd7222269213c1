// The multinomial naive Bayes baseline for sentence classification, and confusion
// matrices shared with finetune/eval.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>

#include "gmlp/error.h"
#include "gmlp/text_data.h"

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
    require(c >= 0 && c < k, "naive Bayes: label " + std::to_string(c) + " of example " + std::to_string(i) +
                                 " outside [0, " + std::to_string(k) + ")");
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

std::vector<int64_t> confusion_matrix(const std::vector<int32_t>& truth, const std::vector<int32_t>& predicted,
                                      int k) {
  require(k >= 1, "confusion_matrix: k must be at least 1, got " + std::to_string(k));
  require(truth.size() == predicted.size(), "confusion_matrix: " + std::to_string(truth.size()) + " true labels but " +
                                                std::to_string(predicted.size()) + " predictions");
  std::vector<int64_t> m(size_t(k) * k, 0);
  for (size_t i = 0; i < truth.size(); ++i) {
    require(truth[i] >= 0 && truth[i] < k && predicted[i] >= 0 && predicted[i] < k,
            "confusion_matrix: example " + std::to_string(i) + " has true label " + std::to_string(truth[i]) +
                " and prediction " + std::to_string(predicted[i]) + ", outside [0, " + std::to_string(k) + ")");
    ++m[size_t(truth[i]) * k + size_t(predicted[i])];
  }
  return m;
}

namespace {
int side_of(const std::vector<int64_t>& m, size_t names) {
  require(m.size() == names * names, "confusion matrix: " + std::to_string(m.size()) + " entries for " +
                                         std::to_string(names) + " class names (expected " +
                                         std::to_string(names * names) + ")");
  return int(names);
}
}  // namespace

double confusion_accuracy(const std::vector<int64_t>& m) {
  size_t k = 0;
  while (k * k < m.size()) ++k;
  require(k * k == m.size(), "confusion matrix: " + std::to_string(m.size()) + " entries is not a square");
  int64_t total = 0, right = 0;
  for (size_t i = 0; i < k; ++i)
    for (size_t j = 0; j < k; ++j) {
      total += m[i * k + j];
      if (i == j) right += m[i * k + j];
    }
  return total ? double(right) / double(total) : 0.0;
}

std::string format_confusion(const std::vector<int64_t>& m, const std::vector<std::string>& names) {
  const int k = side_of(m, names.size());
  const std::string corner = "true \\ predicted";
  size_t first = corner.size();
  for (const auto& n : names) first = std::max(first, n.size());
  std::vector<size_t> width(static_cast<size_t>(k));
  for (int j = 0; j < k; ++j) {
    width[size_t(j)] = names[size_t(j)].size();
    for (int i = 0; i < k; ++i)
      width[size_t(j)] = std::max(width[size_t(j)], std::to_string(m[size_t(i) * k + j]).size());
  }
  std::vector<int64_t> row_total(size_t(k), 0);
  size_t total_w = 5;
  for (int i = 0; i < k; ++i) {
    for (int j = 0; j < k; ++j) row_total[size_t(i)] += m[size_t(i) * k + j];
    total_w = std::max(total_w, std::to_string(row_total[size_t(i)]).size());
  }
  auto pad = [](const std::string& s, size_t w, bool left) {
    const std::string fill(w > s.size() ? w - s.size() : 0, ' ');
    return left ? s + fill : fill + s;
  };
  std::string out = pad(corner, first, true);
  for (int j = 0; j < k; ++j) out += "  " + pad(names[size_t(j)], width[size_t(j)], false);
  out += "  " + pad("total", total_w, false) + "  recall\n";
  for (int i = 0; i < k; ++i) {
    out += pad(names[size_t(i)], first, true);
    for (int j = 0; j < k; ++j) out += "  " + pad(std::to_string(m[size_t(i) * k + j]), width[size_t(j)], false);
    char recall[32];
    if (row_total[size_t(i)])
      std::snprintf(recall, sizeof recall, "%.3f", double(m[size_t(i) * k + i]) / double(row_total[size_t(i)]));
    else
      std::snprintf(recall, sizeof recall, "-");
    out += "  " + pad(std::to_string(row_total[size_t(i)]), total_w, false) + "  " + pad(recall, 6, false) + "\n";
  }
  return out;
}

nlohmann::json confusion_json(const std::vector<int64_t>& m, const std::vector<std::string>& names) {
  const int k = side_of(m, names.size());
  nlohmann::json rows = nlohmann::json::array();
  for (int i = 0; i < k; ++i)
    rows.push_back(std::vector<int64_t>(m.begin() + ptrdiff_t(i) * k, m.begin() + ptrdiff_t(i + 1) * k));
  return {{"classes", names}, {"matrix", rows}};
}

}  // namespace gmlp
