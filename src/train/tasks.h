#pragma once
// What the training loop needs from a task (docs/variants.md): batches, a held-out
// evaluation, and a description for the log. One implementation per task:
// causal LM and masked LM on a text corpus, sentence classification on labelled
// lines, image classification on an IDX data set.
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "gmlp/comm.h"
#include "gmlp/config.h"
#include "gmlp/model.h"
#include "gmlp/rng.h"
#include "gmlp/tokenizer.h"

namespace gmlp {

class Backend;

class TrainTask {
 public:
  virtual ~TrainTask() = default;
  // One line for the start of the run: what the data is.
  virtual std::string describe() const = 0;
  // Changes when the data changes: a resumed run refuses different data. A size
  // (tokens or examples) and a 64-bit hash of the loaded content (FNV-1a), so that a
  // training state naming another file of the same size is refused too: a tampered
  // state can make --resume read a file, but not train on one the state's author
  // could not have hashed. (A streamed image folder hashes its files' names and labels,
  // not its images: VisionTask.)
  virtual int64_t data_signature() const = 0;
  virtual uint64_t data_fingerprint() const = 0;
  // Draws the next training batch (all randomness from rng, so resumption is exact).
  // Its arrays stay the task's until the next call.
  virtual const Batch& next_batch(Rng& rng) = 0;
  // Puts the batches' large arrays (a vision batch's images) in be's host memory for
  // uploads (Backend::alloc_host: page-locked on a GPU), from which a batch uploads
  // beside the device's work (src/train/batch_ahead.h). The others' stay on the heap.
  virtual void place_batches(Backend& /*be*/) {}
  // The rows of each batch this process takes (a data-parallel rank's share: the trainer
  // says so once): next_batch still draws every row, so that every rank draws alike, but
  // may leave the others' large arrays unmade (a streamed image set decodes only these).
  virtual void fill_rows(int /*first*/, int /*count*/) {}
  // Where the run is, in examples its steps have drawn (steps x batch size): a task that
  // takes its examples in epochs (train.shuffle) goes on from there, so a resumed run
  // draws what it would have drawn uninterrupted. Called once, before the first batch.
  virtual void seek(int64_t /*examples_drawn*/) {}
  // Units of work per batch for throughput: tokens (text) or images.
  virtual int64_t units_per_batch() const = 0;
  virtual const char* unit() const = 0;
  // Metrics on the held-out data, every key prefixed "val_" (val_loss always), or
  // null when there is no held-out data. max_batches <= 0: all of it. The ranks of
  // comm share the work, and every rank returns the whole set's metrics.
  virtual nlohmann::json evaluate(Model& model, int batch, int64_t max_batches, Communicator& comm) = 0;
  // A short human summary of evaluate()'s result.
  virtual std::string summarize(const nlohmann::json& val) const = 0;
  // Training examples in one pass over the data (windows, sentences, images): the unit
  // of train.epochs.
  virtual int64_t examples() const = 0;
  // Whether evaluate() scores data held out of the training file (not the test set), so
  // that the run may select its best checkpoint by it.
  virtual bool selects_on_validation() const { return true; }
  // The final report on the test set, scored once with the selected model, or null when
  // the task has no test set.
  virtual nlohmann::json test_report(Model& model, int batch) { return nullptr; }
};

// The order in which a task takes its n examples under train.shuffle: epoch e is a
// permutation of them (Fisher-Yates, drawn from Rng(seed, e)), taken in turn, as
// PyTorch's DataLoader(shuffle=True) takes them (but for a batch that straddles two
// epochs, where a DataLoader ends one on a short batch); the examples drawn so far say
// where the order is, so nothing but a run's step need be saved.
class EpochOrder {
 public:
  // seed: the run's (train.seed), kept apart from its other streams. repeats k > 1
  // (repeated augmentation, DeiT's RASampler): each example of the epoch's permutation
  // taken k times, an epoch still n rows, so the first n / k or so of the permutation.
  // The copies are spread, not in a row: the rows come in blocks of k * kSpread, each
  // kSpread examples in turn k times (A B C A B C A B C), so that neighbouring rows, which
  // mixup and CutMix pair, are two examples, not two copies of one; an epoch's last,
  // shorter block of r rows takes ceil(r / k) examples in turn, or two if that is one
  // and r is more than one.
  static constexpr int64_t kSpread = 3;
  EpochOrder(int64_t n, uint64_t seed, int repeats = 1) : n_(n), repeats_(repeats), seed_(seed ^ 0x73687566666c65ull) {}
  int64_t next() {
    const int64_t e = drawn_ / n_, j = drawn_++ % n_;
    if (e != epoch_) shuffle(e);
    const int64_t block = repeats_ * kSpread, start = j / block * block;
    const int64_t rest = n_ - start;
    const int64_t spread =
        rest >= block ? kSpread : std::max((rest + repeats_ - 1) / repeats_, std::min<int64_t>(rest, 2));
    return perm_[size_t(j / block * kSpread + (j - start) % spread)];
  }
  void seek(int64_t drawn) { drawn_ = drawn; }
  int64_t repeats() const { return repeats_; }

 private:
  void shuffle(int64_t e) {
    perm_.resize(size_t(n_));
    for (int64_t i = 0; i < n_; ++i) perm_[size_t(i)] = i;
    Rng rng(seed_, uint64_t(e));
    for (int64_t i = n_; i > 1; --i) std::swap(perm_[size_t(i - 1)], perm_[size_t(rng.below(uint64_t(i)))]);
    epoch_ = e;
  }
  int64_t n_, repeats_, drawn_ = 0, epoch_ = -1;
  uint64_t seed_;
  std::vector<int64_t> perm_;
};

// BERT masking of `rows` windows of n ids (raw) into inputs and targets; returns how
// many positions were chosen (src/train/evaluate.cpp).
int64_t mask_rows(const int32_t* raw, int rows, int n, int32_t* inputs, int32_t* targets, const Tokenizer& tok,
                  Rng& rng, float mask_prob);

// FNV-1a over bytes, continuing from h: the tasks' content fingerprints.
constexpr uint64_t kFnvOffset = 14695981039346656037ull;
inline uint64_t fnv1a(const void* data, size_t bytes, uint64_t h = kFnvOffset) {
  const auto* p = static_cast<const unsigned char*>(data);
  for (size_t i = 0; i < bytes; ++i) h = (h ^ p[i]) * 1099511628211ull;
  return h;
}
template <typename T>
uint64_t fnv1a(const std::vector<T>& v, uint64_t h = kFnvOffset) {
  return fnv1a(v.data(), v.size() * sizeof(T), h);
}

struct TrainData;

struct TaskInputs {
  std::string data_path;  // LM/MLM corpus, classification training file, or image folder
  std::string test_path;  // classification test file (vision: the folder's test split)
  std::string val_path;   // classification validation file (default: train.val_fraction of data_path)
  const TrainData* memory = nullptr;  // in-memory data instead of the paths (gmlp/trainer.h)
  // Classification: the validation examples (val_path, or the val_fraction split) train
  // too and nothing is held out: a refit (TrainOptions::join_validation).
  bool join_validation = false;
  // The job's ranks, which share the work of a pass over the data before training (a
  // streamed image folder's normalisation); null: this process alone.
  Communicator* comm = nullptr;
  // What names the data in messages: the memory's name or the path.
  std::string data_name() const;
};

// Builds the task for cfg.model.task. May complete the model config from the data
// (char vocabularies, class names, image normalisation); Errors name the file at fault.
std::unique_ptr<TrainTask> make_task(RunConfig& cfg, const TaskInputs& in);

}  // namespace gmlp
