// gmlp bench: training, inference and generation speed of a config on this machine,
// with the sgemm peak measured in the same process so MFU means something here.
#include <omp.h>
#include <sys/resource.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>

#include "commands.h"
#include "gmlp/decoder.h"
#include "gmlp/error.h"
#include "gmlp/generate.h"
#include "gmlp/optimizer.h"
#include "ops/ops.h"

namespace gmlp::cli {
namespace {

using Clock = std::chrono::steady_clock;

struct BenchArgs {
  std::string config, mode = "train";
  std::vector<std::string> sets;
  int batch_size = 0, warmup = 3, repeats = 10, gen_tokens = 0, threads = 0;
  bool json = false;
};

struct Stats {
  double median = 0, min = 0, max = 0;
};

Stats stats_of(std::vector<double> t) {
  std::sort(t.begin(), t.end());
  const size_t n = t.size();
  return {n % 2 ? t[n / 2] : 0.5 * (t[n / 2 - 1] + t[n / 2]), t.front(), t.back()};
}

// Times `fn` `repeats` times after `warmup` untimed runs.
template <typename F>
Stats time_it(int warmup, int repeats, F&& fn) {
  for (int i = 0; i < warmup; ++i) fn();
  std::vector<double> t;
  for (int i = 0; i < repeats; ++i) {
    const auto t0 = Clock::now();
    fn();
    t.push_back(std::chrono::duration<double>(Clock::now() - t0).count());
  }
  return stats_of(t);
}

// The best sgemm rate this process gets at the thread count in force: square products
// large enough for OpenBLAS to reach its steady state.
double sgemm_peak_gflops() {
  double best = 0;
  for (int n : {1024, 2048}) {
    std::vector<float> a(size_t(n) * n, 1e-3f), b(size_t(n) * n, 1e-3f), c(size_t(n) * n);
    const Stats s = time_it(1, 3, [&] { ops::gemm(false, false, n, n, n, 1.f, a.data(), n, b.data(), n, 0.f, c.data(), n); });
    best = std::max(best, 2.0 * n * n * double(n) / s.min / 1e9);
  }
  return best;
}

double peak_rss_mb() {
  rusage ru{};
  getrusage(RUSAGE_SELF, &ru);
  return double(ru.ru_maxrss) / 1024.0;  // KB on Linux
}

int run_bench(const BenchArgs& a) {
  require(a.mode == "train" || a.mode == "infer" || a.mode == "generate",
          "--mode must be train, infer or generate, got '" + a.mode + "'");
  require(a.repeats >= 1 && a.warmup >= 0, "--repeats must be >= 1 and --warmup >= 0");
  require(a.batch_size >= 0 && a.gen_tokens >= 0, "--batch-size and --gen-tokens must be positive when given");
  RunConfig rc = a.config.empty() ? RunConfig{} : RunConfig::load(a.config);
  nlohmann::json j = rc.to_json();
  for (const auto& s : a.sets) apply_set(j, s);
  rc.model = ModelConfig::from_json(j["model"], "bench config [model]");
  rc.train = TrainConfig::from_json(j["train"], "bench config [train]");
  // A char tokenizer's vocabulary comes from a corpus; benchmark it at the size of the
  // annotated implementation's character set.
  if (rc.model.token_input() && rc.model.tokenizer.value("kind", "byte") == "char" &&
      !rc.model.tokenizer.contains("chars"))
    rc.model.vocab_size = 65;
  const ModelConfig& mc = rc.model;
  const int n = mc.seq_len, B = a.batch_size > 0 ? a.batch_size : rc.train.batch_size;
  require(a.mode != "generate" || mc.task == Task::causal_lm, "--mode generate needs a causal LM config; this one is \"" +
                                                             name_of(mc.task) + "\"");

  const double peak = sgemm_peak_gflops();
  Model model(mc);
  Rng rng(rc.train.seed, 1);
  model.init(rng);
  // A batch of the task's shape with random content: the causal LM's shifted windows,
  // the masked LM's 15% targets, full-length sentences, random images.
  std::vector<int32_t> tokens(size_t(B) * (n + 1)), targets(size_t(B) * (n + 1), -1), lengths(size_t(B), n);
  std::vector<float> images, keep(size_t(mc.n_layers) * B);
  if (mc.token_input())
    for (auto& t : tokens) t = int32_t(rng.below(uint64_t(mc.vocab_size)));
  Batch batch;
  batch.B = B;
  batch.T = n;
  if (mc.task == Task::causal_lm) {
    batch.tokens = tokens.data();
    batch.stride = n + 1;
    batch.targets = tokens.data() + 1;
  } else if (mc.token_input()) {
    batch.tokens = tokens.data();
    batch.stride = n + 1;
    if (mc.task == Task::mlm) {
      for (int b = 0; b < B; ++b)
        for (int t = 0; t < n; ++t)
          if (rng.uniform(0.f, 1.f) < rc.train.mask_prob) targets[size_t(b) * (n + 1) + t] = tokens[size_t(b) * (n + 1) + t];
    } else {
      for (int b = 0; b < B; ++b) targets[size_t(b)] = int32_t(rng.below(uint64_t(mc.n_classes)));
      batch.lengths = lengths.data();
    }
    batch.targets = targets.data();
  } else {
    images.resize(size_t(B) * mc.image_channels * mc.image_height * mc.image_width);
    for (auto& v : images) v = rng.normal();
    for (int b = 0; b < B; ++b) targets[size_t(b)] = int32_t(rng.below(uint64_t(mc.n_classes)));
    batch.images = images.data();
    batch.targets = targets.data();
    if (mc.survival_prob < 1.f) {
      draw_keep(mc, B, rng, keep.data());
      batch.keep = keep.data();
    }
  }

  nlohmann::json out = {{"impl", "gmlp"},
                        {"config", a.config.empty() ? "default" : std::filesystem::path(a.config).stem().string()},
                        {"mode", a.mode},
                        {"threads", a.threads},
                        {"batch_size", a.mode == "generate" ? 1 : B},
                        {"seq_len", n},
                        {"params", model.num_params()},
                        {"sgemm_peak_gflops", peak}};
  Stats s;
  double flops = 0;  // per timed unit
  if (a.mode == "train") {
    AdamW opt(model.params(), model.num_params(), rc.train);
    s = time_it(a.warmup, a.repeats, [&] {
      model.zero_grad();
      model.forward(batch);
      model.backward();
      clip_grad_norm(model.grads(), model.num_params(), 1.f);
      opt.step(model.weights(), model.grads(), 1e-4f);
    });
    flops = 3.0 * forward_flops_per_token(mc, n) * B * n;
    out["tokens_per_s"] = B * n / s.median;
    if (!mc.token_input()) out["images_per_s"] = B / s.median;
  } else if (a.mode == "infer") {
    model.set_grad_enabled(false);
    s = time_it(a.warmup, a.repeats, [&] { model.forward(batch); });
    flops = forward_flops_per_token(mc, n) * B * n;
    out["tokens_per_s"] = B * n / s.median;
    if (!mc.token_input()) out["images_per_s"] = B / s.median;
  } else {
    // Steady-state generation: from a half-window prompt, 2n tokens (two slides of the
    // context included), greedy; per-token time = run time / tokens.
    const int gen = a.gen_tokens > 0 ? a.gen_tokens : 2 * n;
    const std::vector<int32_t> prompt(tokens.begin(), tokens.begin() + std::max(1, n / 2));
    SamplingOptions greedy;
    greedy.temperature = 0;
    auto run = [&](bool cached) {
      Rng r(1);
      generate(model, prompt, gen, greedy, r, nullptr, cached);
    };
    s = time_it(a.warmup > 0 ? 1 : 0, a.repeats, [&] { run(true); });
    s = {s.median / gen, s.min / gen, s.max / gen};
    const Stats full = time_it(0, 1, [&] { run(false); });
    out["ms_per_token"] = s.median * 1e3;
    out["ms_per_token_recompute"] = full.median / gen * 1e3;
    flops = forward_flops_per_token(mc, n);
  }
  out["median_s"] = s.median;
  out["min_s"] = s.min;
  out["max_s"] = s.max;
  out["gflops"] = flops / s.median / 1e9;
  out["mfu"] = flops / s.median / 1e9 / peak;
  out["peak_rss_mb"] = peak_rss_mb();
  if (a.json) {
    std::printf("%s\n", out.dump().c_str());
  } else {
    std::printf("%s %s: B=%d n=%d, %zu params\n", out["config"].get<std::string>().c_str(), a.mode.c_str(),
                out["batch_size"].get<int>(), n, model.num_params());
    if (a.mode == "generate")
      std::printf("  %.3f ms/token cached (min %.3f, max %.3f); %.3f ms/token recomputing the window\n",
                  s.median * 1e3, s.min * 1e3, s.max * 1e3, out["ms_per_token_recompute"].get<double>());
    else
      std::printf("  %.0f %s/s; %.1f ms per step (min %.1f, max %.1f, %d repeats)\n",
                  out.value("images_per_s", out["tokens_per_s"].get<double>()),
                  mc.token_input() ? "tokens" : "images", s.median * 1e3, s.min * 1e3, s.max * 1e3, a.repeats);
    std::printf("  %.1f GFLOP/s = %.1f%% of the measured sgemm peak %.1f GFLOP/s; peak RSS %.0f MB\n",
                out["gflops"].get<double>(), 100 * out["mfu"].get<double>(), peak, out["peak_rss_mb"].get<double>());
  }
  return 0;
}

}  // namespace

void add_bench(CLI::App& app, int& exit_code) {
  auto a = std::make_shared<BenchArgs>();
  auto* c = app.add_subcommand("bench", "Measure training/inference tokens/s, ms per generated token, peak RSS and MFU");
  c->add_option("--config", a->config, "JSON config (model and train sections); default: the built-in default")
      ->check(CLI::ExistingFile);
  c->add_option("--set", a->sets, "Override a config value: model.KEY=VALUE or train.KEY=VALUE (repeatable)");
  c->add_option("--mode", a->mode, "train (fwd+bwd+AdamW), infer (forward with loss) or generate (cached decoding)")
      ->capture_default_str();
  c->add_option("--batch-size", a->batch_size, "Windows per step (default: the config's)");
  c->add_option("--warmup", a->warmup, "Untimed runs first")->capture_default_str();
  c->add_option("--repeats", a->repeats, "Timed runs; the median is reported")->capture_default_str();
  c->add_option("--gen-tokens", a->gen_tokens, "generate: tokens per run (default 2n)");
  c->add_flag("--json", a->json, "One JSON object on stdout");
  c->callback([a, &exit_code] {
    a->threads = omp_get_max_threads();  // what --threads (or the default) put in force
    exit_code = run_bench(*a);
  });
}

}  // namespace gmlp::cli
