#pragma once
// Benchmarks of a configuration on this machine: a training step (forward, backward,
// clipping, AdamW), an inference forward, or cached generation, timed after warm-up
// runs, with the sgemm peak measured in the same process so that MFU means something
// here. `gmlp bench` prints these; bench/compare.py runs it beside PyTorch.
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "gmlp/comm.h"
#include "gmlp/config.h"
#include "gmlp/model.h"
#include "gmlp/rng.h"

namespace gmlp {

class Backend;

enum class BenchMode { train, infer, generate };

struct BenchOptions {
  int batch_size = 16;
  int warmup = 3, repeats = 10;
  int gen_tokens = 0;  // generate: tokens per run (0: 2n, so the context slides twice)
  int streams = 1;     // generate: prompts decoded together (generate_batch when > 1)
  // train: each step's batch in this many pieces, as `gmlp train` takes them under
  // train.grad_accum (0: the config's train.grad_accum); it must divide batch_size.
  int grad_accum = 0;
  Device device = Device::cpu;
  // train and infer: after the timed runs, `repeats` more with every matrix product timed
  // by shape (BenchResult::products); the headline figures are not affected.
  bool products = false;
  // train: the processes that take each step together, data parallel as `gmlp train`
  // under a launcher (batch_size the global batch, split evenly; the gradients reduced
  // across them each step); null: this process alone. Other modes run on one process.
  Communicator* comm = nullptr;
};

// One shape of product and its calls in the runs timed by shape (BenchOptions::products).
struct ProductTime {
  std::string kind;  // "NN", "NT", "TN", "TT": A and B as stored or transposed; "NT/k":
                     // the spatial weight gradient, split over the threads by K
  int M = 0, N = 0, K = 0;
  double calls_per_run = 0;
  double median_s = 0;  // per call
  double gflops = 0;    // 2 M N K per call over the median
};

struct BenchResult {
  size_t params = 0;
  double median_s = 0, min_s = 0, max_s = 0;  // per step, or per generated token
  // Training on a device: the mean step of a run of `repeats` steps taken as `gmlp train`
  // takes them (the next step's forward queued before each step's loss is read: the
  // trainer's pipeline), where median_s's steps each start with the device idle. 0 else.
  double pipelined_s = 0;
  int grad_accum = 1;                         // train: the pieces each step's batch was taken in
  int ranks = 1;                              // train: the processes each step was taken over
  std::string comm;                           // with several: what carried the gradients (DataParallel)
  double tokens_per_s = 0;                    // train and infer; generate: over all streams
  double recompute_s = 0;                     // generate: per token, recomputing the window
  double gflops = 0;                          // useful FLOPs per second (forward_flops_per_token), all ranks'
  double sgemm_peak_gflops = 0;               // this process's
  double ranks_peak_gflops = 0;               // every rank's peak, summed (this one's alone on one)
  // train: the first step's loss (warm-up included), over the global batch: the same
  // on any number of ranks, to float tolerance.
  double first_loss = std::numeric_limits<double>::quiet_NaN();
  double peak_rss_mb = 0;
  double device_peak_mb = 0;  // a device backend's peak allocation (0 on the CPU)
  std::string device_name;    // what ran it: "cpu", or the GPU (Backend::device_name)
  std::vector<ProductTime> products;  // most time first (BenchOptions::products)
};

BenchResult bench_model(const RunConfig& rc, BenchMode mode, const BenchOptions& o);

// The best product rate a backend gets, at the thread count and precision in force: the
// CPU's SGEMM (or bf16 GEMM), or a device's own product (a GPU's cuBLAS).
double gemm_peak_gflops(Backend& be);
// The process's peak resident set so far.
double peak_rss_mb();
// Which malloc serves this process: "jemalloc <version>" where the executable links it
// (CMake's GMLP_JEMALLOC), "glibc malloc" (the Python module's process, the tests),
// else the name of the library that provides it (a sanitizer's runtime, a preload).
std::string malloc_name();

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
