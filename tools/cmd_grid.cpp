// gmlp finetune/train --grid: the search of gmlp/search.h, with its table on stdout.
#include <cstdio>

#include "commands.h"
#include "gmlp/comm.h"
#include "gmlp/search.h"

namespace gmlp::cli {

int run_grid(const std::vector<std::string>& specs, const TrainOptions& base, bool overwrite, bool refit) {
  std::vector<SearchAxis> axes;
  for (const auto& s : specs) axes.push_back(parse_search_axis(s));
  const SearchResult r = search(base, axes, refit, overwrite);
  if (world().rank() != 0) return 0;  // one table, from rank 0
  std::printf("%-36s %10s %10s %8s\n", "setting", r.metric.c_str(), "best step", "steps");
  for (size_t i = 0; i < r.trials.size(); ++i) {
    const auto& t = r.trials[i];
    std::printf("%-36s %10.4f %10lld %8lld%s\n", t.name.c_str(), t.score, (long long)t.summary.best_step,
                (long long)t.summary.steps, i == r.chosen ? "  <- chosen" : "");
  }
  if (refit) print_summary(r.final, refit_dir(base.out_dir), "classify");
  const auto& test = r.table["test"];
  if (test.is_object())
    std::printf("chosen %s%s: test accuracy %.4f, macro-F1 %.4f (naive Bayes %.4f, majority %.4f)\n",
                r.trials[r.chosen].name.c_str(), refit ? ", refitted" : "", test["accuracy"].get<double>(),
                test["macro_f1"].get<double>(), test["baselines"]["naive_bayes"]["accuracy"].get<double>(),
                test["baselines"]["majority"]["accuracy"].get<double>());
  std::printf("table: %s/grid.json; chosen model: %s\n", base.out_dir.c_str(), r.model.c_str());
  return 0;
}

}  // namespace gmlp::cli
