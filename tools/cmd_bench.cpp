// gmlp bench: training, inference and generation speed of a config on this machine,
// with the sgemm peak measured in the same process so MFU means something here.
#include <omp.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>

#include "commands.h"
#include "gmlp/bench.h"
#include "gmlp/error.h"
#include "gmlp/threads.h"

namespace gmlp::cli {
namespace {

struct BenchArgs {
  std::string config, mode = "train";
  std::vector<std::string> sets;
  int batch_size = 0, warmup = 3, repeats = 10, gen_tokens = 0, threads = 0, streams = 1, grad_accum = 0;
  bool json = false, products = false;
  std::string device = "auto";
  std::string precision = "fp32";
};

int run_bench(const BenchArgs& a) {
  const auto mode = a.mode == "train"     ? BenchMode::train
                    : a.mode == "infer"   ? BenchMode::infer
                    : a.mode == "generate" ? BenchMode::generate
                                          : throw Error("--mode must be train, infer or generate, got '" + a.mode + "'");
  require(a.repeats >= 1 && a.warmup >= 0, "--repeats must be >= 1 and --warmup >= 0");
  require(a.batch_size >= 0 && a.gen_tokens >= 0, "--batch-size and --gen-tokens must be positive when given");
  require(a.grad_accum >= 0, "--grad-accum must be positive when given, got " + std::to_string(a.grad_accum));
  require(a.grad_accum == 0 || mode == BenchMode::train,
          "--grad-accum takes a training step's batch in pieces; --mode " + a.mode + " times no training step");
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
  require(mode != BenchMode::generate || mc.task == Task::causal_lm,
          "--mode generate needs a causal LM config; this one is \"" + name_of(mc.task) + "\"");
  BenchOptions o;
  o.batch_size = B;
  o.warmup = a.warmup;
  o.repeats = a.repeats;
  o.gen_tokens = a.gen_tokens;
  o.streams = a.streams;
  o.grad_accum = a.grad_accum;
  require(mode != BenchMode::train || B % (a.grad_accum > 0 ? a.grad_accum : rc.train.grad_accum) == 0, [&] {
    return a.grad_accum > 0 ? "--grad-accum " + std::to_string(a.grad_accum) + " does not divide the batch of " +
                                  std::to_string(B) + " rows"
                            : "the config's train.grad_accum (" + std::to_string(rc.train.grad_accum) +
                                  ") does not divide --batch-size " + std::to_string(B);
  });
  o.device = choose_device(a.device, a.precision);
  o.products = a.products;
  // Under a launcher the ranks take each training step together; rank 0 reports.
  Communicator& comm = world();
  o.comm = &comm;
  const BenchResult r = bench_model(rc, mode, o);
  if (comm.rank() != 0) return 0;

  nlohmann::json out = {{"impl", "gmlp"},
                        {"config", a.config.empty() ? "default" : std::filesystem::path(a.config).stem().string()},
                        {"mode", a.mode},
                        {"device", name_of(o.device)},
                        {"precision", a.precision},
                        {"threads", a.threads},
                        {"batch_size", mode == BenchMode::generate ? a.streams : B},
                        {"seq_len", n},
                        {"grad_accum", r.grad_accum},  // 1 but for training steps taken in pieces
                        {"ranks", r.ranks},            // the processes each training step was taken over
                        {"params", r.params},
                        {"sgemm_peak_gflops", r.sgemm_peak_gflops}};
  if (mode == BenchMode::generate) {
    out["ms_per_token"] = r.median_s * 1e3;
    out["tokens_per_s"] = r.tokens_per_s;
    out["ms_per_token_recompute"] = r.recompute_s * 1e3;
  } else {
    out["tokens_per_s"] = r.tokens_per_s;
    if (!mc.token_input()) out["images_per_s"] = B / r.median_s;
  }
  out["median_s"] = r.median_s;
  if (r.pipelined_s > 0) out["pipelined_s"] = r.pipelined_s;
  out["min_s"] = r.min_s;
  out["max_s"] = r.max_s;
  out["gflops"] = r.gflops;
  out["mfu"] = r.gflops / r.ranks_peak_gflops;  // against every rank's peak
  if (r.ranks > 1) out["comm"] = r.comm;
  if (mode == BenchMode::train) out["first_loss"] = r.first_loss;
  out["peak_rss_mb"] = r.peak_rss_mb;
  out["malloc"] = malloc_name();  // the peak RSS depends on it (docs/bench.md)
  if (o.device != Device::cpu) {
    out["device_peak_mb"] = r.device_peak_mb;
    out["device_name"] = r.device_name;
  }
  // How OpenMP's threads wait in this run: gmlp's own choice, or the user's variables.
  const char* policy = std::getenv("OMP_WAIT_POLICY");
  const char* spins = std::getenv("GOMP_SPINCOUNT");
  out["omp_wait"] = !omp_wait_choice().empty() ? omp_wait_choice()
                    : policy                   ? std::string("OMP_WAIT_POLICY=") + policy
                    : spins                    ? std::string("GOMP_SPINCOUNT=") + spins
                                               : std::string("libgomp default");
  out["cpu_gemm"] = cpu_gemm();  // which library multiplied the fp32 products, and why
  double product_s = 0;
  for (const auto& p : r.products) product_s += p.median_s * p.calls_per_run;
  if (a.products) {
    out["products"] = nlohmann::json::array();
    for (const auto& p : r.products)
      out["products"].push_back({{"kind", p.kind},
                                 {"M", p.M},
                                 {"N", p.N},
                                 {"K", p.K},
                                 {"calls_per_step", p.calls_per_run},
                                 {"median_s", p.median_s},
                                 {"gflops", p.gflops}});
  }
  const std::string in_pieces = r.grad_accum > 1
                                    ? std::string(r.ranks > 1 ? ", each rank's rows in " : ", each batch in ") +
                                          std::to_string(r.grad_accum) + " pieces"
                                    : "";
  if (a.json) {
    std::printf("%s\n", out.dump().c_str());
  } else {
    std::printf("%s %s: B=%d n=%d, %zu params\n", out["config"].get<std::string>().c_str(), a.mode.c_str(),
                out["batch_size"].get<int>(), n, r.params);
    if (mode == BenchMode::generate)
      std::printf("  %.3f ms/token cached (min %.3f, max %.3f; %.0f tokens/s over %d stream%s); %.3f ms/token "
                  "recomputing the window (one stream)\n",
                  r.median_s * 1e3, r.min_s * 1e3, r.max_s * 1e3, r.tokens_per_s, a.streams, a.streams > 1 ? "s" : "",
                  r.recompute_s * 1e3);
    else
      std::printf("  %.0f %s/s; %.1f ms per step (min %.1f, max %.1f, %d repeats)%s\n",
                  out.value("images_per_s", r.tokens_per_s), mc.token_input() ? "tokens" : "images", r.median_s * 1e3,
                  r.min_s * 1e3, r.max_s * 1e3, a.repeats, in_pieces.c_str());
    if (r.ranks > 1) std::printf("  data parallel: %s, %d rows of each batch per rank\n", r.comm.c_str(), B / r.ranks);
    if (r.pipelined_s > 0)
      std::printf(
          "  %.1f ms per step as `gmlp train` takes them (each step's loss read once the next step's "
          "forward is queued; the mean of %d)\n",
          r.pipelined_s * 1e3, a.repeats);
    // The peak is the process's gemm at the precision in use (bf16's under --precision bf16).
    const std::string whose = r.ranks > 1 ? "the " + std::to_string(r.ranks) + " ranks' measured " : "the measured ";
    std::printf("  %.1f GFLOP/s = %.1f%% of %s%s peak %.1f GFLOP/s; peak RSS %.0f MB (%s)\n", r.gflops,
                100 * out["mfu"].get<double>(), whose.c_str(), a.precision == "bf16" ? "bf16 GEMM" : "sgemm",
                r.ranks_peak_gflops, r.peak_rss_mb, out["malloc"].get<std::string>().c_str());
    if (out.contains("device_peak_mb"))
      std::printf("  on %s; peak device memory %.0f MiB (the backend's allocations)\n", r.device_name.c_str(),
                  r.device_peak_mb);
    std::printf("  OpenMP threads wait by: %s\n", out["omp_wait"].get<std::string>().c_str());
    std::printf("  fp32 products: %s\n", out["cpu_gemm"].get<std::string>().c_str());
    if (a.products) {
      std::printf("  products by shape, over %d more steps (each call timed alone; NN/k: the spatial weight gradient,\n"
                  "  split by K), %.1f ms per step in all, %.0f%% of the median step:\n",
                  a.repeats, product_s * 1e3, 100 * product_s / r.median_s);
      std::printf("    %-5s %6s %6s %6s %10s %10s %8s %7s\n", "kind", "M", "N", "K", "per step", "ms/call", "GFLOP/s",
                  "share");
      for (const auto& p : r.products)
        std::printf("    %-5s %6d %6d %6d %10.2f %10.3f %8.1f %6.1f%%\n", p.kind.c_str(), p.M, p.N, p.K, p.calls_per_run,
                    p.median_s * 1e3, p.gflops, 100 * p.median_s * p.calls_per_run / product_s);
    }
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
  c->add_option("--batch-size", a->batch_size,
                "Windows per step, the global batch under a launcher (default: the config's)");
  c->add_option("--warmup", a->warmup, "Untimed runs first")->capture_default_str();
  c->add_option("--repeats", a->repeats, "Timed runs; the median is reported")->capture_default_str();
  c->add_option("--gen-tokens", a->gen_tokens, "generate: tokens per run (default 2n)");
  c->add_option("--streams", a->streams, "generate: prompts decoded together (batched generation)")
      ->capture_default_str()->check(CLI::Range(1, 4096));
  c->add_option("--grad-accum", a->grad_accum,
                "train: take each step's batch in K pieces, as `gmlp train --grad-accum K` does "
                "(default: the config's train.grad_accum)");
  add_device_option(c, a->device, a->precision);
  c->add_flag("--products", a->products,
              "train, infer: then time every matrix product by shape over --repeats more steps (CPU)");
  c->add_flag("--json", a->json, "One JSON object on stdout");
  c->callback([a, &exit_code] {
    a->threads = omp_get_max_threads();  // what --threads (or the default) put in force
    exit_code = run_bench(*a);
  });
}

}  // namespace gmlp::cli
