// gmlp train: train a causal gMLP LM on a text file (default: the KJV corpus).
#include <atomic>
#include <cmath>
#include <csignal>
#include <cstdlib>
#include <cstdio>
#include <filesystem>

#include "commands.h"
#include "gmlp/error.h"
#include "gmlp/trainer.h"
#include "train/progress.h"

namespace gmlp::cli {
namespace {

struct TrainArgs {
  std::string config, data = "data/kjv.txt", out = "runs/default", tokenizer;
  std::vector<std::string> sets;
  // Only read when given on the command line (see run_train).
  std::string batch_size, lr, seed, eval_every, ckpt_every, log_every;
  int64_t steps = 0, stop_after = 0;
  bool resume = false, overwrite = false, no_progress = false;
};

std::atomic<int> g_signal{0};

// The first Ctrl-C asks the loop to checkpoint and stop after the current step; the
// handler then steps aside, so a second Ctrl-C ends the program at once.
void on_signal(int sig) {
  g_signal.store(sig);
  g_stop_requested.store(true);
  std::signal(sig, SIG_DFL);
}

int run_train(const TrainArgs& a, const CLI::App& cmd) {
  nlohmann::json j = a.config.empty() ? RunConfig{}.to_json() : RunConfig::load(a.config).to_json();
  for (const auto& s : a.sets) apply_set(j, s);
  if (!a.tokenizer.empty()) {
    require(a.tokenizer == "byte" || a.tokenizer == "char", "--tokenizer must be byte or char, got '" + a.tokenizer + "'");
    j["model"]["tokenizer"] = {{"kind", a.tokenizer}};
  }
  // Flags given on the command line override the config, whatever their value:
  // the config validation below judges them (so --steps -5 is an error, not ignored).
  auto& t = j["train"];
  for (const auto& [flag, key] : std::vector<std::pair<std::string, std::string>>{
           {"--steps", "steps"}, {"--batch-size", "batch_size"}, {"--lr", "lr"}, {"--seed", "seed"},
           {"--eval-every", "eval_every"}, {"--ckpt-every", "ckpt_every"}, {"--log-every", "log_every"}}) {
    const CLI::Option* o = cmd.get_option(flag);
    if (o->count() == 0) continue;
    const std::string v = o->as<std::string>();
    char* end = nullptr;
    const double x = std::strtod(v.c_str(), &end);
    require(!v.empty() && *end == '\0', flag + ": not a number: '" + v + "'");
    // Integral text stays an integer, so integer keys are range-checked, not truncated.
    if (v.find_first_of(".eE") == std::string::npos && x == std::floor(x))
      t[key] = nlohmann::json::parse(v[0] == '+' ? v.substr(1) : v, nullptr, false);
    else
      t[key] = x;
    if (t[key].is_discarded()) t[key] = x;
  }
  const std::string where = a.config.empty() ? std::string("options") : "config '" + a.config + "' with options";
  TrainOptions o;
  o.run.model = ModelConfig::from_json(j["model"], where + " [model]");
  o.run.train = TrainConfig::from_json(j["train"], where + " [train]");
  o.data_path = a.data;
  o.out_dir = a.out;
  o.resume = a.resume;
  o.extend_to = a.resume && cmd.get_option("--steps")->count() ? a.steps : 0;
  o.stop_after = a.stop_after;
  o.progress_bar = !a.no_progress;

  namespace fs = std::filesystem;
  if (a.resume) {
    // A resumed run is the saved run: options that would change it are refused rather
    // than silently ignored (only --steps may extend it).
    for (const char* opt : {"--config", "--data", "--tokenizer", "--set", "--batch-size", "--lr", "--seed",
                            "--eval-every", "--ckpt-every", "--log-every", "--overwrite"})
      require(cmd.get_option(opt)->count() == 0,
              std::string(opt) + " cannot be combined with --resume: the run continues with its saved settings");
    require(fs::exists(state_file(a.out)), "--resume: no training state in '" + a.out + "' (expected " +
                                               state_file(a.out) + ")");
  } else {
    require(a.overwrite || !fs::exists(state_file(a.out)),
            "'" + a.out + "' already holds a training run; pass --resume to continue it, --overwrite to start over, "
            "or choose another --out");
    if (!fs::exists(a.data) && a.data == "data/kjv.txt")
      throw Error("the default corpus data/kjv.txt is missing; fetch it with scripts/fetch_data.sh or pass --data FILE");
  }
  std::signal(SIGINT, on_signal);
  std::signal(SIGTERM, on_signal);
  const TrainSummary s = train(o);
  std::printf("%s after %lld steps (%s): train loss %.4f", s.interrupted ? "interrupted" : "finished",
              (long long)s.steps, format_duration(s.elapsed_s).c_str(), s.last_loss);
  if (s.val.tokens > 0) std::printf(", val loss %.4f nats/token, %.4f bits/byte", s.val.loss, s.val.bits_per_byte);
  std::printf(", %.0f tokens/s\n", s.tokens_per_s);
  if (fs::exists(model_file(a.out)))
    std::printf("checkpoint: %s (step %lld)\n", model_file(a.out).c_str(), (long long)s.steps);
  else
    std::printf("no checkpoint written (no training step was taken)\n");
  if (s.interrupted && fs::exists(state_file(a.out)))
    std::printf("resume with: gmlp train --out %s --resume\n", a.out.c_str());
  // A signal ends the process with the shell's 128 + signal number (130 for Ctrl-C).
  return s.interrupted && g_signal.load() ? 128 + g_signal.load() : 0;
}

}  // namespace

void add_train(CLI::App& app, int& exit_code) {
  auto a = std::make_shared<TrainArgs>();
  auto* c = app.add_subcommand("train", "Train a causal gMLP language model (defaults: the default config on data/kjv.txt)");
  c->add_option("--config", a->config, "JSON config file: {\"model\": {...}, \"train\": {...}}")->check(CLI::ExistingFile);
  c->add_option("--data", a->data, "Training text file; its tail is held out for validation")->capture_default_str();
  c->add_option("--out", a->out, "Run directory: checkpoints, metrics.jsonl, config.json")->capture_default_str();
  c->add_option("--tokenizer", a->tokenizer, "byte (vocab 256, the default) or char (built from the corpus)");
  c->add_option("--steps", a->steps, "Total training steps (with --resume: extend the run to this many)");
  c->add_option("--batch-size", a->batch_size, "Windows per step");
  c->add_option("--lr", a->lr, "Peak learning rate");
  c->add_option("--seed", a->seed, "Seed for init and data order");
  c->add_option("--eval-every", a->eval_every, "Steps between validation passes");
  c->add_option("--ckpt-every", a->ckpt_every, "Steps between checkpoints");
  c->add_option("--log-every", a->log_every, "Steps between metrics lines");
  c->add_option("--set", a->sets, "Override a config value: model.KEY=VALUE or train.KEY=VALUE (repeatable)");
  c->add_flag("--resume", a->resume, "Continue the run saved in --out exactly where it stopped");
  c->add_flag("--overwrite", a->overwrite, "Start a new run even if --out already holds one");
  c->add_option("--stop-after", a->stop_after, "Stop after this many steps as if interrupted (checkpoints first)");
  c->add_flag("--no-progress", a->no_progress, "Plain log lines instead of a live progress bar");
  c->callback([a, c, &exit_code] { exit_code = run_train(*a, *c); });
}

void apply_set(nlohmann::json& j, const std::string& kv) {
  const auto eq = kv.find('=');
  const auto dot = kv.find('.');
  require(eq != std::string::npos && dot != std::string::npos && dot < eq,
          "--set expects SECTION.KEY=VALUE (e.g. model.d_model=256), got '" + kv + "'");
  const std::string section = kv.substr(0, dot), key = kv.substr(dot + 1, eq - dot - 1), val = kv.substr(eq + 1);
  require(section == "model" || section == "train", "--set: section must be 'model' or 'train', got '" + section + "'");
  nlohmann::json v;
  try {
    v = nlohmann::json::parse(val);
  } catch (const nlohmann::json::exception&) {
    v = val;
  }
  j[section][key] = v;
}

std::string resolve_model_path(const std::string& arg) {
  namespace fs = std::filesystem;
  if (fs::is_directory(arg)) return model_file(arg);
  require(fs::exists(arg), "checkpoint '" + arg + "' does not exist");
  return arg;
}

}  // namespace gmlp::cli
