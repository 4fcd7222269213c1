// Classification tasks: sentences (labelled lines, padded batches) and images (IDX
// sets, shift augmentation, stochastic depth), with top-1 and confusion matrices.
#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>

#include "gmlp/classify.h"
#include "gmlp/error.h"
#include "gmlp/image.h"
#include "gmlp/text_data.h"
#include "train/tasks.h"

namespace gmlp {
namespace {

int argmax(const float* v, int n) { return int(std::max_element(v, v + n) - v); }

// The argmax of B rows of logits, into the predictions and the confusion matrix.
void score_rows(const float* logits, int B, int k, const int32_t* labels, ClassEval& ev) {
  for (int b = 0; b < B; ++b) {
    const int pred = argmax(logits + size_t(b) * k, k);
    ev.predictions.push_back(pred);
    ++ev.confusion[size_t(labels[b]) * k + pred];
  }
}

// The model's mean loss per batch, weighted by its size, gives the mean over the set.
void finish(ClassEval& ev, double nats) {
  ev.loss = ev.examples ? nats / double(ev.examples) : 0.0;
  ev.accuracy = confusion_accuracy(ev.confusion);
}

// A padded batch's tokens with T cut to its longest row.
struct TextBatcher {
  PaddedTokens p;
  std::vector<int32_t> tokens, lengths;
  Batch make(const size_t* idx, int n) {
    tokens.resize(size_t(n) * p.T);
    lengths.resize(size_t(n));
    gather_rows(p, idx, n, tokens.data(), lengths.data());
    Batch b;
    b.B = n;
    b.T = *std::max_element(lengths.begin(), lengths.end());
    b.stride = p.T;
    b.tokens = tokens.data();
    b.lengths = lengths.data();
    return b;
  }
};

nlohmann::json eval_json(const ClassEval& ev) {
  return {{"val_loss", ev.loss}, {"val_acc", ev.accuracy}, {"val_examples", ev.examples},
          {"val_confusion", ev.confusion}};
}

std::string eval_summary(const nlohmann::json& v) {
  return "val loss " + std::to_string(v["val_loss"].get<double>()) + " nats, accuracy " +
         std::to_string(v["val_acc"].get<double>());
}

class TextClassifyTask : public TrainTask {
 public:
  TextClassifyTask(std::unique_ptr<Tokenizer> tok, LabelledSet train, LabelledSet test, int n, int B)
      : tok_(std::move(tok)), train_(std::move(train)), test_(std::move(test)), B_(B), idx_(size_t(B)),
        labels_(size_t(B)) {
    batcher_.p = encode_padded(train_.texts, *tok_, n);
  }
  std::string describe() const override {
    return std::to_string(train_.size()) + " train / " + std::to_string(test_.size()) + " test sentences, " +
           std::to_string(train_.class_names.size()) + " classes, window " + std::to_string(batcher_.p.T) +
           (batcher_.p.truncated ? " (" + std::to_string(batcher_.p.truncated) + " training texts truncated)" : "");
  }
  int64_t data_signature() const override { return int64_t(train_.size()) * 1000003 + int64_t(test_.size()); }
  const Batch& next_batch(Rng& rng) override {
    for (int b = 0; b < B_; ++b) {
      idx_[size_t(b)] = size_t(rng.below(train_.size()));
      labels_[size_t(b)] = train_.labels[idx_[size_t(b)]];
    }
    batch_ = batcher_.make(idx_.data(), B_);
    batch_.targets = labels_.data();
    return batch_;
  }
  int64_t units_per_batch() const override { return B_; }
  const char* unit() const override { return "sentences"; }
  nlohmann::json evaluate(Model& model, int batch, int64_t max_batches) override {
    if (test_.size() == 0) return nullptr;
    return eval_json(evaluate_texts(model, *tok_, test_, batch));
  }
  std::string summarize(const nlohmann::json& v) const override { return eval_summary(v); }

