// Classification tasks: sentences (labelled lines, padded batches) and images (IDX
// sets, shift augmentation, stochastic depth), with top-1 and confusion matrices.
#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <optional>

#include "backend/backend.h"
#include "gmlp/augment.h"
#include "gmlp/classify.h"
#include "gmlp/error.h"
#include "gmlp/evaluate.h"
#include "gmlp/image.h"
#include "gmlp/labelled.h"
#include "gmlp/metrics.h"
#include "gmlp/naive_bayes.h"
#include "gmlp/trainer.h"
#include "ops/parallel.h"
#include "train/tasks.h"

namespace gmlp {
namespace {

// The double a float was written as: its shortest decimal, read as a double (0.3f: 0.3).
double decimal(float v) {
  char buf[32];
  const auto end = std::to_chars(buf, buf + sizeof buf - 1, v).ptr;
  *end = 0;
  return std::strtod(buf, nullptr);
}

nlohmann::json eval_json(const ClassEval& ev) {
  return {{"val_loss", ev.loss}, {"val_acc", ev.accuracy}, {"val_examples", ev.examples},
          {"val_confusion", ev.confusion}};
}

std::string eval_summary(const nlohmann::json& v) {
  return "val loss " + std::to_string(v["val_loss"].get<double>()) + " nats, accuracy " +
         std::to_string(v["val_acc"].get<double>());
}

// The test report of a classifier: its scores next to the majority class and naive
// Bayes, both fitted on the same training texts.
nlohmann::json test_report_json(const ClassEval& ev, const LabelledSet& train, const LabelledSet& test) {
  const int k = int(train.class_names.size());
  nlohmann::json r = class_report(ev.confusion, train.class_names);
  r["examples"] = ev.examples;
  r["loss"] = ev.loss;
  r["confusion"] = confusion_json(ev.confusion, train.class_names);
  std::vector<int64_t> count(size_t(k), 0);
  for (int32_t y : train.labels) ++count[size_t(y)];
  const int32_t majority = int32_t(std::max_element(count.begin(), count.end()) - count.begin());
  NaiveBayes nb;
  nb.fit(train);
  std::vector<int32_t> nb_pred(test.size()), maj_pred(test.size(), majority);
  for (size_t i = 0; i < test.size(); ++i) nb_pred[i] = nb.predict(test.texts[i]);
  auto baseline = [&](const std::vector<int32_t>& pred) {
    nlohmann::json b = class_report(confusion_matrix(test.labels, pred, k), train.class_names);
    b.erase("per_class");
    return b;
  };
  r["baselines"] = {{"majority", baseline(maj_pred)}, {"naive_bayes", baseline(nb_pred)}};
  r["baselines"]["majority"]["class"] = train.class_names[size_t(majority)];
  return r;
}

// Holds out round(fraction * n_c) examples of each class c (at least one of a class
// with two or more), chosen by a fixed shuffle: the same split on every run and resume.
void split_validation(LabelledSet& train, LabelledSet& val, float fraction) {
  val.class_names = train.class_names;
  if (fraction <= 0 || train.size() < 2) return;
  const size_t k = train.class_names.size();
  std::vector<std::vector<size_t>> by_class(k);
  for (size_t i = 0; i < train.size(); ++i) by_class[size_t(train.labels[i])].push_back(i);
  Rng rng(0x76616c6964, 5);
  std::vector<char> held(train.size(), 0);
  for (auto& idx : by_class) {
    for (size_t i = idx.size(); i > 1; --i) std::swap(idx[i - 1], idx[size_t(rng.below(i))]);
    size_t take = size_t(std::lround(double(fraction) * double(idx.size())));
    if (take == 0 && idx.size() >= 2) take = 1;
    for (size_t i = 0; i < take && i + 1 < idx.size(); ++i) held[idx[i]] = 1;
  }
  LabelledSet rest;
  rest.class_names = train.class_names;
  for (size_t i = 0; i < train.size(); ++i) {
    LabelledSet& to = held[i] ? val : rest;
    to.texts.push_back(std::move(train.texts[i]));
    to.labels.push_back(train.labels[i]);
  }
  train = std::move(rest);
}

class TextClassifyTask : public TrainTask {
 public:
  TextClassifyTask(std::unique_ptr<Tokenizer> tok, LabelledSet train, LabelledSet val, LabelledSet test,
                   const ModelConfig& cfg, int B, const TrainConfig& tc)
      : tok_(std::move(tok)),
        train_(std::move(train)),
        val_(std::move(val)),
        test_(std::move(test)),
        B_(B),
        idx_(size_t(B)),
        labels_(size_t(B)) {
    // Chunked long texts train on every window, each with its text's label.
    batcher_.p = encode_padded(train_.texts, *tok_, cfg.window(), cfg.long_text);
    if (tc.shuffle) order_.emplace(batcher_.p.rows, tc.seed);
  }
  std::string describe() const override {
    const auto& p = batcher_.p;
    std::string d = std::to_string(train_.size()) + " train / " + std::to_string(val_.size()) + " validation / " +
                    std::to_string(test_.size()) + " test texts, " + std::to_string(train_.class_names.size()) +
                    " classes, window " + std::to_string(p.T);
    if (p.truncated) {
      d += " (" + std::to_string(p.truncated) + " training texts longer";
      if (p.rows > int(train_.size())) d += ", " + std::to_string(p.rows) + " windows";
      d += ")";
    }
    return d + (order_ ? ", shuffled each epoch" : "");
  }
  int64_t data_signature() const override {
    return int64_t(train_.size()) * 1000003 + int64_t(test_.size()) + int64_t(val_.size()) * 7919;
  }
  uint64_t data_fingerprint() const override {
    uint64_t h = fnv1a(train_.labels, fnv1a(test_.labels, fnv1a(val_.labels)));
    for (const auto* set : {&train_, &test_, &val_})
      for (const std::string& t : set->texts) h = fnv1a(t.data(), t.size() + 1, h);  // with its NUL: texts stay apart
    return h;
  }
  const Batch& next_batch(Rng& rng) override {
    for (int b = 0; b < B_; ++b) {
      idx_[size_t(b)] = order_ ? size_t(order_->next()) : size_t(rng.below(uint64_t(batcher_.p.rows)));
      labels_[size_t(b)] = train_.labels[size_t(batcher_.p.owner[idx_[size_t(b)]])];
    }
    batch_ = batcher_.make(idx_.data(), B_);
    batch_.targets = labels_.data();
    return batch_;
  }
  void seek(int64_t drawn) override {
    if (order_) order_->seek(drawn);
  }
  int64_t units_per_batch() const override { return B_; }
  const char* unit() const override { return "sentences"; }
  int64_t examples() const override { return batcher_.p.rows; }
  nlohmann::json evaluate(Model& model, int batch, int64_t max_batches, Communicator& comm) override {
    if (val_.size() == 0) return nullptr;
    const ClassEval ev = evaluate_texts(model, *tok_, val_, batch, &comm);
    nlohmann::json j = eval_json(ev);
    j["val_macro_f1"] = class_report(ev.confusion, train_.class_names)["macro_f1"];
    return j;
  }
  std::string summarize(const nlohmann::json& v) const override { return eval_summary(v); }
  nlohmann::json test_report(Model& model, int batch) override {
    if (test_.size() == 0) return nullptr;
    return test_report_json(evaluate_texts(model, *tok_, test_, batch), train_, test_);
  }

