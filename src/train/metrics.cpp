// Confusion matrices and the JSONL metrics log.
#include "gmlp/metrics.h"

#include <algorithm>
#include <cstdio>
#include <filesystem>

#include "gmlp/error.h"
#include "gmlp/files.h"
#include "gmlp/safetensors.h"

namespace gmlp {

std::vector<int64_t> confusion_matrix(const std::vector<int32_t>& truth, const std::vector<int32_t>& predicted,
                                      int k) {
  require(k >= 1, "confusion_matrix: k must be at least 1, got " + std::to_string(k));
  require(truth.size() == predicted.size(), "confusion_matrix: " + std::to_string(truth.size()) + " true labels but " +
                                                std::to_string(predicted.size()) + " predictions");
  std::vector<int64_t> m(size_t(k) * k, 0);
  for (size_t i = 0; i < truth.size(); ++i) {
    require(truth[i] >= 0 && truth[i] < k && predicted[i] >= 0 && predicted[i] < k, [&] {
      return "confusion_matrix: example " + std::to_string(i) + " has true label " + std::to_string(truth[i]) +
             " and prediction " + std::to_string(predicted[i]) + ", outside [0, " + std::to_string(k) + ")";
    });
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

nlohmann::json class_report(const std::vector<int64_t>& m, const std::vector<std::string>& names) {
  const int k = side_of(m, names.size());
  nlohmann::json per_class = nlohmann::json::array();
  double f1_sum = 0.0;
  for (int c = 0; c < k; ++c) {
    int64_t support = 0, predicted = 0;
    for (int j = 0; j < k; ++j) {
      support += m[size_t(c) * k + j];
      predicted += m[size_t(j) * k + c];
    }
    const double tp = double(m[size_t(c) * k + c]);
    const double precision = predicted ? tp / double(predicted) : 0.0, recall = support ? tp / double(support) : 0.0;
    const double f1 = precision + recall > 0 ? 2 * precision * recall / (precision + recall) : 0.0;
    f1_sum += f1;
    per_class.push_back({{"class", names[size_t(c)]}, {"precision", precision}, {"recall", recall}, {"f1", f1},
                         {"support", support}});
  }
  return {{"accuracy", confusion_accuracy(m)}, {"macro_f1", k ? f1_sum / k : 0.0}, {"per_class", per_class}};
}

nlohmann::json confusion_json(const std::vector<int64_t>& m, const std::vector<std::string>& names) {
  const int k = side_of(m, names.size());
  nlohmann::json rows = nlohmann::json::array();
  for (int i = 0; i < k; ++i)
    rows.push_back(std::vector<int64_t>(m.begin() + ptrdiff_t(i) * k, m.begin() + ptrdiff_t(i + 1) * k));
  return {{"classes", names}, {"matrix", rows}};
}

void truncate_metrics(const std::string& path, int64_t step) {
  if (!std::filesystem::exists(path)) return;
  std::ifstream in(path);
  std::string line, kept;
  while (std::getline(in, line)) {
    if (line.empty()) continue;
    try {
      if (parse_json(line, path).value("step", int64_t(0)) > step) continue;
    } catch (const std::exception&) {
      continue;  // a line torn by a crash
    }
    kept += line + "\n";
  }
  write_file_atomic(path, kept);
}

MetricsLog::MetricsLog(const std::string& path) : f_(path, std::ios::app) {
  require(f_.good(), "cannot open metrics log '" + path + "' for writing");
}

void MetricsLog::write(const nlohmann::json& j) {
  f_ << j.dump() << "\n";
  f_.flush();
}

}  // namespace gmlp
