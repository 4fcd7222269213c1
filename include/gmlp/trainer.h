#pragma once
// The training loop of every task (causal LM, masked LM, sentence classification,
// vision): random batches, AdamW with a schedule and clipping, periodic held-out
// evaluation, a JSONL metrics log, atomic checkpoints (periodic, final, and on
// interruption), and exact resumption.
#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "gmlp/config.h"
#include "gmlp/dataset.h"
#include "gmlp/model.h"

namespace gmlp {

struct TrainOptions {
  RunConfig run;
  std::string data_path;     // corpus (LM, MLM), labelled training file (classify), image folder (vision)
  std::string test_path;     // classify: labelled test file (optional)
  std::string init_from;     // a checkpoint whose matching tensors initialise the model (fine-tuning);
                             // the head is always new
  std::string out_dir;
  bool resume = false;       // continue the run saved in out_dir
  int64_t extend_to = 0;     // with resume: raise the run's total steps to this (0 = keep)
  int64_t stop_after = 0;    // stop (as if interrupted) after this many steps of this invocation; 0 = off
  bool progress_bar = true;  // a live one-line bar on a terminal; plain log lines otherwise
};

struct TrainSummary {
  int64_t steps = 0;
  bool interrupted = false;
  double last_loss = 0.0;
  nlohmann::json val_metrics;  // every task: the last evaluation's "val_*" metrics (null if none)
  double elapsed_s = 0.0;
  double tokens_per_s = 0.0;
};

// Set from a signal handler: the loop checkpoints and returns at the next step.
extern std::atomic<bool> g_stop_requested;

// File names inside a run directory.
std::string model_file(const std::string& out_dir);
std::string state_file(const std::string& out_dir);
std::string metrics_file(const std::string& out_dir);

TrainSummary train(const TrainOptions& opts);

}  // namespace gmlp