 private:
  std::unique_ptr<Tokenizer> tok_;
  LabelledSet train_, val_, test_;
  int B_;
  PaddedBatcher batcher_;
  std::optional<EpochOrder> order_;  // train.shuffle: the windows in epochs
  std::vector<size_t> idx_;
  std::vector<int32_t> labels_;
  Batch batch_;
};

// Images as the data gave them: floats (normalised here, in place), or the bytes of an
// IDX file, a quarter of the memory to hold, shift and send to a device, which the model
// normalises as it cuts its patches (to the same floats: Batch::image_bytes). A batch is
// of the training set's kind.
class VisionTask : public TrainTask {
 public:
  VisionTask(const ModelConfig& cfg, ImageSet train, ImageSet test, int B, const TrainConfig& tc,
             const Normalization& norm)
      : cfg_(cfg),
        train_(std::move(train)),
        test_(std::move(test)),
        B_(B),
        shift_(tc.augment_shift),
        crop_(tc.augment_crop),
        flip_(tc.augment_flip),
        mixup_(tc.mixup),
        cutmix_(tc.cutmix),
        erase_(tc.random_erase),
        policy_(parse_augment_policy(tc.auto_augment, parse_augment_interpolation(tc.auto_augment_interpolation))),
        auto_augment_(tc.auto_augment),
        table_(byte_table(norm, train_.channels)),
        picks_(size_t(B)),
        labels_(size_t(B)),
        keep_(size_t(cfg.n_layers) * B) {
    if (tc.shuffle) order_.emplace(train_.n, tc.seed, tc.repeated_aug);
    if (!policy_.empty()) {
      require(train_.as_bytes,
              "'train.auto_augment' works on images held as bytes (an IDX set, an image folder); this "
              "set is of floats");
      require(train_.channels == 1 || train_.channels == 3,
              "'train.auto_augment' works on gray or RGB images (Pillow's); these have " +
                  std::to_string(train_.channels) + " channels");
      // What the geometric operations bring in: the mean image's bytes, as timm's
      // img_mean is the normalisation's mean (Python's round of the double its config
      // writes: the float's shortest decimal), or its gray 128 where there is none.
      for (int c = 0; c < train_.channels; ++c)
        fill_[c] =
            norm.empty() ? 128 : uint8_t(std::clamp(std::nearbyint(decimal(norm.mean[size_t(c)]) * 255.0), 0.0, 255.0));
    }
    place_batches(cpu_backend());
    fill_rows(0, B);
    batch_.B = B;
    batch_.T = cfg.seq_len;
    batch_.targets = labels_.data();
    if (mixes()) {
      mix_labels_.resize(size_t(B));
      mix_weights_.resize(size_t(B));
      batch_.mix_targets = mix_labels_.data();
      batch_.mix_weights = mix_weights_.data();
    }
    if (cfg.survival_prob < 1.f) batch_.keep = keep_.data();
  }
  std::string describe() const override {
    return std::to_string(train_.n) + " train / " + std::to_string(test_.n) + " test images of " +
           std::to_string(train_.channels) + "x" + std::to_string(train_.height) + "x" + std::to_string(train_.width) +
           ", " + std::to_string(cfg_.seq_len) + " patches, " + std::to_string(cfg_.n_classes) + " classes" +
           (shift_ ? ", shifts up to " + std::to_string(shift_) + " px" : "") +
           (crop_ > 0 ? ", crops of " + std::to_string(int(std::lround(crop_ * 100))) + "-100% of the area" : "") +
           (flip_ ? ", mirrored half the time" : "") + augmenting() + erasing() + mixing() +
           (train_.streamed() ? ", streamed from their files" : "") + (order_ ? ", shuffled each epoch" : "") +
           (order_ && order_->repeats() > 1 ? ", each image " + std::to_string(order_->repeats()) + " times an epoch"
                                            : "");
  }
  int64_t data_signature() const override { return int64_t(train_.n) * 1000003 + test_.n; }
  // Over the images as the model sees them, normalised: a set read as floats by an earlier
  // build has the fingerprint it has now as bytes, so its runs resume. A streamed set's is
  // over its files' names and labels (hashing their images would decode the set), so an
  // unreadable file that stopped a run can be replaced by a readable one and the run resumed.
  uint64_t data_fingerprint() const override {
    return fingerprint(test_, fnv1a(test_.labels, fingerprint(train_, fnv1a(train_.labels))));
  }
  const Batch& next_batch(Rng& rng) override {
    // The draws first, each row's in turn: an image, its shift (random_shift's order),
    // its crop, its mirroring, its RandAugment or AutoAugment and its erasing (each only
    // when asked for, so a run without them draws as it did before them); then the
    // batch's mixing and the erasing noise's seed, when asked for; then the images, nearly
    // all of a batch's time (gMLP-S/16's 64 images: 12.8 MB of copies), on the team.
    for (int b = 0; b < B_; ++b) {
      Pick& p = picks_[size_t(b)];
      p.image = order_ ? int(order_->next()) : int(rng.below(uint64_t(train_.n)));
      p.shift = draw_shift(shift_, rng);
      if (crop_ > 0) p.crop = draw_crop(rng);
      p.flip = flip_ && rng.below(2) == 1;
      if (!policy_.empty()) p.augment = draw_augment(policy_, rng);
      if (erase_ > 0) p.erase = draw_erase(erase_, train_.height, train_.width, rng);
      labels_[size_t(b)] = train_.labels[size_t(p.image)];
    }
    if (mixes()) {
      mix_ = draw_mix(mixup_, cutmix_, train_.height, train_.width, rng);
      for (int b = 0; b < B_; ++b) {
        mix_labels_[size_t(b)] = labels_[size_t(partner(b))];
        mix_weights_[size_t(b)] = mix_.weight;
      }
    }
    if (erase_ > 0) erase_seed_ = rng.next_u64();
    // Only the rows this rank takes are made (fill_rows), and a mixed batch's partners of
    // them; the others' images are not read, nor decoded, nor cropped. A row streamed or
    // cropped is made into decoded_ first (its crop's part of the image, resized), then
    // mirrored, shifted and augmented (train.auto_augment).
    const size_t sz = train_.image_size();
    const bool made = train_.streamed() || crop_ > 0;
    if (made) {
      for (int r = 0; r < make_count_; ++r) {
        which_[size_t(r)] = picks_[size_t(make_first_ + r)].image;
        crops_[size_t(r)] = picks_[size_t(make_first_ + r)].crop;
      }
      try {
        read_images(train_, which_.data(), make_count_, decoded_.data(), crop_ > 0 ? crops_.data() : nullptr, crop_);
      } catch (const Error& e) {
        if (!train_.streamed()) throw;
        throw Error(std::string(e.what()) +
                    " (a streamed image: replace the file with a readable image of the same name, and --resume "
                    "continues from the run's last checkpoint, if it wrote one)");
      }
    }
    const int C = train_.channels, H = train_.height, W = train_.width;
    // RandAugment's operations cost far more a value than the copies (a bicubic map's 16
    // taps): a batch of small images (MNIST's) is threaded for them too.
    const int64_t per_value = policy_.empty() ? 1 : 16;
    ops::parallel_for_if(make_count_, int64_t(make_count_) * int64_t(sz) * per_value, ops::kParallelValues, [&](int r) {
      const int b = make_first_ + r;
      const Pick& p = picks_[size_t(b)];
      const auto [dy, dx] = p.shift;
      // What shifts in is black: byte 0, or in a float set (normalised) each channel's
      // normalised black, a channel at a time.
      if (train_.as_bytes) {
        uint8_t* row = decoded_.data() + size_t(r) * sz;
        const uint8_t* src = made ? row : train_.image_bytes(p.image);
        if (p.flip) {
          if (!made) std::memcpy(row, src, sz);
          flip_image(row, C, H, W);
          src = row;
        }
        uint8_t* out = bytes_.data() + size_t(b) * sz;
        shift_image(src, out, C, H, W, dy, dx, uint8_t(0));
        augment_image(out, C, H, W, p.augment, fill_);
      } else {
        const float* src = train_.image(p.image);
        if (p.flip) {
          float* row = flipped_.data() + size_t(r) * sz;
          std::memcpy(row, src, sz * sizeof(float));
          flip_image(row, C, H, W);
          src = row;
        }
        for (int c = 0; c < C; ++c) {
          const size_t at = size_t(c) * H * W;
          shift_image(src + at, images_.data() + size_t(b) * sz + at, 1, H, W, dy, dx, table_[size_t(c) * 256]);
        }
      }
    });
    // Sent as floats (floats_out), the rows made are the model's values from here on:
    // erased, then mixed.
    if (floats_out() || erase_ > 0)
      ops::parallel_for_if(make_count_, int64_t(make_count_) * int64_t(sz), ops::kParallelValues, [&](int r) {
        const int b = make_first_ + r;
        float* row = images_.data() + size_t(b) * sz;
        if (floats_out()) to_values(bytes_.data() + size_t(b) * sz, row);
        erase_image(row, C, H, W, picks_[size_t(b)].erase, erase_seed_, b);
      });
    if (mixes()) mix_rows();
    if (batch_.keep) draw_keep(cfg_, B_, rng, keep_.data());
    return batch_;
  }
  void fill_rows(int first, int count) override {
    require(first >= 0 && count >= 0 && first + count <= B_, "VisionTask::fill_rows: rows outside the batch");
    // A mixed row needs its partner made too: the pairs the rows touch.
    make_first_ = mixes() ? first & ~1 : first;
    const int end = mixes() && count > 0 ? std::min(B_, (first + count + 1) & ~1) : first + count;
    make_count_ = count > 0 ? end - make_first_ : 0;
    which_.resize(size_t(make_count_));
    crops_.resize(size_t(make_count_));
    if (train_.as_bytes && (train_.streamed() || crop_ > 0 || flip_))
      decoded_.resize(size_t(make_count_) * train_.image_size());
    if (!train_.as_bytes && flip_) flipped_.resize(size_t(make_count_) * train_.image_size());
  }
  void seek(int64_t drawn) override {
    if (order_) order_->seek(drawn);
  }
  int64_t units_per_batch() const override { return B_; }
  const char* unit() const override { return "images"; }
  int64_t examples() const override { return train_.n; }
  // The image sets have no validation split: evaluate() reports the test split, which
  // must not choose the model.
  bool selects_on_validation() const override { return false; }
  nlohmann::json evaluate(Model& model, int batch, int64_t max_batches, Communicator& comm) override {
    if (test_.n == 0) return nullptr;
    return eval_json(evaluate_images(model, test_, batch, &comm));
  }
  std::string summarize(const nlohmann::json& v) const override { return eval_summary(v); }
  void place_batches(Backend& be) override {
    const size_t n = size_t(B_) * train_.image_size();
    if (train_.as_bytes) {
      bytes_ = HostBuffer<uint8_t>(be, n);
      batch_.image_bytes = bytes_.data();
    }
    // Blended or erased bytes are no longer bytes: mixup and random erasing send a byte
    // set's batches as floats.
    if (!train_.as_bytes || floats_out()) {
      images_ = HostBuffer<float>(be, n);
      batch_.images = images_.data();
      batch_.image_bytes = nullptr;
    }
  }

