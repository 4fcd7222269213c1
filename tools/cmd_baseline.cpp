// gmlp baseline: multinomial naive Bayes on a labelled sentence set, the yardstick for
// the gMLP classifier (the KJV book groups of docs/data.md: about 0.72).
#include <chrono>
#include <cstdio>

#include "commands.h"
#include "gmlp/error.h"
#include "gmlp/labelled.h"
#include "gmlp/metrics.h"
#include "gmlp/naive_bayes.h"

namespace gmlp::cli {
namespace {

struct BaselineArgs {
  std::string train = "data/kjv_groups/train.tsv", test = "data/kjv_groups/test.tsv";
  double alpha = 1.0;
  bool json = false;
};

int run_baseline(const BaselineArgs& a) {
  const auto t0 = std::chrono::steady_clock::now();
  const LabelledSet train = load_labelled(a.train);
  const LabelledSet test = load_labelled(a.test, train.class_names);
  NaiveBayes nb;
  nb.fit(train, a.alpha);
  std::vector<int32_t> pred(test.size());
  for (size_t i = 0; i < test.size(); ++i) pred[i] = nb.predict(test.texts[i]);
  const auto m = confusion_matrix(test.labels, pred, int(train.class_names.size()));
  const double acc = confusion_accuracy(m);
  int64_t correct = 0;
  for (size_t i = 0; i < test.size(); ++i) correct += pred[i] == test.labels[i];
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  if (a.json) {
    nlohmann::json j = {{"model", "naive_bayes"},     {"train", a.train},
                        {"test", a.test},             {"alpha", a.alpha},
                        {"train_examples", train.size()}, {"test_examples", test.size()},
                        {"vocabulary", nb.vocabulary_size()}, {"accuracy", acc},
                        {"correct", correct},         {"confusion", confusion_json(m, train.class_names)}};
    std::printf("%s\n", j.dump().c_str());
    return 0;
  }
  std::printf("naive Bayes (multinomial, lowercased words, alpha %g): %zu training sentences, %zu classes, %zu words\n",
              a.alpha, train.size(), train.class_names.size(), nb.vocabulary_size());
  std::printf("%s: accuracy %.4f (%lld / %zu) in %.1fs\n\n", a.test.c_str(), acc, (long long)correct, test.size(),
              secs);
  std::printf("%s", format_confusion(m, train.class_names).c_str());
  return 0;
}

}  // namespace

void add_baseline(CLI::App& app, int& exit_code) {
  auto a = std::make_shared<BaselineArgs>();
  auto* c = app.add_subcommand("baseline", "Naive Bayes sentence classifier: accuracy and confusion matrix on a test set");
  c->add_option("--train", a->train, "Training set, \"label<TAB>text\" lines")->capture_default_str();
  c->add_option("--test", a->test, "Test set, same format and classes")->capture_default_str();
  c->add_option("--alpha", a->alpha, "Additive (Laplace) smoothing")->capture_default_str()->check(CLI::PositiveNumber);
  c->add_flag("--json", a->json, "One JSON object instead of the table");
  c->callback([a, &exit_code] { exit_code = run_baseline(*a); });
}

}  // namespace gmlp::cli
