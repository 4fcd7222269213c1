// Benchmarks of a config on this machine (gmlp/bench.h).
#include "gmlp/bench.h"

#include <dlfcn.h>
#include <sys/resource.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <functional>
#include <optional>

#include "backend/backend.h"
#include "gmlp/error.h"
#include "gmlp/generate.h"
#include "gmlp/optimizer.h"
#include "ops/ops.h"
#include "train/data_parallel.h"

namespace gmlp {
namespace {

using Clock = std::chrono::steady_clock;

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

}  // namespace

// The backend's own product at the precision in use (the CPU's SGEMM, or cuBLAS's on a
// GPU: the CPU's peak would make a GPU step's MFU meaningless), on squares large enough
// to reach its steady state (OpenBLAS's at 1024 and 2048; a GPU needs larger).
double gemm_peak_gflops(Backend& be) {
  double best = 0;
  for (int n : be.host_memory() ? std::vector<int>{1024, 2048} : std::vector<int>{2048, 4096}) {
    const size_t count = size_t(n) * n;
    const std::vector<float> values(count, 1e-3f);
    DeviceBuffer<float> a(be, count), b(be, count), c(be, count);
    be.upload(a.data(), values.data(), sizeof(float) * count);
    be.upload(b.data(), values.data(), sizeof(float) * count);
    const Stats s = time_it(1, 3, [&] {
      be.gemm(false, false, n, n, n, 1.f, a.data(), n, b.data(), n, 0.f, c.data(), n);
      be.synchronize();
    });
    best = std::max(best, 2.0 * n * n * double(n) / s.min / 1e9);
  }
  return best;
}

double peak_rss_mb() {
  rusage ru{};
  getrusage(RUSAGE_SELF, &ru);
  return double(ru.ru_maxrss) / 1024.0;  // KB on Linux
}

std::string malloc_name() {
  // The object that malloc resolved to in this process (a linked or preloaded malloc
  // interposes on glibc's): jemalloc when the same object answers mallctl, whatever its
  // file is called (a static link puts it in the executable). Looked up, not linked: the
  // library is the same whichever malloc the executable took.
  Dl_info at{};
  void* m = dlsym(RTLD_DEFAULT, "malloc");
  if (!m || !dladdr(m, &at) || !at.dli_fname) return "unknown malloc";
  using Mallctl = int (*)(const char*, void*, size_t*, void*, size_t);
  auto mallctl = reinterpret_cast<Mallctl>(dlsym(RTLD_DEFAULT, "mallctl"));
  Dl_info ctl{};
  if (mallctl && dladdr(reinterpret_cast<void*>(mallctl), &ctl) && ctl.dli_fbase == at.dli_fbase) {
    const char* version = nullptr;
    size_t size = sizeof(version);
    if (mallctl("version", &version, &size, nullptr, 0) == 0 && version)
      return "jemalloc " + std::string(version).substr(0, std::string(version).find('-'));
    return "jemalloc";
  }
  const std::string lib = at.dli_fname;
  const std::string base = lib.substr(lib.find_last_of('/') + 1);
  if (base.rfind("libc.so.", 0) == 0) return "glibc malloc";
  return base + "'s malloc";
}

SyntheticBatch::SyntheticBatch(const RunConfig& rc, int B, Rng& rng) {
  const ModelConfig& mc = rc.model;
  const int n = mc.seq_len;
  tokens.resize(size_t(B) * (n + 1));
  targets.assign(size_t(B) * (n + 1), -1);
  lengths.assign(size_t(B), n);
  keep.resize(size_t(mc.n_layers) * B);
  if (mc.token_input())
    for (auto& t : tokens) t = int32_t(rng.below(uint64_t(mc.vocab_size)));
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
}

BenchResult bench_model(const RunConfig& rc, BenchMode mode, const BenchOptions& o) {
  const ModelConfig& mc = rc.model;
  const int n = mc.seq_len, B = o.batch_size;
  require(B >= 1, "bench: the batch size must be positive, got " + std::to_string(B));
  require(o.repeats >= 1 && o.warmup >= 0, "bench: repeats must be >= 1 and warmup >= 0");
  require(mode != BenchMode::generate || mc.task == Task::causal_lm,
          "bench: generation needs a causal LM config; this one is \"" + name_of(mc.task) + "\"");
  require(!o.products || mode != BenchMode::generate,
          "bench: --products times training or inference steps, not generation");
  require(!o.products || o.device == Device::cpu,
          "bench: --products times the CPU's products; this run is on " + name_of(o.device));
  // Data parallelism and gradient accumulation as `gmlp train` takes them: each rank's
  // rows of the global batch (every rank draws the whole batch, from the same seed), in
  // K pieces, the gradients reduced across the ranks in the last piece's backward, and
  // the step's loss agreed on after it.
  Communicator& comm = o.comm ? *o.comm : this_process();
  const int P = mode == BenchMode::train ? comm.size() : 1, K = o.grad_accum > 0 ? o.grad_accum : rc.train.grad_accum;
  require(comm.size() == 1 || mode == BenchMode::train, [&] {
    return "bench: " + std::to_string(comm.size()) +
           " processes take only training steps together (data parallel); time inference and generation in one";
  });
  require(mode == BenchMode::train || o.grad_accum == 0,
          "bench: grad_accum takes a training step's batch in pieces; this run times no training step");
  require(B % P == 0, [&] {
    return "bench: a batch of " + std::to_string(B) + " rows is the global batch, split evenly over the " +
           std::to_string(P) + " processes of this job: it must be a multiple of " + std::to_string(P);
  });
  require(mode != BenchMode::train || (K >= 1 && B / P % K == 0), [&] {
    return "bench: a batch of " + std::to_string(B) + " rows does not divide into grad_accum = " + std::to_string(K) +
           " pieces" + (P > 1 ? " on each of " + std::to_string(P) + " processes" : "");
  });
  BenchResult r;
  Model model(mc, o.device);
  Rng rng(rc.train.seed, 1);
  model.init(rng);
  r.params = model.num_params();
  r.device_name = model.backend().device_name();
  // A batch of the task's shape with random content: the causal LM's shifted windows,
  // the masked LM's targets, full-length sentences, random images.
  SyntheticBatch data(rc, B, rng);
  Batch batch = data.batch;
  Batch train_batch = batch;  // training drops what the config drops, as `gmlp train` does
  // The images stay on the device for the whole run, as bench/gpu_bench.py's PyTorch
  // side keeps its batch: the step is timed, not a host-to-device copy of a batch that
  // never changes (77 MB a step for gMLP-S/16 at batch 128). A rank's own rows alone, as
  // `gmlp train` sends them (BatchAhead); the rows it shards are the host's. Token
  // batches are uploaded each step, as in training: they are small.
  DeviceBuffer<float> images;
  if (!mc.token_input() && !model.backend().host_memory()) {
    const size_t per = data.images.size() / size_t(B), rows = size_t(B / P), first = size_t(comm.rank() % P) * rows;
    images = DeviceBuffer<float>(model.backend(), rows * per);
    model.backend().upload(images.data(), data.images.data() + first * per, sizeof(float) * rows * per);
    batch.images = images.data();  // infer: the whole batch (one process)
    batch.images_on_backend = true;
  }
  double flops = 0;  // per timed unit
  Stats s;
  std::optional<AdamW> opt;
  std::optional<NoGrad> no_grad;
  std::function<void()> step;  // train and infer: one timed unit
  std::optional<DataParallel> dp;
  std::span<const Batch> rest;  // the step's pieces after the first
  double share = 1.0;           // the queued step's share of the global batch's targets
  // The step's first piece queued; its rows cut again each step, as the trainer's are
  // (the reductions count a step's gradients from its shard), on the device's copy.
  auto forward_first = [&] {
    Batch mine = dp->shard(train_batch);
    if (!images.empty()) {
      mine.images = images.data();
      mine.images_on_backend = true;
    }
    const std::vector<Batch>& pieces = dp->pieces(mine, K);
    model.forward_queued(pieces[0]);
    rest = std::span<const Batch>(pieces).subspan(1);
  };
  // The rest of the step, through its update; and its loss, read back, agreed on.
  auto queue_rest = [&] {
    queue_train_step(
        model, *opt, 1.f, 1e-4f, [&] { dp->finish_backward(); }, {}, P > 1, rest);
    share = dp->share();  // this step's, before the next step's shard (the pipeline below)
  };
  auto finish = [&] {
    const StepResult sr = finish_train_step(model, *opt, P > 1);  // waits for the device
    const double loss = P > 1 ? dp->agree(sr.loss, share, false).loss : sr.loss;
    if (std::isnan(r.first_loss)) r.first_loss = loss;
  };
  if (mode == BenchMode::train) {
    draw_dropout(mc, rng, train_batch);  // here only: the other modes' draws stay as they were
    opt.emplace(model, rc.train);
    dp.emplace(comm, model);
    r.grad_accum = K;
    r.ranks = P;
    if (P > 1) r.comm = dp->describe();
    step = [&] {
      forward_first();
      queue_rest();
      finish();
    };
    flops = 3.0 * forward_flops_per_token(mc, n) * B * n;
  } else if (mode == BenchMode::infer) {
    no_grad.emplace(model);
    step = [&] {
      model.forward(batch);
      model.backend().synchronize();
    };
    flops = forward_flops_per_token(mc, n) * B * n;
  }
  if (step) {
    for (int i = 0; i < o.warmup; ++i) step();
    model.backend().profile_ops(true);  // GMLP_CUDA_PROFILE: the timed steps alone
    s = time_it(0, o.repeats, step);
    model.backend().profile_ops(false);
    if (mode == BenchMode::train && !model.backend().host_memory()) {
      // The same steps as the trainer's pipeline takes them (src/train/trainer.cpp),
      // from an idle device to the last step's read, over the run.
      const auto t0 = Clock::now();
      forward_first();
      for (int i = 0; i < o.repeats; ++i) {
        queue_rest();
        if (i + 1 < o.repeats) forward_first();
        finish();
      }
      r.pipelined_s = std::chrono::duration<double>(Clock::now() - t0).count() / o.repeats;
    }
  } else {
    // Steady-state generation: from half-window prompts, 2n tokens per stream (two slides
    // of the context included), greedy; per-token time = run time / all tokens drawn.
    require(o.streams >= 1 && o.streams <= 4096, "bench: streams must be 1 to 4096, got " + std::to_string(o.streams));
    const int gen = o.gen_tokens > 0 ? o.gen_tokens : 2 * n, S = o.streams;
    std::vector<std::vector<int32_t>> prompts(static_cast<size_t>(S));
    for (auto& p : prompts) {
      p.resize(size_t(std::max(1, n / 2)));
      for (auto& t : p) t = int32_t(rng.below(uint64_t(mc.vocab_size)));
    }
    SamplingOptions greedy;
    greedy.temperature = 0;
    auto run = [&](bool cached) {
      if (S == 1 || !cached) {
        Rng g(1);
        generate(model, prompts[0], gen, greedy, g, nullptr, cached);
      } else {
        std::vector<Rng> g(static_cast<size_t>(S), Rng(1));
        generate_batch(model, prompts, gen, greedy, g);
      }
    };
    s = time_it(o.warmup > 0 ? 1 : 0, o.repeats, [&] { run(true); });
    const double drawn = double(gen) * S;
    s = {s.median / drawn, s.min / drawn, s.max / drawn};
    r.tokens_per_s = 1.0 / s.median;
    r.recompute_s = time_it(0, 1, [&] { run(false); }).median / gen;  // one stream
    flops = forward_flops_per_token(mc, n);
  }
  if (o.products) {
    ops::product_timing_start();
    for (int i = 0; i < o.repeats; ++i) step();
    for (auto& t : ops::product_timing_stop()) {
      std::vector<double>& v = t.seconds;
      std::sort(v.begin(), v.end());
      const double med = v[v.size() / 2];
      r.products.push_back(
          {t.kind, t.M, t.N, t.K, double(v.size()) / o.repeats, med, 2.0 * t.M * t.N * t.K / med / 1e9});
    }
    std::sort(r.products.begin(), r.products.end(), [](const ProductTime& a, const ProductTime& b) {
      return a.median_s * a.calls_per_run > b.median_s * b.calls_per_run;
    });
  }
  r.median_s = s.median;
  r.min_s = s.min;
  r.max_s = s.max;
  if (mode != BenchMode::generate) r.tokens_per_s = B * n / s.median;
  r.gflops = flops / s.median / 1e9;
  r.peak_rss_mb = peak_rss_mb();
  r.device_peak_mb = double(model.backend().peak_bytes()) / double(1 << 20);
  // Last, so that the peak RSS is the model's: the peak's 2048 x 2048 operands (48 MB)
  // would otherwise be most of a small model's figure.
  model.backend().profile_ops(false);  // the peak's products are not the model's
  r.sgemm_peak_gflops = gemm_peak_gflops(model.backend());
  r.ranks_peak_gflops = r.sgemm_peak_gflops;  // every rank's, summed: a step's ranks may differ
  if (P > 1) comm.allreduce_sum(&r.ranks_peak_gflops, 1);
  return r;
}

}  // namespace gmlp
