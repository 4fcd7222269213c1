#pragma once
// Model selection during training: the best evaluation so far by the task's validation
// score (accuracy for classifiers, loss otherwise), and early stopping after a patience.
// Its state travels in the training state, so a resumed run selects as the whole run would.
#include <cstdint>
#include <string>

#include <nlohmann/json.hpp>

namespace gmlp {

class Selection {
 public:
  // True when ev (a task's "val_*" metrics) beats every earlier evaluation; counts the
  // evaluations since the best otherwise.
  bool update(const nlohmann::json& ev, int64_t step);
  // patience > 0 evaluations in a row without a better score.
  bool exhausted(int patience) const { return patience > 0 && since_best_ >= patience; }
  bool has_best() const { return best_step_ > 0; }
  int64_t best_step() const { return best_step_; }
  const nlohmann::json& best_metrics() const { return best_metrics_; }
  // {"metric", "best", "best_step", "since_best", "metrics"}; from_json accepts null (a new run).
  nlohmann::json to_json() const;
  static Selection from_json(const nlohmann::json& j);

 private:
  std::string metric_;  // "val_acc" (higher is better) or "val_loss" (lower is better)
  double best_ = 0.0;
  int64_t best_step_ = 0;
  int since_best_ = 0;
  nlohmann::json best_metrics_;  // the best evaluation's metrics
};

}  // namespace gmlp