 private:
  std::unique_ptr<Tokenizer> tok_;
  LabelledSet train_, test_;
  int B_;
  TextBatcher batcher_;
  std::vector<size_t> idx_;
  std::vector<int32_t> labels_;
  Batch batch_;
};

class VisionTask : public TrainTask {
 public:
  VisionTask(const ModelConfig& cfg, ImageSet train, ImageSet test, int B, int shift)
      : cfg_(cfg), train_(std::move(train)), test_(std::move(test)), B_(B), shift_(shift),
        images_(size_t(B) * train_.image_size()), labels_(size_t(B)), keep_(size_t(cfg.n_layers) * B) {
    batch_.B = B;
    batch_.T = cfg.seq_len;
    batch_.images = images_.data();
    batch_.targets = labels_.data();
    if (cfg.survival_prob < 1.f) batch_.keep = keep_.data();
  }
  std::string describe() const override {
    return std::to_string(train_.n) + " train / " + std::to_string(test_.n) + " test images of " +
           std::to_string(train_.channels) + "x" + std::to_string(train_.height) + "x" + std::to_string(train_.width) +
           ", " + std::to_string(cfg_.seq_len) + " patches, " + std::to_string(cfg_.n_classes) + " classes" +
           (shift_ ? ", shifts up to " + std::to_string(shift_) + " px" : "");
  }
  int64_t data_signature() const override { return int64_t(train_.n) * 1000003 + test_.n; }
  const Batch& next_batch(Rng& rng) override {
    const size_t sz = train_.image_size();
    for (int b = 0; b < B_; ++b) {
      const int i = int(rng.below(uint64_t(train_.n)));
      labels_[size_t(b)] = train_.labels[size_t(i)];
      random_shift(train_.image(i), images_.data() + size_t(b) * sz, train_.channels, train_.height, train_.width,
                   shift_, rng, fill_);
    }
    if (batch_.keep) draw_keep(cfg_, B_, rng, keep_.data());
    return batch_;
  }
  int64_t units_per_batch() const override { return B_; }
  const char* unit() const override { return "images"; }
  nlohmann::json evaluate(Model& model, int batch, int64_t max_batches) override {
    if (test_.n == 0) return nullptr;
    return eval_json(evaluate_images(model, test_, batch));
  }
  std::string summarize(const nlohmann::json& v) const override { return eval_summary(v); }
  void set_fill(float f) { fill_ = f; }