 private:
  bool mixes() const { return mixup_ > 0 || cutmix_ > 0; }
  // A byte set whose batches go to the model as floats.
  bool floats_out() const { return train_.as_bytes && (mixup_ > 0 || erase_ > 0); }
  // The rows' partners (MixDraw): 2i and 2i + 1, an odd batch's last row itself.
  int partner(int b) const { return (b ^ 1) < B_ ? b ^ 1 : b; }
  std::string augmenting() const {
    if (policy_.empty()) return "";
    return std::string(", ") + (policy_.rand ? "RandAugment" : "AutoAugment") + " \"" + auto_augment_ + "\"";
  }
  std::string erasing() const {
    if (erase_ <= 0) return "";
    char buf[48];
    std::snprintf(buf, sizeof buf, ", %g%% erased in part", double(erase_) * 100);
    return buf;
  }
  std::string mixing() const {
    if (!mixes()) return "";
    char buf[96];
    if (mixup_ > 0 && cutmix_ > 0)
      std::snprintf(buf, sizeof buf, ", mixup (alpha %g) or CutMix (alpha %g) in pairs", double(mixup_),
                    double(cutmix_));
    else
      std::snprintf(buf, sizeof buf, ", %s (alpha %g) in pairs", mixup_ > 0 ? "mixup" : "CutMix",
                    double(mixup_ > 0 ? mixup_ : cutmix_));
    return buf;
  }
  // Mixes the pairs that the rank's rows are in, once they are made, in place: a byte
  // batch's (CutMix alone: a swap of the box) or a float one's (a float set's, or a byte
  // set's sent as floats): row r becomes weight * r + (1 - weight) * partner(r), or r with
  // its partner's box, as the model sees them.
  void mix_rows() {
    const int C = train_.channels, H = train_.height, W = train_.width;
    const size_t sz = train_.image_size(), hw = size_t(H) * W;
    const float own = mix_.weight, other = 1.f - mix_.weight;
    const MixDraw m = mix_;
    auto swap_box = [&](auto* x, auto* y) {
      for (int c = 0; c < C; ++c)
        for (int yy = m.y0; yy < m.y1; ++yy) {
          const size_t at = size_t(c) * hw + size_t(yy) * W;
          std::swap_ranges(x + at + m.x0, x + at + m.x1, y + at + m.x0);
        }
    };
    const bool floats = !train_.as_bytes || floats_out();
    const int pairs = (make_count_ + 1) / 2;
    ops::parallel_for_if(pairs, int64_t(make_count_) * int64_t(sz), ops::kParallelValues, [&](int i) {
      const int a = make_first_ + 2 * i, b = partner(a);
      if (b == a) return;  // mixed with itself: as it is
      if (!floats) return swap_box(bytes_.data() + size_t(a) * sz, bytes_.data() + size_t(b) * sz);
      float *x = images_.data() + size_t(a) * sz, *y = images_.data() + size_t(b) * sz;
      if (m.cut) return swap_box(x, y);
      for (size_t k = 0; k < sz; ++k) {
        const float xa = x[k], yb = y[k];
        x[k] = own * xa + other * yb;
        y[k] = own * yb + other * xa;
      }
    });
  }

