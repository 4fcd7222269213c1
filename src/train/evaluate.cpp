// Held-out evaluation of every task (gmlp/evaluate.h). Every pass runs without
// gradients, so the model keeps one layer's activations.
#include "gmlp/evaluate.h"

#include <algorithm>
#include <cmath>
#include <string>

#include "gmlp/classify.h"
#include "gmlp/dataset.h"
#include "gmlp/error.h"
#include "gmlp/metrics.h"
#include "gmlp/mlm.h"
#include "train/tasks.h"

namespace gmlp {
namespace {

int argmax(const float* v, int n) { return int(std::max_element(v, v + n) - v); }

// Whether this rank scores batch k (all of them without a communicator).
bool mine(const Communicator* comm, int64_t k) { return !comm || k % comm->size() == comm->rank(); }

// Sums the ranks' partial sums in place (nothing to do on one process).
void reduce_sums(Communicator* comm, std::initializer_list<double*> sums) {
  if (!comm || comm->size() == 1) return;
  std::vector<double> v;
  for (double* s : sums) v.push_back(*s);
  comm->allreduce_sum(v.data(), v.size());
  size_t i = 0;
  for (double* s : sums) *s = v[i++];
}

// The argmax of B rows of logits, into the predictions and the confusion matrix.
void score_rows(const float* logits, int B, int k, const int32_t* labels, ClassEval& ev) {
  for (int b = 0; b < B; ++b) {
    const int pred = argmax(logits + size_t(b) * k, k);
    ev.predictions.push_back(pred);
    ++ev.confusion[size_t(labels[b]) * k + pred];
  }
}

// The model's mean loss per batch, weighted by its size, gives the mean over the set;
// with a communicator, over every rank's share of it.
void finish(ClassEval& ev, double nats, Communicator* comm) {
  if (comm && comm->size() > 1) {
    double examples = double(ev.examples);
    reduce_sums(comm, {&nats, &examples});
    ev.examples = int64_t(examples);
    comm->allreduce_sum(ev.confusion.data(), ev.confusion.size());
  }
  ev.loss = ev.examples ? nats / double(ev.examples) : 0.0;
  ev.accuracy = confusion_accuracy(ev.confusion);
}

}  // namespace

// BERT masking of `rows` windows of n ids (raw) into inputs and targets; returns how
// many positions were chosen.
int64_t mask_rows(const int32_t* raw, int rows, int n, int32_t* inputs, int32_t* targets, const Tokenizer& tok,
                  Rng& rng, float mask_prob) {
  int64_t count = 0;
  for (int b = 0; b < rows; ++b)
    count += mask_tokens(raw + size_t(b) * n, n, inputs + size_t(b) * n, targets + size_t(b) * n, tok, rng, mask_prob);
  return count;
}

EvalResult evaluate(Model& model, const Tokenizer& tok, const std::vector<int32_t>& tokens, int batch,
                    int64_t max_batches, Communicator* comm) {
  const int window = model.config().seq_len + 1;
  NoGrad no_grad(model);
  std::vector<int32_t> buf(size_t(batch) * window);
  EvalResult r;
  double nats = 0.0;
  for (int64_t k = 0; max_batches <= 0 || k < max_batches; ++k) {
    const int rows = eval_batch(tokens, window, batch, k, buf.data());
    if (rows == 0) break;
    if (!mine(comm, k)) continue;
    const double mean = model.forward(buf.data(), buf.data() + 1, window, rows, window - 1);
    const int64_t n = int64_t(rows) * (window - 1);
    nats += mean * double(n);
    r.tokens += n;
    for (int b = 0; b < rows; ++b)
      for (int t = 1; t < window; ++t) r.bytes += tok.token_bytes(buf[size_t(b) * window + t]);
  }
  double count = double(r.tokens), bytes = double(r.bytes);  // exact below 2^53
  reduce_sums(comm, {&nats, &count, &bytes});
  r.tokens = int64_t(count);
  r.bytes = int64_t(bytes);
  if (r.tokens > 0) {
    r.loss = nats / double(r.tokens);
    r.bits_per_byte = nats / (std::log(2.0) * double(r.bytes));
  }
  return r;
}

MaskedLmEval evaluate_masked_lm(Model& model, const Tokenizer& tok, const std::vector<int32_t>& tokens, int batch,
                                int64_t max_batches, float mask_prob, Communicator* comm) {
  const int n = model.config().seq_len;
  require(model.config().task == Task::mlm, "evaluate_masked_lm: the model's task is \"" + name_of(model.config().task) + "\"");
  // The same corruption at every evaluation, so the numbers are comparable.
  Rng rng(0x6d6c6d, 7);
  NoGrad no_grad(model);
  const bool was_sparse = model.sparse_mlm_head();
  model.set_sparse_mlm_head(true);  // only the chosen positions are scored
  std::vector<int32_t> raw(size_t(batch) * n), inputs(raw.size()), targets(raw.size());
  Batch b;
  b.T = n;
  b.stride = n;
  b.tokens = inputs.data();
  b.targets = targets.data();
  MaskedLmEval r;
  double nats = 0.0;
  for (int64_t k = 0; max_batches <= 0 || k < max_batches; ++k) {
    // Windows of n sharing one token with the next: every held-out token is seen.
    const int rows = eval_batch(tokens, n, batch, k, raw.data());
    if (rows == 0) break;
    // Every rank masks every batch, so the fixed corruption does not depend on the ranks.
    const int64_t count = mask_rows(raw.data(), rows, n, inputs.data(), targets.data(), tok, rng, mask_prob);
    if (!mine(comm, k)) continue;
    b.B = rows;
    nats += model.forward(b) * double(count);
    r.masked += count;
  }
  model.set_sparse_mlm_head(was_sparse);
  double masked = double(r.masked);
  reduce_sums(comm, {&nats, &masked});
  r.masked = int64_t(masked);
  if (r.masked > 0) {
    r.loss = nats / double(r.masked);
    r.perplexity = std::exp(r.loss);
  }
  return r;
}

namespace {
// Scores `count` labelled examples in batches of `batch`; make(s, n) builds the batch
// of examples [s, s + n) without targets. `who` names the caller in errors.
template <typename MakeBatch>
ClassEval score_set(Model& model, const int32_t* labels, size_t count, int batch, Communicator* comm, const char* who,
                    MakeBatch make) {
  const int k = model.config().n_classes;
  NoGrad no_grad(model);
  ClassEval ev;
  ev.confusion.assign(size_t(k) * k, 0);
  double nats = 0.0;
  for (size_t s = 0; s < count; s += size_t(batch)) {
    if (!mine(comm, int64_t(s / size_t(batch)))) continue;
    const int n = int(std::min(count - s, size_t(batch)));
    for (int i = 0; i < n; ++i)
      require(labels[s + size_t(i)] < k, [&] {
        return std::string(who) + ": label " + std::to_string(labels[s + size_t(i)]) + " outside the model's " +
               std::to_string(k) + " classes";
      });
    Batch b = make(s, n);
    b.targets = labels + s;
    nats += model.forward(b) * double(n);
    score_rows(model.logits(), n, k, labels + s, ev);
    ev.examples += n;
  }
  finish(ev, nats, comm);
  return ev;
}
}  // namespace

ClassEval evaluate_texts(Model& model, const Tokenizer& tok, const LabelledSet& set, int batch, Communicator* comm) {
  const ModelConfig& c = model.config();
  require(c.task == Task::classify, "evaluate_texts: the model's task is \"" + name_of(c.task) + "\", not \"classify\"");
  const int k = c.n_classes;
  for (size_t i = 0; i < set.size(); ++i)
    require(set.labels[i] >= 0 && set.labels[i] < k, [&] {
      return "evaluate_texts: label " + std::to_string(set.labels[i]) + " outside the model's " + std::to_string(k) +
             " classes";
    });
  // This rank's batches of texts (every batch without a communicator), scored through
  // the probabilities, so that a chunked text is scored as classify_text reads it.
  std::vector<std::string> texts;
  std::vector<int32_t> labels;
  for (size_t s = 0; s < set.size(); s += size_t(batch)) {
    if (!mine(comm, int64_t(s / size_t(batch)))) continue;
    for (size_t i = s; i < std::min(set.size(), s + size_t(batch)); ++i) {
      texts.push_back(set.texts[i]);
      labels.push_back(set.labels[i]);
    }
  }
  const std::vector<float> probs = texts.empty() ? std::vector<float>{} : classify_texts(model, tok, texts, batch);
  ClassEval ev;
  ev.confusion.assign(size_t(k) * k, 0);
  double nats = 0.0;
  for (size_t i = 0; i < texts.size(); ++i) {
    const float* p = probs.data() + i * size_t(k);
    const int pred = argmax(p, k);
    ev.predictions.push_back(pred);
    ++ev.confusion[size_t(labels[i]) * k + size_t(pred)];
    nats -= std::log(std::max(double(p[labels[i]]), 1e-30));
  }
  ev.examples = int64_t(texts.size());
  finish(ev, nats, comm);
  return ev;
}

ClassEval evaluate_images(Model& model, const ImageSet& set, int batch, Communicator* comm) {
  const ModelConfig& c = model.config();
  require(c.task == Task::vision, "evaluate_images: the model's task is \"" + name_of(c.task) + "\", not \"vision\"");
  require(set.channels == c.image_channels && set.height == c.image_height && set.width == c.image_width,
          "evaluate_images: images of " + std::to_string(set.channels) + "x" + std::to_string(set.height) + "x" +
              std::to_string(set.width) + " do not fit the model's " + std::to_string(c.image_channels) + "x" +
              std::to_string(c.image_height) + "x" + std::to_string(c.image_width));
  // A streamed set's batch decoded into one buffer, which the next batch reuses.
  std::vector<uint8_t> decoded;
  std::vector<int> which;
  return score_set(model, set.labels.data(), size_t(set.n), batch, comm, "evaluate_images", [&](size_t s, int n) {
    Batch b;
    b.B = n;
    b.T = c.seq_len;
    if (set.streamed()) {
      decoded.resize(size_t(n) * set.image_size());
      which.resize(size_t(n));
      for (int r = 0; r < n; ++r) which[size_t(r)] = int(s) + r;
      read_images(set, which.data(), n, decoded.data());
      b.image_bytes = decoded.data();
    } else if (set.as_bytes) {
      b.image_bytes = set.image_bytes(int(s));
    } else {
      b.images = set.image(int(s));
    }
    return b;
  });
}

}  // namespace gmlp
