// gmlp ablate: the paper's Table 3 at our scale. Trains each s(Z) variant (and aMLP)
// with the same n, d, d_ffn, data and budget on the masked-LM task, then prints
// perplexity and parameters, and writes the results as JSON.
#include <chrono>
#include <cstdio>
#include <filesystem>

#include "commands.h"
#include "gmlp/checkpoint.h"
#include "gmlp/error.h"
#include "gmlp/files.h"
#include "gmlp/safetensors.h"
#include "gmlp/trainer.h"

namespace gmlp::cli {
namespace {

struct AblateArgs {
  std::string config, data = "data/kjv_groups/pretrain.txt", out = "runs/ablate", json_out;
  std::vector<std::string> variants = {"none", "linear", "additive", "multiplicative", "split", "amlp"};
  std::vector<std::string> sets;
  int64_t steps = 0;
  int d_attn = 32;
  bool no_progress = false;
  std::string device = "auto";
  std::string precision = "fp32";
};

// The paper's labels for each variant.
std::string label_of(const std::string& v) {
  if (v == "none") return "none: s(Z) = Z (no token mixing)";
  if (v == "linear") return "linear: f(Z)";
  if (v == "additive") return "additive: Z + f(Z)";
  if (v == "multiplicative") return "multiplicative: Z * f(Z)";
  if (v == "split") return "split: Z1 * f(Z2) (gMLP)";
  return "split + tiny attention (aMLP)";
}

int run_ablate(const AblateArgs& a) {
  nlohmann::json base = a.config.empty() ? RunConfig{}.to_json() : RunConfig::load(a.config).to_json();
  base["model"]["task"] = "mlm";
  for (const auto& s : a.sets) apply_set(base, s);
  if (a.steps > 0) base["train"]["steps"] = a.steps;
  for (const auto& v : a.variants)
    require(v == "none" || v == "linear" || v == "additive" || v == "multiplicative" || v == "split" || v == "amlp",
            "--variants: unknown variant '" + v + "' (none, linear, additive, multiplicative, split, amlp)");
  require(std::filesystem::exists(a.data), "ablation data '" + a.data + "' is missing (scripts/fetch_data.sh makes "
                                           "data/kjv_groups/pretrain.txt)");
  nlohmann::json results = nlohmann::json::array();
  for (const auto& v : a.variants) {
    nlohmann::json j = base;
    j["model"]["sgu"] = v == "amlp" ? "split" : v;
    j["model"]["d_attn"] = v == "amlp" ? a.d_attn : 0;
    TrainOptions o;
    o.run.model = ModelConfig::from_json(j["model"], "ablation [" + v + "]");
    o.run.train = TrainConfig::from_json(j["train"], "ablation [" + v + "]");
    o.data_path = a.data;
    o.out_dir = (std::filesystem::path(a.out) / v).string();
    o.progress_bar = !a.no_progress;
    o.device = choose_device(a.device, a.precision);
    std::fprintf(stderr, "== %s\n", label_of(v).c_str());
    const TrainSummary s = train(o);
    require(!s.interrupted, "ablation interrupted during '" + v + "'");
    require(s.val_metrics.contains("val_ppl"), "ablation: no validation perplexity for '" + v + "'");
    // The trained checkpoint's config holds the vocabulary the task settled on.
    const ModelConfig trained = read_model_config(SafeTensorsFile::load(model_file(o.out_dir)));
    size_t params = 0;
    for (const auto& p : param_layout(trained)) params += p.size;
    results.push_back({{"variant", v},
                       {"label", label_of(v)},
                       {"params", params},
                       {"val_ppl", s.val_metrics["val_ppl"]},
                       {"val_loss", s.val_metrics["val_loss"]},
                       {"steps", s.steps},
                       {"train_s", s.elapsed_s}});
  }
  std::printf("\nmasked-LM perplexity after %lld steps each (lower is better), data %s\n\n",
              (long long)base["train"]["steps"].get<int64_t>(), a.data.c_str());
  std::printf("| %-36s | %10s | %10s | %8s |\n", "s(Z)", "params", "perplexity", "time");
  std::printf("|%s|%s|%s|%s|\n", std::string(38, '-').c_str(), std::string(12, '-').c_str(),
              std::string(12, '-').c_str(), std::string(10, '-').c_str());
  for (const auto& r : results)
    std::printf("| %-36s | %10lld | %10.3f | %7.0fs |\n", r["label"].get<std::string>().c_str(),
                (long long)r["params"].get<int64_t>(), r["val_ppl"].get<double>(), r["train_s"].get<double>());
  const nlohmann::json doc = {{"config", base}, {"data", a.data}, {"results", results}};
  const std::string json_path = a.json_out.empty() ? (std::filesystem::path(a.out) / "ablation.json").string()
                                                   : a.json_out;
  write_file_atomic(json_path, doc.dump(2) + "\n");
  std::printf("\nresults: %s\n", json_path.c_str());
  return 0;
}

}  // namespace

void add_ablate(CLI::App& app, int& exit_code) {
  auto a = std::make_shared<AblateArgs>();
  auto* c = app.add_subcommand("ablate", "Train each s(Z) variant and aMLP on the masked-LM task with one budget; "
                                         "print perplexity and parameters (the paper's Table 3)");
  c->add_option("--config", a->config, "Base config (model and train); task is set to mlm")->check(CLI::ExistingFile);
  c->add_option("--data", a->data, "Masked-LM corpus")->capture_default_str();
  c->add_option("--out", a->out, "Folder for one run per variant and ablation.json")->capture_default_str();
  c->add_option("--json", a->json_out, "Where to write the results JSON (default OUT/ablation.json)");
  c->add_option("--variants", a->variants, "Subset/order of: none linear additive multiplicative split amlp")
      ->capture_default_str();
  c->add_option("--steps", a->steps, "Training steps per variant (default: the config's)");
  c->add_option("--d-attn", a->d_attn, "aMLP's attention size")->capture_default_str();
  add_device_option(c, a->device, a->precision);
  c->add_option("--set", a->sets, "Override a config value: model.KEY=VALUE or train.KEY=VALUE (repeatable)");
  c->add_flag("--no-progress", a->no_progress, "Plain log lines instead of a live progress bar");
  c->callback([a, &exit_code] { exit_code = run_ablate(*a); });
}

}  // namespace gmlp::cli
