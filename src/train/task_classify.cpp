// Classification tasks: sentences (labelled lines, padded batches) and images (IDX
// sets, shift augmentation, stochastic depth), with top-1 and confusion matrices.
#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>

#include "gmlp/classify.h"
#include "gmlp/error.h"
#include "gmlp/image.h"
#include "gmlp/evaluate.h"
#include "gmlp/labelled.h"
#include "gmlp/trainer.h"
#include "train/tasks.h"

namespace gmlp {
namespace {

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
  uint64_t data_fingerprint() const override {
    uint64_t h = fnv1a(train_.labels, fnv1a(test_.labels));
    for (const auto* set : {&train_, &test_})
      for (const std::string& t : set->texts) h = fnv1a(t.data(), t.size() + 1, h);  // with its NUL: texts stay apart
    return h;
  }
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
  nlohmann::json evaluate(Model& model, int batch, int64_t max_batches, Communicator& comm) override {
    if (test_.size() == 0) return nullptr;
    return eval_json(evaluate_texts(model, *tok_, test_, batch, &comm));
  }
  std::string summarize(const nlohmann::json& v) const override { return eval_summary(v); }

 private:
  std::unique_ptr<Tokenizer> tok_;
  LabelledSet train_, test_;
  int B_;
  PaddedBatcher batcher_;
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
  uint64_t data_fingerprint() const override {
    return fnv1a(test_.pixels, fnv1a(test_.labels, fnv1a(train_.pixels, fnv1a(train_.labels))));
  }
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
  nlohmann::json evaluate(Model& model, int batch, int64_t max_batches, Communicator& comm) override {
    if (test_.n == 0) return nullptr;
    return eval_json(evaluate_images(model, test_, batch, &comm));
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

std::unique_ptr<TrainTask> make_classify_task(RunConfig& rc, const TaskInputs& in, std::unique_ptr<Tokenizer> tok) {
  LabelledSet train, test;
  if (in.memory) {
    train = in.memory->texts;
    test = in.memory->test_texts;
    require(train.size() > 0, in.data_name() + ": a classifier trains on labelled texts; none given");
    require(test.size() == 0 || test.class_names == train.class_names,
            in.data_name() + ": the test texts' classes differ from the training texts'");
  } else {
    train = load_labelled(in.data_path);
    if (!in.test_path.empty()) test = load_labelled(in.test_path, train.class_names);
  }
  if (rc.model.n_classes == 0) rc.model.n_classes = int(train.class_names.size());  // open: the data's
  require(int(train.class_names.size()) == rc.model.n_classes,
          "'" + in.data_name() + "' has " + std::to_string(train.class_names.size()) + " classes, but the model has " +
              "'n_classes' = " + std::to_string(rc.model.n_classes));
  rc.model.class_names = train.class_names;
  return std::make_unique<TextClassifyTask>(std::move(tok), std::move(train), std::move(test), rc.model.seq_len,
                                            rc.train.batch_size);
}

std::unique_ptr<TrainTask> make_vision_task(RunConfig& rc, const TaskInputs& in) {
  ModelConfig& m = rc.model;
  ImageSet train = in.memory ? in.memory->images : load_image_dataset(in.data_path, "train", m.n_classes);
  require(train.n > 0, in.data_name() + ": a vision model trains on images; none given");
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
  ImageSet test = in.memory ? in.memory->test_images : load_image_dataset(in.data_path, "test", m.n_classes);
  for (const ImageSet* set : {&train, &test})
    require(set->n == 0 || set->n_classes <= m.n_classes,
            "'" + in.data_name() + "' has labels up to " + std::to_string(set->n_classes - 1) + ", but the model has " +
                "'n_classes' = " + std::to_string(m.n_classes));
  require(test.n == 0 || (test.channels == train.channels && test.height == train.height && test.width == train.width),
          "'" + in.data_name() + "': the test images' shape differs from the training images'");
  require(train.channels == m.image_channels && train.height == m.image_height && train.width == m.image_width,
          "'" + in.data_name() + "' holds images of " + std::to_string(train.channels) + "x" +
              std::to_string(train.height) + "x" + std::to_string(train.width) + ", but the model takes " +
              std::to_string(m.image_channels) + "x" + std::to_string(m.image_height) + "x" +
              std::to_string(m.image_width));
  if (m.class_names.empty() && !in.memory) {
    auto names = read_class_names(in.data_path);
    if (int(names.size()) == m.n_classes) m.class_names = names;
  }
  // Normalise with the training set's statistics, stored in the model for inference.
  if (m.normalization.is_null()) m.normalization = compute_normalization(train).to_json();
  const Normalization norm = Normalization::from_json(m.normalization, "model config 'normalization'");
  normalize(train, norm);
  if (test.n > 0) normalize(test, norm);
  auto task = std::make_unique<VisionTask>(m, std::move(train), std::move(test), rc.train.batch_size,
                                           rc.train.augment_shift);
  // Shifted-in pixels are black in the original images: after normalisation that is
  // -mean/std (of channel 0; the data sets here are grey).
  task->set_fill(-norm.mean[0] / norm.std[0]);
  return task;
}

}  // namespace gmlp