  uint64_t fingerprint(const ImageSet& set, uint64_t h) const {
    if (set.streamed()) {
      h = fnv1a("streamed", 8, h);
      for (int i = 0; i < set.n; ++i) {
        // The class folder and file names, not where the set lies.
        const std::filesystem::path p(set.files[size_t(i)]);
        const std::string name = p.parent_path().filename().string() + "/" + p.filename().string();
        h = fnv1a(name.data(), name.size() + 1, h);
      }
      return h;
    }
    if (!set.as_bytes) return fnv1a(set.pixels, h);
    std::vector<float> image(set.image_size());
    for (int i = 0; i < set.n; ++i) {
      to_values(set.image_bytes(i), image.data());
      h = fnv1a(image, h);
    }
    return h;
  }
  // An image's bytes as the values the model makes of them (table_), channel by channel.
  void to_values(const uint8_t* bytes, float* values) const {
    const size_t hw = size_t(train_.height) * train_.width;
    for (int c = 0; c < train_.channels; ++c) {
      const float* t = table_.data() + size_t(c) * 256;
      for (size_t k = size_t(c) * hw; k < size_t(c + 1) * hw; ++k) values[k] = t[bytes[k]];
    }
  }

  ModelConfig cfg_;
  ImageSet train_, test_;
  // A row's draws: its image, shift, crop (augment_crop > 0), whether it is mirrored, its
  // RandAugment or AutoAugment operations, and its erasing.
  struct Pick {
    int image = 0;
    std::pair<int, int> shift;
    CropDraw crop;
    bool flip = false;
    AugmentDraw augment;
    EraseDraw erase;
  };
  int B_, shift_;
  float crop_;
  bool flip_;
  float mixup_, cutmix_;                 // Beta's alphas (0: off)
  float erase_;                          // random erasing's probability (0: off)
  AugmentPolicy policy_;                 // train.auto_augment's (empty: none)
  std::string auto_augment_;             // as given
  uint8_t fill_[3] = {128, 128, 128};    // what its geometric operations bring in
  uint64_t erase_seed_ = 0;              // this batch's erasing noise's
  MixDraw mix_;                          // this batch's mixing
  std::vector<int32_t> mix_labels_;      // each row's partner's label
  std::vector<float> mix_weights_;       // and its own label's weight
  std::vector<float> table_;             // byte_table: what the model makes of each byte
  HostBuffer<float> images_;             // a batch of a float set's images
  HostBuffer<uint8_t> bytes_;            // or of a byte set's
  std::vector<Pick> picks_;              // each row's draws
  std::optional<EpochOrder> order_;      // train.shuffle: the images in epochs
  int make_first_ = 0, make_count_ = 0;  // the rows next_batch makes (fill_rows'), with their partners
  std::vector<int> which_;               // streamed or cropped: those rows' images
  std::vector<CropDraw> crops_;          // and crops
  std::vector<uint8_t> decoded_;         // the rows made (and mirrored), unshifted
  std::vector<float> flipped_;           // a float set's rows mirrored
  std::vector<int32_t> labels_;
  std::vector<float> keep_;
  Batch batch_;
};

// compute_normalization, the ranks of a job sharing a streamed set's pass (which decodes
// every image, ImageNet's 1.28 million): each sums its block of the images, and the whole
// job's sums, gathered in image order (the others' entries are zeros, which add exactly),
// give every rank the one process's statistics, to the bit. A held set's pass only reads
// memory, and each rank takes it whole.
Normalization training_normalization(const ImageSet& set, Communicator* comm) {
  if (!set.streamed()) return compute_normalization(set);
  const int P = comm ? comm->size() : 1, rank = comm ? comm->rank() : 0;
  const size_t per = size_t(set.channels) * 2;
  std::vector<double> sums(size_t(set.n) * per, 0.0);
  const Block mine = block_of(size_t(set.n), rank, P);
  try {
    image_sums(set, int(mine.begin), int(mine.size()), sums.data() + mine.begin * per);
  } catch (const Error& e) {
    throw Error(std::string(e.what()) +
                " (the pass over the training images that computes their normalisation: replace the file with a "
                "readable image, or give 'model.normalization' to skip the pass)");
  }
  if (P > 1) comm->allreduce_sum(sums.data(), sums.size());
  return normalization_of_sums(sums.data(), set.n, set.channels, size_t(set.height) * set.width);
}

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
  LabelledSet train, test, val;
  if (in.memory) {
    train = in.memory->texts;
    test = in.memory->test_texts;
    val = in.memory->val_texts;
    require(train.size() > 0, in.data_name() + ": a classifier trains on labelled texts; none given");
    for (const auto& [set, what] : {std::pair{&test, "test"}, std::pair{&val, "validation"}})
      require(set->size() == 0 || set->class_names == train.class_names,
              in.data_name() + ": the " + what + " texts' classes differ from the training texts'");
  } else {
    train = load_labelled(in.data_path);
    if (!in.test_path.empty()) test = load_labelled(in.test_path, train.class_names);
    if (!in.val_path.empty()) val = load_labelled(in.val_path, train.class_names);
  }
  // Validation texts given (a file or in memory) replace the split of the training texts.
  if (val.size() == 0) split_validation(train, val, rc.train.val_fraction);
  if (in.join_validation) {
    for (size_t i = 0; i < val.size(); ++i) {
      train.texts.push_back(std::move(val.texts[i]));
      train.labels.push_back(val.labels[i]);
    }
    val = LabelledSet{{}, {}, train.class_names};
  }
  if (rc.model.n_classes == 0) rc.model.n_classes = int(train.class_names.size());  // open: the data's
  // std::string("'") first, here and below: GCC 12 warns (-Wrestrict, a false positive,
  // its bug 105651) on a literal + std::string once inlined.
  require(int(train.class_names.size()) == rc.model.n_classes,
          std::string("'") + in.data_name() + "' has " + std::to_string(train.class_names.size()) + " classes, but the model has " +
              "'n_classes' = " + std::to_string(rc.model.n_classes));
  rc.model.class_names = train.class_names;
  return std::make_unique<TextClassifyTask>(std::move(tok), std::move(train), std::move(val), std::move(test), rc.model,
                                            rc.train.batch_size, rc.train);
}

std::unique_ptr<TrainTask> make_vision_task(RunConfig& rc, const TaskInputs& in) {
  ModelConfig& m = rc.model;
  // An image folder's classes are its folders' names (or the config's names, when it has
  // them); an IDX set's come from classes.txt below.
  std::vector<std::string> names = m.class_names;
  // Streamed or held, an image folder's splits alike (an IDX set, and images given in
  // memory, are held whichever).
  const bool stream = rc.train.stream_images;
  ImageSet train = in.memory ? in.memory->images
                             : load_image_dataset(in.data_path, "train", m.n_classes,
                                                  {m.image_channels, m.image_height, m.image_width}, &names, stream);
  require(train.n > 0, in.data_name() + ": a vision model trains on images; none given");
  // What the config left open, the data decides: the image shape, or what of it is 0
  // (what it sets, an image folder's images are brought to; an IDX set's must have),
  // patches of 4 when they tile it, and the classes.
  if (m.image_channels == 0 || m.image_height == 0 || m.image_width == 0) {
    if (m.image_channels == 0) m.image_channels = train.channels;
    if (m.image_height == 0) m.image_height = train.height;
    if (m.image_width == 0) m.image_width = train.width;
    const int p = m.image_height % 4 == 0 && m.image_width % 4 == 0 ? 4 : 1;
    if (m.patch_height == 0) m.patch_height = p;
    if (m.patch_width == 0) m.patch_width = p;
    m.seq_len = (m.image_height / m.patch_height) * (m.image_width / m.patch_width);
  }
  if (m.n_classes == 0) m.n_classes = train.n_classes;
  ImageSet test = in.memory ? in.memory->test_images
                            : load_image_dataset(in.data_path, "test", m.n_classes,
                                                 {train.channels, train.height, train.width}, &names, stream);
  for (const ImageSet* set : {&train, &test})
    require(set->n == 0 || set->n_classes <= m.n_classes,
            std::string("'") + in.data_name() + "' has labels up to " + std::to_string(set->n_classes - 1) + ", but the model has " +
                "'n_classes' = " + std::to_string(m.n_classes));
  require(test.n == 0 || (test.channels == train.channels && test.height == train.height && test.width == train.width),
          std::string("'") + in.data_name() + "': the test images' shape differs from the training images'");
  require(train.channels == m.image_channels && train.height == m.image_height && train.width == m.image_width,
          std::string("'") + in.data_name() + "' holds images of " + std::to_string(train.channels) + "x" +
              std::to_string(train.height) + "x" + std::to_string(train.width) + ", but the model takes " +
              std::to_string(m.image_channels) + "x" + std::to_string(m.image_height) + "x" +
              std::to_string(m.image_width));
  if (m.class_names.empty() && !names.empty()) {
    // An image folder's: the model keeps them, or its test folders and `gmlp eval`'s could
    // not be matched to its classes by name.
    require(int(names.size()) == m.n_classes, [&] {
      return "'" + in.data_name() + "' has " + std::to_string(names.size()) + " class folders, but the model has " +
             "'n_classes' = " + std::to_string(m.n_classes);
    });
    m.class_names = names;
  } else if (m.class_names.empty() && !in.memory) {
    names = read_class_names(in.data_path);
    if (int(names.size()) == m.n_classes) m.class_names = names;
  }
  // Normalise with the training set's statistics, stored in the model for inference.
  if (m.normalization.is_null()) m.normalization = training_normalization(train, in.comm).to_json();
  const Normalization norm = Normalization::from_json(m.normalization, "model config 'normalization'");
  for (ImageSet* set : {&train, &test})
    if (set->n > 0 && !set->as_bytes) normalize(*set, norm);
  require(rc.train.augment_crop == 0.0f || train.as_bytes,
          "'train.augment_crop' crops images held as bytes (an image folder, an IDX set, arrays of uint8); these "
          "are floats");
  return std::make_unique<VisionTask>(m, std::move(train), std::move(test), rc.train.batch_size, rc.train, norm);
}

}  // namespace gmlp
