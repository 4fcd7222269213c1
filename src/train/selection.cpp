// Model selection by validation score, with early stopping (train/selection.h).
#include "train/selection.h"

namespace gmlp {

bool Selection::update(const nlohmann::json& ev, int64_t step) {
  // Classifiers are chosen by accuracy, the quantity they are judged by; language
  // models by loss.
  const std::string metric = ev.contains("val_acc") ? "val_acc" : "val_loss";
  if (!ev.contains(metric)) return false;
  const double v = ev[metric].get<double>();
  const bool higher = metric == "val_acc";
  // Ties keep the earlier (shorter-trained) model.
  if (best_step_ == 0 || metric != metric_ || (higher ? v > best_ : v < best_)) {
    metric_ = metric;
    best_ = v;
    best_step_ = step;
    since_best_ = 0;
    best_metrics_ = ev;
    return true;
  }
  ++since_best_;
  return false;
}

nlohmann::json Selection::to_json() const {
  return {{"metric", metric_}, {"best", best_}, {"best_step", best_step_}, {"since_best", since_best_},
          {"metrics", best_metrics_}};
}

Selection Selection::from_json(const nlohmann::json& j) {
  Selection s;
  if (!j.is_object()) return s;
  s.metric_ = j.value("metric", std::string());
  s.best_ = j.value("best", 0.0);
  s.best_step_ = j.value("best_step", int64_t(0));
  s.since_best_ = j.value("since_best", 0);
  if (j.contains("metrics")) s.best_metrics_ = j["metrics"];
  return s;
}

}  // namespace gmlp
