// gmlp train: train any gMLP task (default: the causal LM on the KJV corpus), and
// gmlp finetune: sentence classification from a masked-LM checkpoint or from scratch.
#include <atomic>
#include <cmath>
#include <unistd.h>

#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>

#include "commands.h"
#include "gmlp/checkpoint.h"
#include "gmlp/comm.h"
#include "gmlp/error.h"
#include "gmlp/files.h"
#include "gmlp/safetensors.h"
#include "gmlp/search.h"
#include "gmlp/tokenizer.h"
#include "gmlp/trainer.h"
#include "gmlp/progress.h"

namespace gmlp::cli {
namespace {

struct TrainArgs {
  std::string config, data, test, val, out = "runs/default", tokenizer, task, init_from;
  std::vector<std::string> sets, grid;
  // Only read when given on the command line (see run_train).
  std::string batch_size, grad_accum, lr, seed, eval_every, ckpt_every, log_every, val_fraction, epochs, patience;
  int64_t steps = 0, stop_after = 0;
  bool resume = false, overwrite = false, no_progress = false, shard_optimizer = false, refit = false;
  std::string device = "auto";
  std::string precision = "fp32";
};

std::atomic<int> g_signal{0};

// The first Ctrl-C (SIGTERM, SIGUSR1) asks the loop to checkpoint and stop after the
// current step; the handler then steps aside, so a second Ctrl-C ends the program at
// once. Under an MPI launcher the handler stays: mpirun answers Ctrl-C by sending
// SIGTERM to every rank (which the terminal may already have sent SIGINT) and SIGKILL a
// second later, so a later signal is not the user's second Ctrl-C (docs/distributed.md).
// Under a launcher each rank says it got the signal (async-signal-safe write(2) of a
// line prepared beforehand): when a rank dies, mpirun signals the others.
std::string g_rank_notice[3];
bool g_under_launcher = false;

void on_signal(int sig) {
  if (g_signal.load() == 0) g_signal.store(sig);
  g_stop_requested.store(true);
  if (!g_under_launcher) {
    std::signal(sig, SIG_DFL);
    return;
  }
  const std::string& m = g_rank_notice[sig == SIGINT ? 0 : sig == SIGTERM ? 1 : 2];
  if (::write(STDERR_FILENO, m.data(), m.size()) < 0) {
  }
}

void install_signal_handlers() {
  g_under_launcher = world().size() > 1;
  const int sigs[3] = {SIGINT, SIGTERM, SIGUSR1};  // mpirun forwards SIGUSR1; Slurm's --signal sends it
  for (int i = 0; i < 3; ++i) {
    g_rank_notice[i] = "gmlp: rank " + std::to_string(world().rank()) + ": " + strsignal(sigs[i]) +
                       ", stopping after the current step\n";
    std::signal(sigs[i], on_signal);
  }
}

// The default data of each task (docs/data.md), fetched by scripts/fetch_data.sh and
// scripts/fetch_vision.sh.
std::string default_data(const std::string& task) {
  if (task == "mlm") return "data/kjv_groups/pretrain.txt";
  if (task == "classify") return "data/kjv_groups/train.tsv";
  if (task == "vision") return "data/mnist";
  return "data/kjv.txt";
}

// The run's config as JSON: base (the built-in defaults for train; a checkpoint's
// architecture for finetune), then --config, --task, --set, --tokenizer and the
// numeric flags, in that order of precedence.
nlohmann::json assemble_config(const TrainArgs& a, const CLI::App& cmd, nlohmann::json base) {
  nlohmann::json j = a.config.empty() ? std::move(base) : RunConfig::load(a.config).to_json();
  if (!a.task.empty()) j["model"]["task"] = a.task;
  for (const auto& s : a.sets) apply_set(j, s);
  if (!a.tokenizer.empty()) {
    if (a.tokenizer == "byte" || a.tokenizer == "char") {
      j["model"]["tokenizer"] = {{"kind", a.tokenizer}};
    } else {
      // A tokenizer file written by `gmlp tokenizer train`.
      require(std::filesystem::exists(a.tokenizer),
              "--tokenizer must be byte, char or a tokenizer JSON file; '" + a.tokenizer + "' is none of these");
      j["model"]["tokenizer"] = parse_json(read_file(a.tokenizer), "--tokenizer '" + a.tokenizer + "'");
    }
    // The tokenizer decides the vocabulary (a char set still to be built: the corpus).
    const auto& tj = j["model"]["tokenizer"];
    if (!(tj.is_object() && tj.contains("kind") && tj["kind"] == "char" && !tj.contains("chars"))) {
      try {
        j["model"]["vocab_size"] = tokenizer_from_json(tj)->vocab_size();
      } catch (const Error& e) {
        throw Error("--tokenizer '" + a.tokenizer + "': " + e.what());
      }
    }
  }
  // The built-in defaults' vocabulary and tokenizer are a text model's.
  if (j["model"].value("task", std::string("causal_lm")) == "vision") {
    j["model"].erase("tokenizer");
    j["model"]["vocab_size"] = 0;
  }
  // Flags given on the command line override the config, whatever their value:
  // the config validation below judges them (so --steps -5 is an error, not ignored).
  auto& t = j["train"];
  for (const auto& [flag, key] : std::vector<std::pair<std::string, std::string>>{{"--steps", "steps"},
                                                                                  {"--batch-size", "batch_size"},
                                                                                  {"--grad-accum", "grad_accum"},
                                                                                  {"--lr", "lr"},
                                                                                  {"--seed", "seed"},
                                                                                  {"--eval-every", "eval_every"},
                                                                                  {"--ckpt-every", "ckpt_every"},
                                                                                  {"--log-every", "log_every"},
                                                                                  {"--val-fraction", "val_fraction"},
                                                                                  {"--epochs", "epochs"},
                                                                                  {"--patience", "patience"}}) {
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
  return j;
}

// The test set's scores next to the baselines, from report.json.
void print_test_report(const nlohmann::json& r) {
  if (!r.is_object() || !r["test"].is_object()) return;
  const auto& t = r["test"];
  std::printf("test (%lld texts, scored once with the selected model): accuracy %.4f, macro-F1 %.4f; "
              "naive Bayes %.4f / %.4f; majority class %.4f / %.4f\n",
              (long long)t["examples"].get<int64_t>(), t["accuracy"].get<double>(), t["macro_f1"].get<double>(),
              t["baselines"]["naive_bayes"]["accuracy"].get<double>(),
              t["baselines"]["naive_bayes"]["macro_f1"].get<double>(),
              t["baselines"]["majority"]["accuracy"].get<double>(), t["baselines"]["majority"]["macro_f1"].get<double>());
  for (const auto& c : t["per_class"])
    std::printf("  %-24s precision %.3f  recall %.3f  f1 %.3f  (%lld)\n", c["class"].get<std::string>().c_str(),
                c["precision"].get<double>(), c["recall"].get<double>(), c["f1"].get<double>(),
                (long long)c["support"].get<int64_t>());
}

}  // namespace

void print_summary(const TrainSummary& s, const std::string& out, const std::string& task) {
  std::printf("%s after %lld steps (%s): train loss %.4f", s.interrupted ? "interrupted" : "finished",
              (long long)s.steps, format_duration(s.elapsed_s).c_str(), s.last_loss);
  const auto& v = s.val_metrics;
  if (v.contains("val_bpb")) {
    std::printf(", val loss %.4f nats/token, %.4f bits/byte", v["val_loss"].get<double>(), v["val_bpb"].get<double>());
  } else if (v.contains("val_ppl")) {
    std::printf(", val masked-token loss %.4f nats, perplexity %.3f", v["val_loss"].get<double>(),
                v["val_ppl"].get<double>());
  } else if (v.contains("val_acc")) {
    std::printf(", %s loss %.4f, accuracy %.4f (%lld examples)", task == "vision" ? "test" : "validation",
                v["val_loss"].get<double>(), v["val_acc"].get<double>(), (long long)v["val_examples"].get<int64_t>());
  }
  std::printf(", %.0f %s/s\n", s.tokens_per_s, task == "vision" ? "images" : task == "classify" ? "sentences" : "tokens");
  // What PyTorch users read from torch.cuda.max_memory_allocated (docs/gpu.md "Memory").
  if (s.device_peak_mb > 0) std::printf("device memory: %.1f MiB at the most\n", s.device_peak_mb);
  if (s.early_stopped) std::printf("stopped early: no better validation score in the last evaluations\n");
  if (s.best_step > 0) std::printf("selected: %s (step %lld, by validation)\n", best_model_file(out).c_str(),
                                   (long long)s.best_step);
  print_test_report(s.report);
  // The weights' average (train.model_ema): its last evaluation, its test score, its file.
  if (v.contains("ema_val_acc"))
    std::printf("average of the weights: %s loss %.4f, accuracy %.4f\n", task == "vision" ? "test" : "validation",
                v["ema_val_loss"].get<double>(), v["ema_val_acc"].get<double>());
  else if (v.contains("ema_val_loss"))
    std::printf("average of the weights: val loss %.4f\n", v["ema_val_loss"].get<double>());
  if (s.report.contains("ema") && s.report["ema"]["test"].is_object())
    std::printf("average of the weights, test: accuracy %.4f, macro-F1 %.4f\n",
                s.report["ema"]["test"]["accuracy"].get<double>(), s.report["ema"]["test"]["macro_f1"].get<double>());
  if (std::filesystem::exists(ema_model_file(out)))
    std::printf("average of the weights: %s (step %lld)\n", ema_model_file(out).c_str(), (long long)s.steps);
  if (std::filesystem::exists(model_file(out)))
    std::printf("checkpoint: %s (step %lld)\n", model_file(out).c_str(), (long long)s.steps);
  else
    std::printf("no checkpoint written (no training step was taken)\n");
  if (s.interrupted && std::filesystem::exists(state_file(out)))
    std::printf("resume with: gmlp train --out %s --resume\n", out.c_str());
}

namespace {

int run_train(const TrainArgs& a, const CLI::App& cmd, nlohmann::json base) {
  nlohmann::json j = assemble_config(a, cmd, std::move(base));
  const std::string task = j["model"].value("task", std::string("causal_lm"));
  const std::string data = a.data.empty() ? default_data(task) : a.data;
  if (!a.resume && !std::filesystem::exists(data) && a.data.empty())
    throw Error("the default data " + data + " for task \"" + task + "\" is missing; fetch it with " +
                (task == "vision" ? "scripts/fetch_vision.sh" : "scripts/fetch_data.sh") + " or pass --data");
  const std::string where = a.config.empty() ? std::string("options") : "config '" + a.config + "' with options";
  TrainOptions o;
  // A resumed run keeps its settings, but may take its batches in other pieces: checked
  // against the run's batch when the run is read (the defaults' batch is not the run's).
  if (a.resume && cmd.get_option("--grad-accum")->count()) {
    const nlohmann::json v = j["train"]["grad_accum"];
    j["train"].erase("grad_accum");
    require(v.is_number_integer() && v.get<int64_t>() >= 1 && v.get<int64_t>() <= INT32_MAX,
            "--grad-accum must be a positive integer (at most 2^31 - 1), got " + v.dump());
    o.grad_accum = v.get<int>();
  }
  // What the data decides (classes, a vision model's image shape) may stay open here:
  // the task fills it when it loads the data (make_task).
  o.run.model = ModelConfig::from_json(j["model"], where + " [model]", /*open=*/true);
  o.run.train = TrainConfig::from_json(j["train"], where + " [train]");
  o.data_path = data;
  o.test_path = a.test.empty() && task == "classify" && a.data.empty() ? "data/kjv_groups/test.tsv" : a.test;
  o.val_path = a.val;
  o.init_from = a.init_from.empty() ? "" : resolve_model_path(a.init_from);
  o.out_dir = a.out;
  o.resume = a.resume;
  o.extend_to = a.resume && cmd.get_option("--steps")->count() ? a.steps : 0;

  o.stop_after = a.stop_after;
  o.progress_bar = !a.no_progress;
  o.device = choose_device(a.device, a.precision);
  o.shard_optimizer = a.shard_optimizer;

  namespace fs = std::filesystem;
  if (a.refit) {
    // Checked before anything trains: a refit needs something chosen by validation.
    require(!a.resume, "--refit cannot be combined with --resume; a refit interrupted in OUT/refit resumes with "
                       "--out OUT/refit --resume");
    require(task == "classify", "--refit is for text classification (finetune, or train --task classify); the task "
                                "is \"" + task + "\"");
    require(holds_out_validation(o),
            "--refit trains again on the validation texts after choosing by them: give --val FILE or a "
            "--val-fraction above 0");
    // Every path to run_refit passes here.
    require(a.overwrite || !fs::exists(state_file(refit_dir(a.out))),
            "'" + refit_dir(a.out) + "' already holds a training run; pass --overwrite to refit again");
    o.score_test = false;  // the test set waits for the refit model: scored once
  }
  if (a.resume) {
    // A resumed run is the saved run: options that would change it are refused rather
    // than silently ignored (only --steps may extend it).
    for (const char* opt : {"--config", "--data", "--tokenizer", "--set", "--batch-size", "--lr", "--seed",
                            "--eval-every", "--ckpt-every", "--log-every", "--overwrite", "--task", "--test",
                            "--init-from", "--val", "--val-fraction", "--epochs", "--patience", "--grid"})
      require(cmd.get_option(opt)->count() == 0,
              std::string(opt) + " cannot be combined with --resume: the run continues with its saved settings");
    require(fs::exists(state_file(a.out)), "--resume: no training state in '" + a.out + "' (expected " +
                                               state_file(a.out) + ")");
  } else if (!a.grid.empty()) {
    install_signal_handlers();
    return run_grid(a.grid, o, a.overwrite, a.refit);
  } else {
    require(a.overwrite || !fs::exists(state_file(a.out)),
            "'" + a.out + "' already holds a training run; pass --resume to continue it, --overwrite to start over, "
            "or choose another --out");
  }
  install_signal_handlers();
  const TrainSummary s = train(o);
  if (world().rank() == 0) print_summary(s, a.out, task);
  TrainSummary last = s;
  if (a.refit && !s.interrupted) {
    last = refit(o, s, refit_dir(a.out));
    if (world().rank() == 0) print_summary(last, refit_dir(a.out), "classify");
  }
  // A signal ends the process with the shell's 128 + signal number (130 for Ctrl-C).
  return last.interrupted && g_signal.load() ? 128 + g_signal.load() : 0;
}

// The options every training command shares: budget, schedule, cadence, selection, resumption.
void add_run_options(CLI::App* c, TrainArgs& a, const std::string& batch_help, const std::string& seed_help) {
  c->add_option("--steps", a.steps, "Total training steps (with --resume: extend the run to this many)");
  c->add_option("--epochs", a.epochs, "Budget in passes over the training examples (replaces --steps)");
  c->add_option("--val-fraction", a.val_fraction,
                "Share of the training data held out for validation (model selection, early stopping)");
  c->add_option("--patience", a.patience, "Stop after this many evaluations without a better validation score");
  c->add_option("--grid", a.grid,
                "Search: KEY=V1,V2,... (repeatable; e.g. lr=1e-4,3e-4 epochs=3,5): every combination in its own "
                "subdirectory of --out, chosen by validation, only the chosen one scored on the test set");
  c->add_option("--batch-size", a.batch_size, batch_help);
  c->add_option("--grad-accum", a.grad_accum,
                "Gradient accumulation: take each step's batch (each process's rows) in this many pieces, their "
                "gradients added before the update: the memory of a batch this many times smaller, the same run; "
                "allowed with --resume");
  c->add_option("--lr", a.lr, "Peak learning rate");
  c->add_option("--seed", a.seed, seed_help);
  c->add_option("--eval-every", a.eval_every, "Steps between held-out evaluations");
  c->add_option("--ckpt-every", a.ckpt_every, "Steps between checkpoints");
  c->add_option("--log-every", a.log_every, "Steps between metrics lines");
  c->add_option("--set", a.sets, "Override a config value: model.KEY=VALUE or train.KEY=VALUE (repeatable)");
  c->add_flag("--resume", a.resume, "Continue the run saved in --out exactly where it stopped");
  c->add_flag("--overwrite", a.overwrite, "Start a new run even if --out already holds one");
  add_device_option(c, a.device, a.precision);
  c->add_flag("--shard-optimizer", a.shard_optimizer,
              "Under mpirun: each rank keeps AdamW's moments for 1/P of the parameters (ZeRO-1); the same results");
  c->add_option("--stop-after", a.stop_after, "Stop after this many steps as if interrupted (checkpoints first)");
  c->add_flag("--refit", a.refit,
              "Classification: after choosing by validation (one run or --grid), train the chosen settings again on "
              "the training and validation texts together, for as many passes as the chosen checkpoint had seen, in "
              "OUT/refit; the test set is scored with that model only");
  c->add_flag("--no-progress", a.no_progress, "Plain log lines instead of a live progress bar");
}

}  // namespace

void add_train(CLI::App& app, int& exit_code) {
  auto a = std::make_shared<TrainArgs>();
  auto* c = app.add_subcommand("train", "Train a gMLP model (defaults: the causal LM on data/kjv.txt)");
  c->add_option("--config", a->config, "JSON config file: {\"model\": {...}, \"train\": {...}}")->check(CLI::ExistingFile);
  c->add_option("--task", a->task, "causal_lm (default), mlm, classify or vision (sets model.task)");
  c->add_option("--data", a->data,
                "Training data: a text file (causal_lm, mlm: its tail is held out), a label<TAB>text file "
                "(classify), an IDX folder (vision). Default per task: data/kjv.txt, data/kjv_groups/pretrain.txt, "
                "data/kjv_groups/train.tsv, data/mnist");
  c->add_option("--test", a->test, "classify: the labelled test file (default with the default data: "
                                   "data/kjv_groups/test.tsv)");
  c->add_option("--val", a->val, "classify: a labelled validation file (instead of --val-fraction of --data)");
  c->add_option("--init-from", a->init_from, "Initialise matching tensors from this checkpoint (a new head)");
  c->add_option("--out", a->out, "Run directory: checkpoints, metrics.jsonl, config.json")->capture_default_str();
  c->add_option("--tokenizer", a->tokenizer,
                "byte (vocab 256, the default), char (built from the corpus) or a tokenizer JSON file "
                "(gmlp tokenizer train)");
  add_run_options(c, *a, "Examples (windows, sentences, images) per step", "Seed for init and data order");
  c->callback([a, c, &exit_code] { exit_code = run_train(*a, *c, RunConfig{}.to_json()); });
}

void add_finetune(CLI::App& app, int& exit_code) {
  auto a = std::make_shared<TrainArgs>();
  auto scratch = std::make_shared<bool>(false);
  a->out = "runs/finetune";
  auto* c = app.add_subcommand("finetune",
                               "Train a sentence classifier (default: KJV book groups), its encoder taken from a "
                               "masked-LM checkpoint (--init-from) or trained from scratch");
  c->add_option("--init-from", a->init_from,
                "Masked-LM checkpoint (file or run directory): its architecture, tokenizer and encoder weights");
  c->add_flag("--scratch", *scratch, "With --init-from: the same architecture and tokenizer, randomly initialised");
  c->add_option("--config", a->config, "JSON config instead of --init-from's architecture (a from-scratch run)")
      ->check(CLI::ExistingFile);
  c->add_option("--data", a->data, "label<TAB>text training file (default data/kjv_groups/train.tsv)");
  c->add_option("--test", a->test, "label<TAB>text test file, scored once at the end with the selected model "
                                   "(default with the default data: data/kjv_groups/test.tsv)");
  c->add_option("--val", a->val, "label<TAB>text validation file (default: --val-fraction of --data)");
  c->add_option("--out", a->out, "Run directory")->capture_default_str();
  add_run_options(c, *a, "Sentences per step", "Seed for the head's init and the data order");
  // Hidden so that run_train's option checks find them.
  c->add_option("--task", a->task)->group("");
  c->add_option("--tokenizer", a->tokenizer)->group("");
  c->callback([a, c, scratch, &exit_code] {
    TrainArgs args = *a;
    args.task = "classify";
    nlohmann::json base = RunConfig{}.to_json();
    base["train"] = finetune_config("")["train"];
    if (!a->resume) {
      require(!a->init_from.empty() || !a->config.empty(),
              "finetune needs --init-from CHECKPOINT (optionally with --scratch) or --config FILE");
      require(!*scratch || !a->init_from.empty(), "--scratch goes with --init-from (whose architecture it copies)");
      base = finetune_config(a->init_from);
      if (*scratch) args.init_from.clear();
    }
    exit_code = run_train(args, *c, base);
  });
}

void apply_set(nlohmann::json& j, const std::string& kv) {
  const auto eq = kv.find('=');
  const auto dot = kv.find('.');
  require(eq != std::string::npos && dot != std::string::npos && dot < eq,
          "--set expects SECTION.KEY=VALUE (e.g. model.d_model=256), got '" + kv + "'");
  const std::string section = kv.substr(0, dot), key = kv.substr(dot + 1, eq - dot - 1), val = kv.substr(eq + 1);
  require(section == "model" || section == "train", "--set: section must be 'model' or 'train', got '" + section + "'");
  j[section][key] = parse_setting(val, "--set " + section + "." + key);
}

// GMLP_DEVICE replaces the default "auto": a job script or a test suite can keep every
// command on one device without editing each command line (the test runner sets cpu,
// because its bit-for-bit resume checks hold on the CPU and not on a GPU, whose
// embedding backward sums with atomics).
void add_device_option(CLI::App* c, std::string& device, std::string& precision) {
  if (const char* env = std::getenv("GMLP_DEVICE"); env && *env) device = env;
  c->add_option("--device", device,
                "cpu, cuda or auto (cuda when built with CUDA and a GPU is visible); the default is "
                "the environment variable GMLP_DEVICE where it is set")
      ->capture_default_str();
  c->add_option("--precision", precision,
                "Matrix products in fp32, or bf16 (mixed precision: bf16 inputs, fp32 accumulation, weights and "
                "optimizer) on GPUs and on CPUs with AVX512-BF16 or AMX; GMLP_CPU_BF16=emulate gives bf16's "
                "rounding on any CPU, at fp32's speed")
      ->capture_default_str();
}

Device choose_device(const std::string& device, const std::string& precision) {
  const Precision p = parse_precision(precision);  // a misspelling fails before any device is opened
  Device d;
  try {
    d = parse_device(device);
  } catch (const Error& e) {
    const char* env = std::getenv("GMLP_DEVICE");
    if (env && device == env) throw Error(std::string(e.what()) + " (the value of the environment variable GMLP_DEVICE)");
    throw;
  }
  use_precision(d, p);
  return d;
}

}  // namespace gmlp::cli
