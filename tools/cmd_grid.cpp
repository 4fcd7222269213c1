// gmlp finetune/train --grid: a small search over a few settings, as BERT users run by
// hand. Each setting trains in its own subdirectory of --out with the test set left
// alone; the best validation score picks one; only that one is scored on the test set.
#include <cstdio>
#include <filesystem>
#include <set>

#include "commands.h"
#include "gmlp/error.h"
#include "gmlp/files.h"
#include "gmlp/trainer.h"

namespace gmlp::cli {
namespace {

// Short names of the settings worth searching; any other key is written SECTION.KEY.
std::string qualified(const std::string& key) {
  if (key.find('.') != std::string::npos) return key;
  static const std::set<std::string> model_keys = {"dropout", "head_dropout", "long_text", "text_window",
                                                   "survival_prob"};
  return (model_keys.count(key) ? "model." : "train.") + key;
}

struct Axis {
  std::string key;  // SECTION.KEY
  std::vector<std::string> values;
};

std::vector<Axis> parse_grid(const std::vector<std::string>& specs) {
  std::vector<Axis> axes;
  for (const auto& s : specs) {
    const auto eq = s.find('=');
    require(eq != std::string::npos && eq > 0 && eq + 1 < s.size(),
            "--grid expects KEY=V1,V2,... (e.g. lr=1e-4,3e-4), got '" + s + "'");
    Axis a{qualified(s.substr(0, eq)), {}};
    std::string rest = s.substr(eq + 1);
    for (size_t p = 0; p <= rest.size();) {
      const size_t c = std::min(rest.find(',', p), rest.size());
      require(c > p, "--grid '" + s + "': an empty value");
      a.values.push_back(rest.substr(p, c - p));
      p = c + 1;
    }
    for (const auto& b : axes) require(b.key != a.key, "--grid names '" + a.key + "' twice");
    axes.push_back(std::move(a));
  }
  return axes;
}

// The validation score a trial was selected with: accuracy (higher is better) or loss.
double trial_score(const nlohmann::json& report, bool* higher) {
  const auto& v = report["selected"]["validation"];
  *higher = v.contains("val_acc");
  return v.value(*higher ? "val_acc" : "val_loss", *higher ? -1.0 : 1e300);
}

}  // namespace

int run_grid(const std::vector<std::string>& specs, const TrainOptions& base, const nlohmann::json& config,
             const std::string& where, bool overwrite, bool refit) {
  namespace fs = std::filesystem;
  const auto axes = parse_grid(specs);
  size_t total = 1;
  for (const auto& a : axes) total *= a.values.size();
  require(total <= 64, "--grid: " + std::to_string(total) + " settings is more than a small search (64 at most)");
  require(base.val_path.size() || base.run.train.val_fraction > 0,
          "--grid chooses by validation: give --val FILE or a --val-fraction above 0");
  struct Trial {
    std::string name;
    nlohmann::json settings;
    double score = 0.0;
    TrainOptions options;  // what a refit starts from
    TrainSummary summary;  // with its report.json
  };
  std::vector<Trial> trials;
  for (size_t i = 0; i < total; ++i) {
    nlohmann::json j = config;
    Trial t;
    size_t rest = i;
    for (const auto& a : axes) {
      const std::string& v = a.values[rest % a.values.size()];
      rest /= a.values.size();
      apply_set(j, a.key + "=" + v);
      t.settings[a.key] = j[a.key.substr(0, a.key.find('.'))][a.key.substr(a.key.find('.') + 1)];
      t.name += (t.name.empty() ? "" : "_") + a.key.substr(a.key.find('.') + 1) + "=" + v;
    }
    TrainOptions o = base;
    o.run.model = ModelConfig::from_json(j["model"], where + " --grid " + t.name + " [model]", /*open=*/true);
    o.run.train = TrainConfig::from_json(j["train"], where + " --grid " + t.name + " [train]");
    o.out_dir = (fs::path(base.out_dir) / t.name).string();
    o.score_test = false;  // the test set waits for the chosen setting
    require(overwrite || !fs::exists(state_file(o.out_dir)),
            "'" + o.out_dir + "' already holds a training run; pass --overwrite to search again");
    std::fprintf(stderr, "gmlp grid: setting %zu of %zu: %s\n", i + 1, total, t.name.c_str());
    const TrainSummary s = train(o);
    require(!s.interrupted, "--grid: interrupted during " + t.name + "; its run is in " + o.out_dir);
    t.options = o;
    t.summary = s;
    trials.push_back(std::move(t));
  }
  bool higher = true;
  size_t best = 0;
  for (size_t i = 0; i < trials.size(); ++i) {
    trials[i].score = trial_score(trials[i].summary.report, &higher);
    if (higher ? trials[i].score > trials[best].score : trials[i].score < trials[best].score) best = i;
  }
  // The chosen run, finished again with its test set scored: the only test score of the
  // search (with refit, the refit model's instead).
  TrainOptions fin;
  fin.out_dir = (fs::path(base.out_dir) / trials[best].name).string();
  fin.resume = true;
  fin.progress_bar = false;
  const TrainSummary chosen = refit ? TrainSummary{} : train(fin);

  const char* metric = higher ? "val_acc" : "val_loss";
  std::printf("%-36s %10s %10s %8s\n", "setting", metric, "best step", "steps");
  nlohmann::json rows = nlohmann::json::array();
  for (size_t i = 0; i < trials.size(); ++i) {
    const auto& t = trials[i];
    std::printf("%-36s %10.4f %10lld %8lld%s\n", t.name.c_str(), t.score,
                (long long)t.summary.report["selected"]["step"].get<int64_t>(),
                (long long)t.summary.report["steps"].get<int64_t>(),
                i == best ? "  <- chosen" : "");
    rows.push_back({{"name", t.name}, {"settings", t.settings}, {metric, t.score},
                    {"best_step", t.summary.report["selected"]["step"]}, {"steps", t.summary.report["steps"]},
                    {"early_stopped", t.summary.report["early_stopped"]}});
  }
  std::fflush(stdout);
  const TrainSummary refitted = refit ? run_refit(trials[best].options, trials[best].summary, base.out_dir)
                                      : TrainSummary{};
  require(!refitted.interrupted, "--grid: interrupted during the refit; its run is in " + refit_dir(base.out_dir));
  const auto& test = (refit ? refitted : chosen).report["test"];
  if (test.is_object())
    std::printf("chosen %s%s: test accuracy %.4f, macro-F1 %.4f (naive Bayes %.4f, majority %.4f)\n",
                trials[best].name.c_str(), refit ? ", refitted" : "", test["accuracy"].get<double>(),
                test["macro_f1"].get<double>(), test["baselines"]["naive_bayes"]["accuracy"].get<double>(),
                test["baselines"]["majority"]["accuracy"].get<double>());
  const std::string out = (fs::path(base.out_dir) / "grid.json").string();
  const std::string model = refit ? model_file(refit_dir(base.out_dir)) : best_model_file(fin.out_dir);
  write_file_atomic(out, nlohmann::json({{"by", metric}, {"settings", rows}, {"chosen", trials[best].name},
                                         {"refit", refit}, {"model", model}, {"test", test}})
                             .dump(2) +
                             "\n");
  std::printf("table: %s; chosen model: %s\n", out.c_str(), model.c_str());
  return 0;
}

}  // namespace gmlp::cli
