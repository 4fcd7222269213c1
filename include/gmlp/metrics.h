#pragma once
// Metrics: confusion matrices of classifiers, and the JSONL metrics log of a run.
#include <cstdint>
#include <fstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace gmlp {

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
// {"accuracy", "macro_f1", "per_class": [{"class", "precision", "recall", "f1", "support"}]}:
// precision = tp / predicted, recall = tp / support, 0 where the denominator is 0; the
// macro-F1 is the unweighted mean of the classes' F1.
nlohmann::json class_report(const std::vector<int64_t>& m, const std::vector<std::string>& names);
// {"classes": [...], "matrix": [[row of true class 0], ...]}
nlohmann::json confusion_json(const std::vector<int64_t>& m, const std::vector<std::string>& names);

// A run's metrics.jsonl: one JSON object a line, appended and flushed line by line.
class MetricsLog {
 public:
  explicit MetricsLog(const std::string& path);
  void write(const nlohmann::json& j);

 private:
  std::ofstream f_;
};

// Keeps the lines of steps <= step (atomically), so a resumed run's log continues as
// if never interrupted (lines written after the last checkpoint are done again).
void truncate_metrics(const std::string& path, int64_t step);

}  // namespace gmlp
