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
#include "gmlp/image.h"
#include "gmlp/labelled.h"
#include "gmlp/model.h"

namespace gmlp {

// Training data already in memory, for callers that hold it (the Python module): used
// instead of data_path / test_path. The task takes what it needs: a corpus (text, or
// token ids of the config's tokenizer) for LM and MLM, labelled texts for classify,
// images for vision; the test sets are optional. `name` stands for a path in messages.
struct TrainData {
  std::string name = "<memory>";
  std::string text;
  std::vector<int32_t> tokens;
  LabelledSet texts, test_texts, val_texts;  // val_texts: replace the val_fraction split when given
  ImageSet images, test_images;              // floats in [0, 1] (normalised by the task) or bytes (by the model)
};

struct TrainOptions {
  RunConfig run;
  std::string data_path;     // corpus (LM, MLM), labelled training file (classify), image folder (vision)
  std::string test_path;     // classify: labelled test file (optional)
  std::string val_path;      // classify: labelled validation file (default: train.val_fraction of data_path)
  std::string init_from;     // a checkpoint whose matching tensors initialise the model (fine-tuning);
                             // the head is always new
  std::string out_dir;
  bool resume = false;       // continue the run saved in out_dir
  int64_t extend_to = 0;     // with resume: raise the run's total steps to this (0 = keep)
  int grad_accum = 0;        // take each step's batch in this many pieces (0 = the run's train.grad_accum;
                             // a resumed run may change it)
  int64_t stop_after = 0;    // stop (as if interrupted) after this many steps of this invocation; 0 = off
  bool progress_bar = true;  // a live one-line bar on a terminal; plain log lines otherwise
  std::shared_ptr<const TrainData> data;  // in-memory data instead of the paths (null: the paths)
  // Called with every line the metrics log gets (training and evaluation lines), right
  // after it is written; returning false stops the run as an interruption does
  // (checkpoint, then return with interrupted set). Exceptions propagate.
  std::function<bool(const nlohmann::json& line)> on_log;
  Device device = Device::cpu;  // where the model trains
  // On a device, step t+1's forward is queued before step t's loss is read back, so the
  // device goes from one step to the next without waiting for the host; never past an
  // evaluation, a checkpoint or the run's end. The same numbers either way: false takes
  // a step at a time (the reference the tests hold the pipeline to).
  bool pipeline = true;
  // With several ranks: ZeRO-1, each rank keeps the optimizer moments of 1/P of the
  // parameters (the same numbers; not part of the run, so a resume may change it).
  bool shard_optimizer = false;
  bool score_test = true;    // score the test set at the end (a search's trials leave it to the chosen one)
  // Classification: the validation examples (val_path, or the val_fraction split of the
  // training file) are trained on as well and nothing is held out; the last step is
  // the model. Set by refit_options; saved with the run, so a resume keeps it.
  bool join_validation = false;
};

struct TrainSummary {
  int64_t steps = 0;
  bool interrupted = false;
  double last_loss = 0.0;
  nlohmann::json val_metrics;  // every task: the last evaluation's "val_*" metrics (null if none)
  bool early_stopped = false;  // train.patience evaluations passed without a better validation score
  int64_t best_step = 0;       // the step of best.safetensors (0: no validation, no best)
  nlohmann::json best_metrics; // that step's evaluation ("val_*"; null if none); on every rank, like best_step
  nlohmann::json report;       // report.json of a finished run: the selection and the test set's scores (rank 0)
  double elapsed_s = 0.0;
  double tokens_per_s = 0.0;
  double device_peak_mb = 0.0;  // a GPU run: the most device memory held at once (0 on the CPU)
  int64_t train_examples = 0;  // examples in one pass over the training data (the unit of train.epochs)
};

// Set from a signal handler: the loop checkpoints and returns at the next step.
extern std::atomic<bool> g_stop_requested;

// File names inside a run directory.
std::string model_file(const std::string& out_dir);
std::string state_file(const std::string& out_dir);
std::string metrics_file(const std::string& out_dir);
// The checkpoint with the best validation score so far, and the finished run's report.
std::string best_model_file(const std::string& out_dir);
std::string report_file(const std::string& out_dir);
// The weights' moving average (train.model_ema) as a model file, at each checkpoint.
std::string ema_model_file(const std::string& out_dir);

TrainSummary train(const TrainOptions& opts);

// Whether a classification run of these options holds validation examples out to
// choose by: a validation file, validation texts in memory, or a val_fraction split.
bool holds_out_validation(const TrainOptions& opts);

// A refit, as scikit-learn's search does after choosing: the options of a finished
// classification run that selected its checkpoint by validation, changed to train again
// from the same start on its training and validation examples together, in `out_dir`,
// for as many passes over the examples as the selected checkpoint had seen (its step
// times the batch, over the run's training examples), with the schedule fitted to that
// budget; no validation, the last step is the model, the test set is scored on it.
// The selection had no use for the held-out examples' labels beyond choosing; the refit
// spends them on training. Error when the run selected nothing (no validation, or
// interrupted).
TrainOptions refit_options(const TrainOptions& chosen, const TrainSummary& result, const std::string& out_dir);

// The config `gmlp finetune` starts from, as JSON ({"model", "train"}): the encoder's
// architecture and tokenizer from the checkpoint `init_from` (a file or run directory;
// empty: the default model) made a classifier with its classes left to the data,
// BERT's fine-tuning dropout of 0.1, long texts read in chunks, and the fine-tuning
// schedule (a tenth of the training texts held out for validation, early stopping).
nlohmann::json finetune_config(const std::string& init_from);

}  // namespace gmlp
