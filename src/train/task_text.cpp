// Text tasks: the causal LM (next-token windows, bits per byte) and the masked LM
// (BERT masking of windows, perplexity on the chosen positions).
#include <algorithm>
#include <cmath>

#include "gmlp/dataset.h"
#include "gmlp/error.h"
#include "gmlp/safetensors.h"
#include "gmlp/evaluate.h"
#include "gmlp/mlm.h"
#include "gmlp/trainer.h"
#include "train/tasks.h"

namespace gmlp {
namespace {

class CausalLmTask : public TrainTask {
 public:
  CausalLmTask(std::unique_ptr<Tokenizer> tok, TextCorpus corpus, int n, int B)
      : tok_(std::move(tok)), corpus_(std::move(corpus)), n_(n), B_(B),
        buf_(size_t(B) * (n + 1)) {
    batch_.B = B;
    batch_.T = n;
    batch_.stride = n + 1;
    batch_.tokens = buf_.data();
    batch_.targets = buf_.data() + 1;
  }
  std::string describe() const override {
    return std::to_string(corpus_.train.size()) + " train / " + std::to_string(corpus_.val.size()) +
           " val tokens from " + corpus_.path + ", window " + std::to_string(n_);
  }
  int64_t data_signature() const override { return int64_t(corpus_.train.size() + corpus_.val.size()); }
  uint64_t data_fingerprint() const override { return fnv1a(corpus_.val, fnv1a(corpus_.train)); }
  const Batch& next_batch(Rng& rng) override {
    sample_windows(corpus_.train, B_, n_ + 1, rng, buf_.data());
    return batch_;
  }
  int64_t units_per_batch() const override { return int64_t(B_) * n_; }
  const char* unit() const override { return "tokens"; }
  int64_t examples() const override { return std::max<int64_t>(1, int64_t(corpus_.train.size()) / n_); }
  nlohmann::json evaluate(Model& model, int batch, int64_t max_batches, Communicator& comm) override {
    if (corpus_.val.empty()) return nullptr;
    const EvalResult r = gmlp::evaluate(model, *tok_, corpus_.val, batch, max_batches, &comm);
    return {{"val_loss", r.loss}, {"val_bpb", r.bits_per_byte}, {"val_tokens", r.tokens}};
  }
  std::string summarize(const nlohmann::json& v) const override {
    return "val loss " + std::to_string(v["val_loss"].get<double>()) + " nats, " +
           std::to_string(v["val_bpb"].get<double>()) + " bits/byte";
  }

 private:
  std::unique_ptr<Tokenizer> tok_;
  TextCorpus corpus_;
  int n_, B_;
  std::vector<int32_t> buf_;
  Batch batch_;
};

class MaskedLmTask : public TrainTask {
 public:
  MaskedLmTask(std::unique_ptr<Tokenizer> tok, TextCorpus corpus, int n, int B, float mask_prob)
      : tok_(std::move(tok)), corpus_(std::move(corpus)), n_(n), B_(B),
        mask_prob_(mask_prob), raw_(size_t(B) * n), inputs_(size_t(B) * n), targets_(size_t(B) * n) {
    batch_.B = B;
    batch_.T = n;
    batch_.stride = n;
    batch_.tokens = inputs_.data();
    batch_.targets = targets_.data();
  }
  std::string describe() const override {
    return std::to_string(corpus_.train.size()) + " train / " + std::to_string(corpus_.val.size()) +
           " val tokens from " + corpus_.path + ", window " + std::to_string(n_) + ", " +
           std::to_string(int(std::lround(mask_prob_ * 100))) + "% masked";
  }
  int64_t data_signature() const override { return int64_t(corpus_.train.size() + corpus_.val.size()); }
  uint64_t data_fingerprint() const override { return fnv1a(corpus_.val, fnv1a(corpus_.train)); }
  const Batch& next_batch(Rng& rng) override {
    sample_windows(corpus_.train, B_, n_, rng, raw_.data());
    mask_rows(raw_.data(), B_, n_, inputs_.data(), targets_.data(), *tok_, rng, mask_prob_);
    batch_.B = B_;
    return batch_;
  }
  int64_t units_per_batch() const override { return int64_t(B_) * n_; }
  const char* unit() const override { return "tokens"; }
  int64_t examples() const override { return std::max<int64_t>(1, int64_t(corpus_.train.size()) / n_); }
  nlohmann::json evaluate(Model& model, int batch, int64_t max_batches, Communicator& comm) override {
    if (corpus_.val.empty()) return nullptr;
    const MaskedLmEval r = evaluate_masked_lm(model, *tok_, corpus_.val, std::min(batch, B_), max_batches, mask_prob_, &comm);
    if (r.masked == 0) return nullptr;
    return {{"val_loss", r.loss}, {"val_ppl", r.perplexity}, {"val_masked", r.masked}};
  }
  std::string summarize(const nlohmann::json& v) const override {
    return "val masked-token loss " + std::to_string(v["val_loss"].get<double>()) + " nats, perplexity " +
           std::to_string(v["val_ppl"].get<double>());
  }

 private:
  std::unique_ptr<Tokenizer> tok_;
  TextCorpus corpus_;
  int n_, B_;
  float mask_prob_;
  std::vector<int32_t> raw_, inputs_, targets_;
  Batch batch_;
};

// The corpus from its file, or from the text or token ids in memory.
TextCorpus load_corpus(const TaskInputs& in, const Tokenizer& tok, int window, float val_fraction) {
  if (!in.memory) return TextCorpus::load(in.data_path, tok, window, val_fraction);
  const TrainData& d = *in.memory;
  require(d.text.empty() != d.tokens.empty(),
          d.name + ": a language model trains on one corpus: give either text or token ids");
  if (!d.text.empty()) return TextCorpus::from_text(d.text, tok, window, val_fraction, d.name);
  return TextCorpus::from_tokens(d.tokens, tok.vocab_size(), window, val_fraction, d.name);
}

}  // namespace

std::unique_ptr<TrainTask> make_text_task(RunConfig& rc, const TaskInputs& in, std::unique_ptr<Tokenizer> tok) {
  const TrainConfig& tc = rc.train;
  const int n = rc.model.seq_len;
  if (rc.model.task == Task::causal_lm) {
    TextCorpus corpus = load_corpus(in, *tok, n + 1, tc.val_fraction);
    return std::make_unique<CausalLmTask>(std::move(tok), std::move(corpus), n, tc.batch_size);
  }
  TextCorpus corpus = load_corpus(in, *tok, n, tc.val_fraction);
  return std::make_unique<MaskedLmTask>(std::move(tok), std::move(corpus), n, tc.batch_size, tc.mask_prob);
}

}  // namespace gmlp