 private:
  ModelConfig cfg_;
  ImageSet train_, test_;
  int B_, shift_;
  float fill_ = 0.f;
  std::vector<float> images_;
  std::vector<int32_t> labels_;
  std::vector<float> keep_;
  Batch batch_;
};

// Class names from <dir>/classes.txt (one a line), when the data set ships them.
std::vector<std::string> read_class_names(const std::string& dir) {
  std::vector<std::string> names;
  std::ifstream f(std::filesystem::path(dir) / "classes.txt");
  for (std::string line; std::getline(f, line);)
    if (!line.empty()) names.push_back(line);
  return names;
}

}  // namespace

std::string class_name(const ModelConfig& cfg, int i) {
  return i < int(cfg.class_names.size()) ? cfg.class_names[size_t(i)] : std::to_string(i);
}

void normalize_for_model(const ModelConfig& cfg, ImageSet& set) {
  if (cfg.normalization.is_null()) return;
  normalize(set, Normalization::from_json(cfg.normalization, "model config 'normalization'"));
}

ClassEval evaluate_texts(Model& model, const Tokenizer& tok, const LabelledSet& set, int batch) {
  const ModelConfig& c = model.config();
  require(c.task == Task::classify, "evaluate_texts: the model's task is \"" + name_of(c.task) + "\", not \"classify\"");
  NoGrad no_grad(model);
  TextBatcher tb;
  tb.p = encode_padded(set.texts, tok, c.seq_len);
  ClassEval ev;
  ev.confusion.assign(size_t(c.n_classes) * c.n_classes, 0);
  double nats = 0.0;
  std::vector<size_t> idx;
  for (size_t s = 0; s < set.size(); s += size_t(batch)) {
    const int n = int(std::min(set.size() - s, size_t(batch)));
    idx.resize(size_t(n));
    for (int i = 0; i < n; ++i) idx[size_t(i)] = s + size_t(i);
    for (int i = 0; i < n; ++i)
      require(set.labels[s + size_t(i)] < c.n_classes, "evaluate_texts: label " +
                                                           std::to_string(set.labels[s + size_t(i)]) +
                                                           " outside the model's " + std::to_string(c.n_classes) +
                                                           " classes");
    Batch b = tb.make(idx.data(), n);
    b.targets = set.labels.data() + s;
    nats += model.forward(b) * double(n);
    score_rows(model.logits(), n, c.n_classes, set.labels.data() + s, ev);
    ev.examples += n;
  }
  finish(ev, nats);
  return ev;
}

ClassEval evaluate_images(Model& model, const ImageSet& set, int batch) {
  const ModelConfig& c = model.config();
  require(c.task == Task::vision, "evaluate_images: the model's task is \"" + name_of(c.task) + "\", not \"vision\"");
  require(set.channels == c.image_channels && set.height == c.image_height && set.width == c.image_width,
          "evaluate_images: images of " + std::to_string(set.channels) + "x" + std::to_string(set.height) + "x" +
              std::to_string(set.width) + " do not fit the model's " + std::to_string(c.image_channels) + "x" +
              std::to_string(c.image_height) + "x" + std::to_string(c.image_width));
  NoGrad no_grad(model);
  ClassEval ev;
  ev.confusion.assign(size_t(c.n_classes) * c.n_classes, 0);
  double nats = 0.0;
  for (int s = 0; s < set.n; s += batch) {
    const int n = std::min(set.n - s, batch);
    for (int i = 0; i < n; ++i)
      require(set.labels[size_t(s + i)] < c.n_classes,
              "evaluate_images: label " + std::to_string(set.labels[size_t(s + i)]) + " outside the model's " +
                  std::to_string(c.n_classes) + " classes");
    Batch b;
    b.B = n;
    b.T = c.seq_len;
    b.images = set.image(s);
    b.targets = set.labels.data() + s;
    nats += model.forward(b) * double(n);
    score_rows(model.logits(), n, c.n_classes, set.labels.data() + s, ev);
    ev.examples += n;
  }
  finish(ev, nats);
  return ev;
}

namespace {
std::vector<float> softmax_row(const float* logits, int k) {
  std::vector<float> p(logits, logits + k);
  const float mx = *std::max_element(p.begin(), p.end());
  double s = 0.0;
  for (auto& v : p) s += (v = std::exp(v - mx));
  for (auto& v : p) v = float(v / s);
  return p;
}
}  // namespace

std::vector<float> classify_text(Model& model, const Tokenizer& tok, const std::string& text) {
  LabelledSet one;
  one.texts = {text};
  one.labels = {0};
  NoGrad no_grad(model);
  TextBatcher tb;
  tb.p = encode_padded(one.texts, tok, model.config().seq_len);
  const size_t idx = 0;
  model.forward(tb.make(&idx, 1));
  return softmax_row(model.logits(), model.config().n_classes);
}

std::vector<float> classify_image(Model& model, const float* image) {
  NoGrad no_grad(model);
  Batch b;
  b.B = 1;
  b.T = model.config().seq_len;
  b.images = image;
  model.forward(b);
  return softmax_row(model.logits(), model.config().n_classes);
}

std::unique_ptr<TrainTask> make_classify_task(RunConfig& rc, const TaskInputs& in, std::unique_ptr<Tokenizer> tok) {
  LabelledSet train = load_labelled(in.data_path);
  LabelledSet test;
  if (!in.test_path.empty()) test = load_labelled(in.test_path, train.class_names);
  if (rc.model.n_classes == 0) rc.model.n_classes = int(train.class_names.size());  // open: the data's
  require(int(train.class_names.size()) == rc.model.n_classes,
          "'" + in.data_path + "' has " + std::to_string(train.class_names.size()) + " classes, but the model has " +
              "'n_classes' = " + std::to_string(rc.model.n_classes));
  rc.model.class_names = train.class_names;
  return std::make_unique<TextClassifyTask>(std::move(tok), std::move(train), std::move(test), rc.model.seq_len,
                                            rc.train.batch_size);
}

std::unique_ptr<TrainTask> make_vision_task(RunConfig& rc, const TaskInputs& in) {
  ModelConfig& m = rc.model;
  ImageSet train = load_image_dataset(in.data_path, "train", m.n_classes);
  // What the config left open, the data decides: the image shape (patches of 4 when
  // they tile it) and the classes.
  if (m.image_channels == 0) {
    m.image_channels = train.channels;
    m.image_height = train.height;
    m.image_width = train.width;
    const int p = train.height % 4 == 0 && train.width % 4 == 0 ? 4 : 1;
    if (m.patch_height == 0) m.patch_height = p;
    if (m.patch_width == 0) m.patch_width = p;
    m.seq_len = (m.image_height / m.patch_height) * (m.image_width / m.patch_width);
  }
  if (m.n_classes == 0) m.n_classes = train.n_classes;
  ImageSet test = load_image_dataset(in.data_path, "test", m.n_classes);
  require(train.channels == m.image_channels && train.height == m.image_height && train.width == m.image_width,
          "'" + in.data_path + "' holds images of " + std::to_string(train.channels) + "x" +
              std::to_string(train.height) + "x" + std::to_string(train.width) + ", but the model takes " +
              std::to_string(m.image_channels) + "x" + std::to_string(m.image_height) + "x" +
              std::to_string(m.image_width));
  if (m.class_names.empty()) {
    auto names = read_class_names(in.data_path);
    if (int(names.size()) == m.n_classes) m.class_names = names;
  }
  // Normalise with the training set's statistics, stored in the model for inference.
  if (m.normalization.is_null()) m.normalization = compute_normalization(train).to_json();
  const Normalization norm = Normalization::from_json(m.normalization, "model config 'normalization'");
  normalize(train, norm);
  normalize(test, norm);
  auto task = std::make_unique<VisionTask>(m, std::move(train), std::move(test), rc.train.batch_size,
                                           rc.train.augment_shift);
  // Shifted-in pixels are black in the original images: after normalisation that is
  // -mean/std (of channel 0; the data sets here are grey).
  task->set_fill(-norm.mean[0] / norm.std[0]);
  return task;
}

}  // namespace gmlp
