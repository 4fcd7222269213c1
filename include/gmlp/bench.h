#pragma once
// Benchmarks of a configuration on this machine: a training step (forward, backward,
// clipping, AdamW), an inference forward, or cached generation, timed after warm-up
// runs, with the sgemm peak measured in the same process so that MFU means something
// here. `gmlp bench` prints these; bench/compare.py runs it beside PyTorch.
#include <cstdint>
#include <vector>

#include "gmlp/config.h"
#include "gmlp/model.h"
#include "gmlp/rng.h"

namespace gmlp {

enum class BenchMode { train, infer, generate };

struct BenchOptions {
  int batch_size = 16;
  int warmup = 3, repeats = 10;
  int gen_tokens = 0;  // generate: tokens per run (0: 2n, so the context slides twice)
  int streams = 1;     // generate: prompts decoded together (generate_batch when > 1)
  Device device = Device::cpu;
};

struct BenchResult {
  size_t params = 0;
  double median_s = 0, min_s = 0, max_s = 0;  // per step, or per generated token
  double tokens_per_s = 0;                    // train and infer; generate: over all streams
  double recompute_s = 0;                     // generate: per token, recomputing the window
  double gflops = 0;                          // useful FLOPs per second (forward_flops_per_token)
  double sgemm_peak_gflops = 0;
  double peak_rss_mb = 0;
  double device_peak_mb = 0;  // a device backend's peak allocation (0 on the CPU)
};

BenchResult bench_model(const RunConfig& rc, BenchMode mode, const BenchOptions& o);

// The best sgemm rate this process gets at the thread count in force.
double sgemm_peak_gflops();
// The process's peak resident set so far.
double peak_rss_mb();

// A batch of B windows of the config's task with random content (the causal LM's
// shifted windows, the masked LM's targets at mask_prob, full-length sentences, random
// images with stochastic-depth masks); it owns the buffers `batch` points into.
struct SyntheticBatch {
  SyntheticBatch(const RunConfig& rc, int B, Rng& rng);
  SyntheticBatch(const SyntheticBatch&) = delete;
  SyntheticBatch& operator=(const SyntheticBatch&) = delete;
  std::vector<int32_t> tokens, targets, lengths;
  std::vector<float> images, keep;
  Batch batch;
};

}  // namespace gmlp
