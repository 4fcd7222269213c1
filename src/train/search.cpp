// The small search of gmlp/search.h, and the refit that may follow a choice.
#include "gmlp/search.h"

#include <cstdio>
#include <filesystem>
#include <set>

#include "gmlp/comm.h"
#include "gmlp/error.h"
#include "gmlp/files.h"

namespace gmlp {
namespace {

namespace fs = std::filesystem;

// Short names of the settings worth searching; any other key is written SECTION.KEY.
std::string qualified(const std::string& key) {
  if (key.find('.') != std::string::npos) return key;
  static const std::set<std::string> model_keys = {"dropout", "head_dropout", "long_text", "text_window",
                                                   "survival_prob"};
  return (model_keys.count(key) ? "model." : "train.") + key;
}

// The validation score a trial was selected with: accuracy (higher is better) or loss.
// From the summary, which every rank holds alike, so every rank chooses the same.
double trial_score(const TrainSummary& s, bool* higher) {
  const auto& v = s.best_metrics;
  *higher = v.contains("val_acc");
  return v.value(*higher ? "val_acc" : "val_loss", *higher ? -1.0 : 1e300);
}

}  // namespace

nlohmann::json parse_setting(const std::string& text, const std::string& what) {
  check_json_depth(text, what);
  try {
    return nlohmann::json::parse(text);
  } catch (const nlohmann::json::exception&) {
    return text;
  }
}

SearchAxis parse_search_axis(const std::string& spec) {
  const auto eq = spec.find('=');
  require(eq != std::string::npos && eq > 0 && eq + 1 < spec.size(),
          "--grid expects KEY=V1,V2,... (e.g. lr=1e-4,3e-4), got '" + spec + "'");
  SearchAxis a{spec.substr(0, eq), {}};
  const std::string rest = spec.substr(eq + 1);
  for (size_t p = 0; p <= rest.size();) {
    const size_t c = std::min(rest.find(',', p), rest.size());
    require(c > p, "--grid '" + spec + "': an empty value");
    a.values.push_back(rest.substr(p, c - p));
    p = c + 1;
  }
  return a;
}

std::string refit_dir(const std::string& out_dir) { return (fs::path(out_dir) / "refit").string(); }

TrainSummary refit(const TrainOptions& chosen, const TrainSummary& result, const std::string& out_dir) {
  const TrainOptions r = refit_options(chosen, result, out_dir);
  if (world().rank() == 0)
    std::fprintf(stderr,
                 "refit: the selected step %lld saw %.4g passes over the %lld training examples; training that many "
                 "over the training and validation examples together in %s\n",
                 (long long)result.best_step, r.run.train.epochs, (long long)result.train_examples, r.out_dir.c_str());
  return train(r);
}

SearchResult search(const TrainOptions& base, const std::vector<SearchAxis>& axes, bool refit_chosen, bool overwrite) {
  require(!axes.empty(), "a search needs at least one setting to vary");
  size_t total = 1;
  std::vector<std::string> keys;
  for (const auto& a : axes) {
    const std::string k = qualified(a.key);
    const auto dot = k.find('.');
    require(k.substr(0, dot) == "model" || k.substr(0, dot) == "train",
            "search setting '" + a.key + "': the section must be 'model' or 'train'");
    for (const auto& b : keys) require(b != k, "the search names '" + k + "' twice");
    require(!a.values.empty(), "search setting '" + a.key + "': no values");
    keys.push_back(k);
    total *= a.values.size();
    require(total <= 64, "a search of more than 64 settings is more than a small search");
  }
  require(!base.resume, "a search starts fresh runs; it cannot resume");
  require(holds_out_validation(base),
          "a search chooses by validation: give a validation file (--val) or a validation fraction above 0");
  if (refit_chosen)
    require(overwrite || !fs::exists(state_file(refit_dir(base.out_dir))),
            "'" + refit_dir(base.out_dir) + "' already holds a training run; pass --overwrite to refit again");

  // Every setting is built and checked before the first one trains: a bad value or a
  // directory in the way is an error now, not after hours of the settings before it.
  const nlohmann::json config = base.run.to_json();
  SearchResult res;
  res.refit = refit_chosen;
  for (size_t i = 0; i < total; ++i) {
    nlohmann::json j = config;
    SearchTrial t;
    size_t rest = i;
    for (size_t k = 0; k < axes.size(); ++k) {
      const std::string& v = axes[k].values[rest % axes[k].values.size()];
      rest /= axes[k].values.size();
      const std::string section = keys[k].substr(0, keys[k].find('.')), key = keys[k].substr(keys[k].find('.') + 1);
      j[section][key] = parse_setting(v, "search setting " + keys[k]);
      t.settings[keys[k]] = j[section][key];
      t.name += (t.name.empty() ? "" : "_") + key + "=" + v;
    }
    t.options = base;
    t.options.run.model = ModelConfig::from_json(j["model"], "search setting " + t.name + " [model]", /*open=*/true);
    t.options.run.train = TrainConfig::from_json(j["train"], "search setting " + t.name + " [train]");
    t.options.out_dir = (fs::path(base.out_dir) / t.name).string();
    t.options.score_test = false;  // the test set waits for the chosen setting
    require(overwrite || !fs::exists(state_file(t.options.out_dir)),
            "'" + t.options.out_dir + "' already holds a training run; pass --overwrite to search again");
    res.trials.push_back(std::move(t));
  }
  for (size_t i = 0; i < total; ++i) {
    SearchTrial& t = res.trials[i];
    if (world().rank() == 0) std::fprintf(stderr, "gmlp grid: setting %zu of %zu: %s\n", i + 1, total, t.name.c_str());
    t.summary = train(t.options);
    require(!t.summary.interrupted,
            "the search was interrupted during " + t.name + "; its run is in " + t.options.out_dir);
  }
  bool higher = true;
  for (size_t i = 0; i < res.trials.size(); ++i) {
    auto& t = res.trials[i];
    t.score = trial_score(t.summary, &higher);
    if (higher ? t.score > res.trials[res.chosen].score : t.score < res.trials[res.chosen].score) res.chosen = i;
  }
  res.metric = higher ? "val_acc" : "val_loss";
  const SearchTrial& best = res.trials[res.chosen];
  if (refit_chosen) {
    res.final = refit(best.options, best.summary, refit_dir(base.out_dir));
    require(!res.final.interrupted, "the search was interrupted during the refit; its run is in " +
                                        refit_dir(base.out_dir));
    res.model = model_file(refit_dir(base.out_dir));
  } else {
    // The chosen run, finished again with its test set scored: the search's only test score.
    TrainOptions fin = best.options;
    fin.resume = true;
    fin.score_test = true;
    fin.progress_bar = false;
    res.final = train(fin);
    res.model = best_model_file(fin.out_dir);
  }
  nlohmann::json rows = nlohmann::json::array();
  for (const auto& t : res.trials)
    rows.push_back({{"name", t.name}, {"settings", t.settings}, {res.metric, t.score},
                    {"best_step", t.summary.best_step}, {"steps", t.summary.steps},
                    {"early_stopped", t.summary.early_stopped}});
  res.table = {{"by", res.metric}, {"settings", rows}, {"chosen", best.name}, {"refit", refit_chosen},
               {"model", res.model}, {"test", res.final.report["test"]}};
  if (world().rank() == 0)
    write_file_atomic((fs::path(base.out_dir) / "grid.json").string(), res.table.dump(2) + "\n");
  return res;
}

}  // namespace gmlp
