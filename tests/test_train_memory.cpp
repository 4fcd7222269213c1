// The trainer with data in memory (TrainOptions::data) and the per-line hook
// (TrainOptions::on_log): the same run as from files, stopping from the hook, and the
// checks every in-memory source shares with its file form.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <fstream>
#include <limits>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "gmlp/augment.h"
#include "gmlp/checkpoint.h"
#include "gmlp/error.h"
#include "gmlp/files.h"
#include "gmlp/image.h"
#include "gmlp/labelled.h"
#include "gmlp/trainer.h"
#include "ops/parallel.h"
#include "test_util.h"
#include "train/tasks.h"

namespace gmlp {
namespace {

// A one-layer vision model of width 16, its image shape and classes left to the data.
ModelConfig tiny_vision() {
  return ModelConfig::from_json({{"task", "vision"}, {"d_model", 16}, {"d_ffn", 32}, {"n_layers", 1}}, "test", true);
}

// n random images of sz bytes (each byte the next of mt19937(seed)), image i of class
// i % classes, and the floats the bytes stand for (byte_pixel).
struct RandomImages {
  std::vector<uint8_t> bytes;
  std::vector<float> pixels;
  std::vector<int32_t> labels;
};
RandomImages random_images(int n, size_t sz, int classes, unsigned seed) {
  RandomImages r;
  std::mt19937 gen(seed);
  r.bytes.resize(size_t(n) * sz);
  for (auto& v : r.bytes) v = uint8_t(gen());
  for (uint8_t v : r.bytes) r.pixels.push_back(byte_pixel(v));
  for (int i = 0; i < n; ++i) r.labels.push_back(i % classes);
  return r;
}

// A vision task on d's images: tiny_vision(), batch B, shifts of a pixel and mirror
// images, and what `more` sets of the training config besides; rc holds the run's config.
std::unique_ptr<TrainTask> augmented_task(const TrainData& d, int B, RunConfig& rc,
                                          const std::function<void(TrainConfig&)>& more) {
  rc.model = tiny_vision();
  rc.train.batch_size = B;
  rc.train.augment_shift = 1;
  rc.train.augment_flip = true;
  more(rc.train);
  TaskInputs in;
  in.memory = &d;
  return make_task(rc, in);
}

TrainOptions tiny_lm(const std::string& out) {
  TrainOptions o;
  o.run.model.d_model = 8;
  o.run.model.d_ffn = 16;
  o.run.model.n_layers = 1;
  o.run.model.seq_len = 8;
  o.run.train.batch_size = 2;
  o.run.train.steps = 12;
  o.run.train.log_every = 3;
  o.run.train.eval_every = 6;
  o.run.train.eval_batches = 2;
  o.run.train.warmup = 2;
  o.out_dir = out;
  o.progress_bar = false;
  return o;
}

TEST(TrainMemory, TextAndTokensInMemoryTrainAsTheFileDoes) {
  test::TempDir dir("train_memory");
  const std::string text = read_file(test::kGplText).substr(0, 6000);
  write_file_atomic(dir.file("corpus.txt"), text);
  TrainOptions f = tiny_lm(dir.file("file"));
  f.data_path = dir.file("corpus.txt");
  const TrainSummary a = train(f);

  auto mem = std::make_shared<TrainData>();
  mem->text = text;
  TrainOptions t = tiny_lm(dir.file("text"));
  t.data = mem;
  const TrainSummary b = train(t);

  auto ids = std::make_shared<TrainData>();
  ids->tokens.assign(text.begin(), text.end());  // byte tokenizer: ids are the bytes
  TrainOptions i = tiny_lm(dir.file("ids"));
  i.data = ids;
  const TrainSummary c = train(i);

  EXPECT_EQ(a.last_loss, b.last_loss);
  EXPECT_EQ(a.last_loss, c.last_loss);
  EXPECT_EQ(a.val_metrics, c.val_metrics);
  EXPECT_EQ(test::train_losses(dir.file("file")), test::train_losses(dir.file("ids")));

  // A memory run resumes only with data in memory, and that data must be the same.
  i.resume = true;
  i.extend_to = 15;
  EXPECT_EQ(train(i).steps, 15);
  TrainOptions r = tiny_lm(dir.file("ids"));
  r.resume = true;
  r.data_path = dir.file("corpus.txt");
  EXPECT_NE(test::error_of([&] { train(r); }).find("trained on data in memory"), std::string::npos);
  auto other = std::make_shared<TrainData>();
  other->tokens.assign(text.begin(), text.begin() + 3000);
  r.data = other;
  r.data_path.clear();
  EXPECT_NE(test::error_of([&] { train(r); }).find("has changed since the run started"), std::string::npos);
}

TEST(TrainMemory, OnLogSeesEveryLineAndStopsTheRunWithACheckpoint) {
  test::TempDir dir("train_on_log");
  TrainOptions o = tiny_lm(dir.file("run"));
  o.data_path = test::kGplText;
  std::vector<nlohmann::json> seen;
  o.on_log = [&](const nlohmann::json& line) {
    seen.push_back(line);
    return line["step"].get<int64_t>() < 6;
  };
  const TrainSummary s = train(o);
  EXPECT_TRUE(s.interrupted);
  EXPECT_EQ(s.steps, 6);
  ASSERT_EQ(seen.size(), 3u);  // steps 3 and 6, and the evaluation of step 6
  EXPECT_TRUE(seen[1].contains("loss"));
  EXPECT_TRUE(seen[2].contains("val_loss"));
  EXPECT_EQ(seen, test::read_jsonl(metrics_file(dir.file("run"))));
  EXPECT_EQ(load_model(model_file(dir.file("run")))->config().d_model, 8);
}

TEST(TrainMemory, InMemorySourcesShareTheFileChecks) {
  EXPECT_NE(test::error_of([] { make_labelled({"a", "b"}, {"x"}, {}, "texts"); }).find("texts: 2 texts but 1 labels"),
            std::string::npos);
  EXPECT_NE(test::error_of([] { make_labelled({"a", ""}, {"x", "y"}, {}, "texts"); })
                .find("texts[1]: empty text after the label \"y\""),
            std::string::npos);
  EXPECT_NE(test::error_of([] { make_labelled({"a"}, {"z"}, {"x", "y"}, "test texts"); })
                .find("test texts[0]: label \"z\" is not one of the training classes (x, y)"),
            std::string::npos);
  const LabelledSet s = make_labelled({"a", "b", "c"}, {"y", "x", "y"}, {}, "texts");
  EXPECT_EQ(s.class_names, (std::vector<std::string>{"y", "x"}));
  EXPECT_EQ(s.labels, (std::vector<int32_t>{0, 1, 0}));

  EXPECT_NE(test::error_of([] { make_image_set(std::vector<float>(7), {0, 1}, 1, 2, 2, 0, "imgs"); })
                .find("imgs: 2 labels but 7 pixel values"),
            std::string::npos);
  EXPECT_NE(test::error_of([] { make_image_set(std::vector<float>(8), {0, 3}, 1, 2, 2, 3, "imgs"); })
                .find("imgs: label 3 at index 1 is out of range for 3 classes"),
            std::string::npos);
  EXPECT_NE(test::error_of([] { make_image_set(std::vector<float>(8), {0, -1}, 1, 2, 2, 0, "imgs"); })
                .find("label -1"),
            std::string::npos);
  EXPECT_EQ(make_image_set(std::vector<float>(8), {0, 4}, 1, 2, 2, 0, "imgs").n_classes, 5);
  // Bytes (a Python uint8 array) take the same checks, and are held as bytes.
  EXPECT_NE(test::error_of([] {
              make_image_set(std::vector<uint8_t>(7), {0, 1}, 1, 2, 2, 0, "imgs");
            }).find("imgs: 2 labels but 7 pixel values"),
            std::string::npos);
  EXPECT_NE(test::error_of([] {
              make_image_set(std::vector<uint8_t>(8), {0, 3}, 1, 2, 2, 3, "imgs");
            }).find("imgs: label 3 at index 1 is out of range for 3 classes"),
            std::string::npos);
  EXPECT_NE(test::error_of([] {
              make_image_set(std::vector<uint8_t>(8), {0, 1}, 0, 2, 2, 0, "imgs");
            }).find("has an empty side"),
            std::string::npos);
  const ImageSet b = make_image_set(std::vector<uint8_t>(8, 200), {0, 1}, 1, 2, 2, 0, "imgs");
  EXPECT_TRUE(b.as_bytes && b.pixels.empty() && b.bytes.size() == 8 && b.n == 2);
  std::vector<float> nan_pixel(8, 0.5f);
  nan_pixel[5] = std::numeric_limits<float>::quiet_NaN();
  EXPECT_NE(test::error_of([&] { make_image_set(nan_pixel, {0, 1}, 1, 2, 2, 0, "imgs"); })
                .find("imgs: pixel value nan at index 5 is not finite"),
            std::string::npos);

  EXPECT_NE(test::error_of([] { TextCorpus::from_tokens({1, 2, 256}, 256, 2, 0.f, "ids"); })
                .find("corpus ids: token id 256 at index 2 is outside the vocabulary of 256"),
            std::string::npos);
}

// A vision batch is random_shift's of the images it picks, draw for draw, though the task
// makes its draws first and its copies afterwards, on the team (a batch large enough to
// be threaded): the same RNG gives the same images, labels and shifts, and is left where
// a step-by-step draw leaves it. The images are the task's normalised ones, and what
// shifts into a channel is its black, normalised (two channels: each its own); or, for a
// set held as bytes, its bytes, black a 0.
TEST(TrainMemory, AVisionBatchIsRandomShiftsOfTheImagesItDraws) {
  for (const bool as_bytes : {false, true}) {
    SCOPED_TRACE(as_bytes ? "bytes" : "floats");
    constexpr int n = 37, C = 2, H = 32, W = 32, B = 64, shift = 3;
    std::mt19937 gen(3);
    std::uniform_real_distribution<float> px(0.f, 1.f);
    std::vector<float> pixels(size_t(n) * C * H * W);
    for (float& v : pixels) v = px(gen);
    std::vector<int32_t> labels(n);
    for (int i = 0; i < n; ++i) labels[size_t(i)] = i % 5;
    TrainData d;
    d.images = make_image_set(pixels, labels, C, H, W, 0, "imgs");
    if (as_bytes) {
      d.images.as_bytes = true;
      for (float v : d.images.pixels) d.images.bytes.push_back(uint8_t(v * 255.f));
      d.images.pixels.clear();
    }
    RunConfig rc;
    rc.model = tiny_vision();
    rc.train.batch_size = B;
    rc.train.augment_shift = shift;
    TaskInputs in;
    in.memory = &d;
    auto task = make_task(rc, in);
    ASSERT_GE(int64_t(B) * C * H * W, ops::kParallelValues) << "the copies must go to the team";

    ImageSet ref = d.images;
    const Normalization norm = Normalization::from_json(rc.model.normalization, "normalization");
    if (!as_bytes) normalize(ref, norm);
    const std::vector<float> black = byte_table(norm, C);  // byte 0 of channel c as normalize() makes it: c * 256
    Rng drawn(11), stepwise(11);
    for (int round = 0; round < 2; ++round) {  // the second batch overwrites the first's memory
      const Batch& b = task->next_batch(drawn);
      ASSERT_EQ(b.B, B);
      ASSERT_EQ(b.images == nullptr, as_bytes);
      ASSERT_EQ(b.image_bytes != nullptr, as_bytes);
      std::vector<float> want(ref.image_size());
      std::vector<uint8_t> want_bytes(ref.image_size());
      for (int r = 0; r < B; ++r) {
        const int i = int(stepwise.below(uint64_t(n)));
        EXPECT_EQ(b.targets[r], labels[size_t(i)]) << "row " << r;
        const auto [dy, dx] = draw_shift(shift, stepwise);  // random_shift's draws
        if (as_bytes) {
          shift_image(ref.image_bytes(i), want_bytes.data(), C, H, W, dy, dx, uint8_t(0));
          ASSERT_TRUE(std::equal(want_bytes.begin(), want_bytes.end(), b.image_bytes + size_t(r) * want.size()))
              << "row " << r;
        } else {
          for (int c = 0; c < C; ++c)  // each channel shifts in its own black
            shift_image(ref.image(i) + c * H * W, want.data() + c * H * W, 1, H, W, dy, dx, black[size_t(c) * 256]);
          ASSERT_TRUE(std::equal(want.begin(), want.end(), b.images + size_t(r) * want.size())) << "row " << r;
        }
      }
      EXPECT_EQ(drawn.state(), stepwise.state());
    }
  }
}

// Crops and mirror images: each row is its crop_box's part of the image it draws, resized
// to the set's size and rounded to bytes, mirrored when its draw says so, then shifted;
// the draws come image, shift, crop, mirror, row after row. A set of floats mirrors but
// cannot be cropped.
TEST(TrainMemory, AVisionBatchIsTheCropsAndMirrorImagesItDraws) {
  constexpr int n = 11, C = 3, H = 12, W = 10, B = 24, shift = 1;
  constexpr float min_area = 0.3f;
  const auto [bytes, pixels, labels] = random_images(n, size_t(C) * H * W, 4, 8);
  TrainData d;
  d.images = make_image_set(bytes, labels, C, H, W, 0, "imgs");
  RunConfig rc;
  rc.model = tiny_vision();
  rc.train.batch_size = B;
  rc.train.augment_shift = shift;
  rc.train.augment_crop = min_area;
  rc.train.augment_flip = true;
  TaskInputs in;
  in.memory = &d;
  auto task = make_task(rc, in);
  EXPECT_NE(task->describe().find("crops of 30-100% of the area, mirrored half the time"), std::string::npos)
      << task->describe();
  Rng drawn(21), stepwise(21);
  const size_t sz = size_t(C) * H * W;
  int flipped = 0;
  for (int round = 0; round < 3; ++round) {
    const Batch& b = task->next_batch(drawn);
    ASSERT_TRUE(b.image_bytes);
    for (int r = 0; r < B; ++r) {
      const int i = int(stepwise.below(uint64_t(n)));
      const auto [dy, dx] = draw_shift(shift, stepwise);
      const CropDraw crop = draw_crop(stepwise);
      const bool flip = stepwise.below(2) == 1;
      flipped += flip;
      EXPECT_EQ(b.targets[r], labels[size_t(i)]);
      Image src;
      src.channels = C;
      src.height = H;
      src.width = W;
      for (size_t k = 0; k < sz; ++k) src.pixels.push_back(byte_pixel(bytes[size_t(i) * sz + k]));
      const Image cut = resize_box(src, crop_box(crop, min_area, W, H), H, W);
      std::vector<uint8_t> made(sz), want(sz);
      for (size_t k = 0; k < sz; ++k) made[k] = uint8_t(std::lround(cut.pixels[k] * 255.0f));
      if (flip) flip_image(made.data(), C, H, W);
      shift_image(made.data(), want.data(), C, H, W, dy, dx, uint8_t(0));
      ASSERT_TRUE(std::equal(want.begin(), want.end(), b.image_bytes + size_t(r) * sz))
          << "round " << round << " row " << r;
    }
    EXPECT_EQ(drawn.state(), stepwise.state());
  }
  EXPECT_GT(flipped, 20);
  EXPECT_LT(flipped, 52);
  // Floats: mirrored, never cropped.
  TrainData f;
  f.images = make_image_set(pixels, labels, C, H, W, 0, "floats");
  in.memory = &f;
  RunConfig crop = rc;
  EXPECT_NE(test::error_of([&] { make_task(crop, in); }).find("'train.augment_crop' crops images held as bytes"),
            std::string::npos);
  RunConfig mirror = rc;
  mirror.train.augment_crop = 0;
  mirror.train.augment_shift = 0;
  auto floats = make_task(mirror, in);
  const Normalization norm = Normalization::from_json(mirror.model.normalization, "normalization");
  ImageSet ref = f.images;
  normalize(ref, norm);
  Rng a(4), s2(4);
  const Batch& fb = floats->next_batch(a);
  for (int r = 0; r < B; ++r) {
    const int i = int(s2.below(uint64_t(n)));
    const bool flip = s2.below(2) == 1;
    std::vector<float> want(ref.image(i), ref.image(i) + sz);
    if (flip) flip_image(want.data(), C, H, W);
    ASSERT_TRUE(std::equal(want.begin(), want.end(), fb.images + size_t(r) * sz)) << "row " << r;
  }
}

// Mixed batches (train.mixup, train.cutmix): the rows a batch without mixing makes, drawn
// alike, then draw_mix's draw; rows 2i and 2i + 1 mixed with each other and an odd batch's
// last row with itself, each row weight of itself and the rest of its partner (blended,
// or its partner's box), as the model sees them (byte_table), its targets its label and
// its partner's at that weight. A byte set's mixup sends floats, its CutMix stays bytes;
// a float set mixes in place. A rank's rows (fill_rows, here from an odd row) are the
// whole batch's, their partners made though not their own.
TEST(TrainMemory, AMixedVisionBatchIsItsRowsMixedInPairs) {
  constexpr int n = 9, C = 3, H = 12, W = 10, B = 7;
  constexpr size_t sz = size_t(C) * H * W, hw = size_t(H) * W;
  const auto [bytes, pixels, labels] = random_images(n, sz, 4, 31);
  struct Case {
    const char* name;
    float mixup, cutmix;
    bool floats;
  };
  for (const Case c : {Case{"mixup", 0.8f, 0.f, false}, Case{"cutmix", 0.f, 1.f, false}, Case{"both", 0.8f, 1.f, false},
                       Case{"both, floats", 0.8f, 1.f, true}}) {
    SCOPED_TRACE(c.name);
    TrainData d;
    d.images = c.floats ? make_image_set(pixels, labels, C, H, W, 0, "imgs")
                        : make_image_set(bytes, labels, C, H, W, 0, "imgs");
    auto task_of = [&](float mixup, float cutmix, RunConfig& rc) {
      return augmented_task(d, B, rc, [&](TrainConfig& t) {
        t.mixup = mixup;
        t.cutmix = cutmix;
      });
    };
    RunConfig rc, plain_rc;
    auto mixed = task_of(c.mixup, c.cutmix, rc), plain = task_of(0, 0, plain_rc);
    // Two ranks' shares: rows 3-5 (3's partner 2 another rank's) and 5-6 (5's partner 4
    // another's; 6, the last, its own).
    auto part = task_of(c.mixup, c.cutmix, rc), last = task_of(c.mixup, c.cutmix, rc);
    part->fill_rows(3, 3);
    last->fill_rows(5, 2);
    const std::vector<float> table = byte_table(Normalization::from_json(rc.model.normalization, "norm"), C);
    Rng drawn(5), stepwise(5), parted(5), lasted(5);
    int cuts = 0;
    for (int round = 0; round < 6; ++round) {
      SCOPED_TRACE(round);
      const Batch& m = mixed->next_batch(drawn);
      const Batch& u = plain->next_batch(stepwise);  // the rows unmixed, as floats or bytes
      const MixDraw mix = draw_mix(c.mixup, c.cutmix, H, W, stepwise);
      EXPECT_EQ(drawn.state(), stepwise.state());
      cuts += mix.cut;
      EXPECT_GE(mix.weight, 0.f);
      EXPECT_LE(mix.weight, 1.f);
      if (mix.cut) {
        EXPECT_FLOAT_EQ(mix.weight, 1.f - float((mix.y1 - mix.y0) * (mix.x1 - mix.x0)) / float(H * W));
      }
      // What the model sees of row r's pixel k of channel ch.
      auto seen = [&](int r, size_t k) {
        return u.images ? u.images[size_t(r) * sz + k] : table[k / hw * 256 + u.image_bytes[size_t(r) * sz + k]];
      };
      const bool sends_bytes = !c.floats && c.mixup == 0;
      ASSERT_EQ(m.image_bytes != nullptr, sends_bytes);
      for (int r = 0; r < B; ++r) {
        const int p = (r ^ 1) < B ? r ^ 1 : r;
        EXPECT_EQ(m.targets[r], u.targets[r]);
        EXPECT_EQ(m.mix_targets[r], u.targets[p]);
        EXPECT_EQ(m.mix_weights[r], mix.weight);
        for (size_t k = 0; k < sz; ++k) {
          const int y = int(k % hw / W), x = int(k % W);
          const bool in = mix.cut && y >= mix.y0 && y < mix.y1 && x >= mix.x0 && x < mix.x1;
          if (sends_bytes) {
            ASSERT_EQ(m.image_bytes[size_t(r) * sz + k], u.image_bytes[size_t(in ? p : r) * sz + k]) << r << " " << k;
          } else if (mix.cut || p == r) {
            ASSERT_EQ(m.images[size_t(r) * sz + k], seen(in ? p : r, k)) << r << " " << k;
          } else {
            ASSERT_NEAR(m.images[size_t(r) * sz + k], mix.weight * seen(r, k) + (1.f - mix.weight) * seen(p, k), 1e-6)
                << r << " " << k;
          }
        }
      }
      for (auto [task, rng, first, count] :
           {std::tuple{part.get(), &parted, 3, 3}, std::tuple{last.get(), &lasted, 5, 2}}) {
        const Batch& q = task->next_batch(*rng);
        EXPECT_EQ(rng->state(), drawn.state());
        const size_t from = size_t(first) * sz, to = size_t(first + count) * sz;
        if (sends_bytes)
          EXPECT_TRUE(std::equal(m.image_bytes + from, m.image_bytes + to, q.image_bytes + from)) << first;
        else
          EXPECT_TRUE(std::equal(m.images + from, m.images + to, q.images + from)) << first;
        EXPECT_TRUE(std::equal(m.mix_targets, m.mix_targets + B, q.mix_targets));
      }
    }
    if (c.mixup > 0 && c.cutmix > 0) {
      EXPECT_GT(cuts, 0);
      EXPECT_LT(cuts, 6);
    }
    EXPECT_NE(mixed->describe().find(c.mixup > 0 && c.cutmix > 0 ? "mixup (alpha 0.8) or CutMix (alpha 1) in pairs"
                                     : c.mixup > 0               ? "mixup (alpha 0.8) in pairs"
                                                                 : "CutMix (alpha 1) in pairs"),
              std::string::npos)
        << mixed->describe();
  }
  // Mixing is of images: a text task refuses it.
  RunConfig lm;
  lm.model.d_model = 8;
  lm.model.d_ffn = 16;
  lm.model.n_layers = 1;
  lm.model.seq_len = 8;
  lm.train.mixup = 0.2f;
  TrainData text;
  text.text = "some text to model, long enough for a window or two of it";
  TaskInputs in;
  in.memory = &text;
  EXPECT_NE(test::error_of([&] { make_task(lm, in); })
                .find("'train.mixup', 'train.cutmix', 'train.random_erase', 'train.auto_augment' and "
                      "'train.repeated_aug' are augmentations of images"),
            std::string::npos);
}

// Random erasing: each row's draws are its image, shift, mirroring and erasing, then the
// batch's noise seed; each row is the image as the model sees it (floats: a byte set's
// erased batches go as floats) with its box filled by erase_image's noise for its global
// row, and a rank's rows (fill_rows) are the whole batch's.
TEST(TrainMemory, AnErasedVisionBatchIsItsImagesWithNoiseInTheirBoxes) {
  constexpr int n = 7, C = 2, H = 10, W = 12, B = 6;
  constexpr size_t sz = size_t(C) * H * W;
  const auto [bytes, pixels, labels] = random_images(n, sz, 3, 2);
  // A byte set, sent as floats, and a float set of the values the bytes stand for: the
  // same batches.
  for (const bool floats : {false, true}) {
    SCOPED_TRACE(floats ? "floats" : "bytes");
    TrainData d;
    d.images =
        floats ? make_image_set(pixels, labels, C, H, W, 0, "imgs") : make_image_set(bytes, labels, C, H, W, 0, "imgs");
    RunConfig rc;
    auto task_of = [&] { return augmented_task(d, B, rc, [](TrainConfig& t) { t.random_erase = 0.6f; }); };
    auto task = task_of(), part = task_of();
    part->fill_rows(3, 3);
    EXPECT_NE(task->describe().find("60% erased in part"), std::string::npos) << task->describe();
    const std::vector<float> table = byte_table(Normalization::from_json(rc.model.normalization, "norm"), C);
    Rng drawn(8), stepwise(8), parted(8);
    int erased = 0;
    for (int round = 0; round < 4; ++round) {
      const Batch& b = task->next_batch(drawn);
      const Batch& q = part->next_batch(parted);
      ASSERT_TRUE(b.images && !b.image_bytes);
      std::vector<std::vector<float>> want(B);
      std::vector<EraseDraw> erase(B);
      for (int r = 0; r < B; ++r) {
        const int i = int(stepwise.below(uint64_t(n)));
        const auto [dy, dx] = draw_shift(1, stepwise);
        const bool flip = stepwise.below(2) == 1;
        erase[size_t(r)] = draw_erase(0.6f, H, W, stepwise);
        erased += erase[size_t(r)].on;
        EXPECT_EQ(b.targets[r], labels[size_t(i)]);
        std::vector<uint8_t> made(bytes.begin() + i * sz, bytes.begin() + (i + 1) * sz), moved(sz);
        if (flip) flip_image(made.data(), C, H, W);
        shift_image(made.data(), moved.data(), C, H, W, dy, dx, uint8_t(0));
        for (size_t k = 0; k < sz; ++k) want[size_t(r)].push_back(table[k / (H * W) * 256 + moved[k]]);
      }
      const uint64_t seed = stepwise.next_u64();
      EXPECT_EQ(drawn.state(), stepwise.state());
      for (int r = 0; r < B; ++r) {
        erase_image(want[size_t(r)].data(), C, H, W, erase[size_t(r)], seed, r);
        ASSERT_TRUE(std::equal(want[size_t(r)].begin(), want[size_t(r)].end(), b.images + size_t(r) * sz))
            << "round " << round << " row " << r;
      }
      EXPECT_TRUE(std::equal(b.images + 3 * sz, b.images + 6 * sz, q.images + 3 * sz)) << round;
    }
    EXPECT_GT(erased, 6);
    EXPECT_LT(erased, 22);
  }
}

// RandAugment and AutoAugment (train.auto_augment): each row's draws are its image,
// shift, mirroring and draw_augment's operations; each row is its image mirrored and
// shifted as a batch without them makes it, then augment_image's operations applied
// with the normalisation's mean bytes brought in; the batch stays bytes; and a rank's
// rows (fill_rows) are the whole batch's. A float set, or one of neither 1 nor 3
// channels, is refused.
TEST(TrainMemory, AnAugmentedVisionBatchIsItsImagesWithTheirOperationsApplied) {
  constexpr int n = 7, C = 3, H = 10, W = 12, B = 6;
  constexpr size_t sz = size_t(C) * H * W;
  const auto [bytes, pixels, labels] = random_images(n, sz, 3, 5);
  TrainData d;
  d.images = make_image_set(bytes, labels, C, H, W, 0, "imgs");
  for (const char* spec : {"rand-m9-mstd0.5-inc1", "original"}) {
    SCOPED_TRACE(spec);
    RunConfig rc;
    auto task_of = [&] {
      return augmented_task(d, B, rc, [&](TrainConfig& t) {
        t.auto_augment = spec;
        t.auto_augment_interpolation = "random";
      });
    };
    auto task = task_of(), part = task_of();
    part->fill_rows(3, 3);
    EXPECT_NE(task->describe().find(std::string(spec[0] == 'r' ? "RandAugment" : "AutoAugment") + " \"" + spec + "\""),
              std::string::npos)
        << task->describe();
    const Normalization norm = Normalization::from_json(rc.model.normalization, "norm");
    ASSERT_FALSE(norm.empty());
    uint8_t fill[C];
    for (int c = 0; c < C; ++c) fill[c] = uint8_t(std::nearbyint(norm.mean[size_t(c)] * 255));
    const AugmentPolicy policy = parse_augment_policy(spec, AugInterpolation::random);
    Rng drawn(8), stepwise(8), parted(8);
    int operations = 0, changed = 0;
    for (int round = 0; round < 4; ++round) {
      const Batch& b = task->next_batch(drawn);
      const Batch& q = part->next_batch(parted);
      ASSERT_TRUE(b.image_bytes && !b.images);
      for (int r = 0; r < B; ++r) {
        const int i = int(stepwise.below(uint64_t(n)));
        const auto [dy, dx] = draw_shift(1, stepwise);
        const bool flip = stepwise.below(2) == 1;
        const AugmentDraw ops = draw_augment(policy, stepwise);
        operations += ops.count;
        std::vector<uint8_t> made(bytes.begin() + i * sz, bytes.begin() + (i + 1) * sz), want(sz);
        if (flip) flip_image(made.data(), C, H, W);
        shift_image(made.data(), want.data(), C, H, W, dy, dx, uint8_t(0));
        const std::vector<uint8_t> plain = want;
        augment_image(want.data(), C, H, W, ops, fill);
        changed += want != plain;
        ASSERT_TRUE(std::equal(want.begin(), want.end(), b.image_bytes + size_t(r) * sz))
            << "round " << round << " row " << r;
      }
      EXPECT_EQ(drawn.state(), stepwise.state());
      EXPECT_EQ(parted.state(), drawn.state());
      EXPECT_TRUE(std::equal(b.image_bytes + 3 * sz, b.image_bytes + 6 * sz, q.image_bytes + 3 * sz)) << round;
    }
    EXPECT_GT(operations, 6);
    EXPECT_GT(changed, 4);
  }
  // Pillow's operations are of bytes, in gray or RGB.
  auto refused = [&](TrainData& data) {
    RunConfig rc;
    rc.model = tiny_vision();
    rc.train.auto_augment = "rand-m9";
    TaskInputs in;
    in.memory = &data;
    return test::error_of([&] { make_task(rc, in); });
  };
  TrainData floats, two;
  floats.images = make_image_set(pixels, labels, C, H, W, 0, "imgs");
  EXPECT_NE(refused(floats).find("'train.auto_augment' works on images held as bytes"), std::string::npos);
  two.images =
      make_image_set(std::vector<uint8_t>(bytes.begin(), bytes.begin() + n * 2 * H * W), labels, 2, H, W, 0, "imgs");
  EXPECT_NE(refused(two).find("'train.auto_augment' works on gray or RGB images (Pillow's); these have 2 channels"),
            std::string::npos);
}

// In epochs (train.shuffle), each epoch takes every image (or text window) once, in an
// order of its own; no image is drawn from the run's RNG (which the other draws go on
// taking); and a task that seeks to where a run is draws on as the straight one. With
// train.repeated_aug, an epoch takes the first of its images, each as often, spread.
TEST(TrainMemory, AShuffledTaskTakesEveryExampleOnceAnEpoch) {
  constexpr int n = 12, B = 4;
  std::vector<uint8_t> bytes(size_t(n) * 64);
  for (size_t k = 0; k < bytes.size(); ++k) bytes[k] = uint8_t(k / 64);  // image i: all i
  std::vector<int32_t> labels(n);
  for (int i = 0; i < n; ++i) labels[size_t(i)] = i % 2;
  TrainData d;
  d.images = make_image_set(bytes, labels, 1, 8, 8, 0, "imgs");
  TrainData t;
  for (int i = 0; i < n; ++i) {
    t.texts.texts.push_back(std::string(size_t(i + 1), 'a'));  // 1 to 12 bytes: the window holds each
    t.texts.labels.push_back(i % 2);
  }
  t.texts.class_names = {"x", "y"};
  t.val_texts = t.texts;  // given: no split of the training texts
  auto task_of = [&](const TrainData& data, Task kind, int repeats = 1) {
    RunConfig rc;
    nlohmann::json m = {{"task", name_of(kind)}, {"d_model", 8}, {"d_ffn", 16}, {"n_layers", 1}};
    if (kind == Task::classify) m["seq_len"] = 16;
    rc.model = ModelConfig::from_json(m, "test", true);
    rc.train.batch_size = B;
    rc.train.shuffle = true;
    rc.train.repeated_aug = repeats;
    TaskInputs in;
    in.memory = &data;
    return make_task(rc, in);
  };
  // Which example a row is: a vision row's pixels say; a text row's length does.
  auto picks = [&](TrainTask& task, Task kind, Rng& rng) {
    const Batch& b = task.next_batch(rng);
    std::vector<int> got;
    for (int r = 0; r < B; ++r) {
      if (kind == Task::vision) {
        got.push_back(int(b.image_bytes[size_t(r) * 64]));
      } else {
        got.push_back(b.lengths[r]);
      }
    }
    return got;
  };
  for (const Task kind : {Task::vision, Task::classify}) {
    SCOPED_TRACE(name_of(kind));
    auto task = task_of(kind == Task::vision ? d : t, kind);
    Rng rng(1);
    std::vector<std::vector<int>> epochs(3);
    std::vector<int> all;
    for (int step = 0; step < 3 * n / B; ++step) {
      const auto got = picks(*task, kind, rng);
      epochs[size_t(step * B / n)].insert(epochs[size_t(step * B / n)].end(), got.begin(), got.end());
      all.insert(all.end(), got.begin(), got.end());
    }
    EXPECT_EQ(rng.state(), Rng(1).state()) << "no draw of the run's RNG";
    for (auto& e : epochs) {
      std::vector<int> sorted = e;
      std::sort(sorted.begin(), sorted.end());
      EXPECT_EQ(std::adjacent_find(sorted.begin(), sorted.end()), sorted.end()) << "an example twice in an epoch";
      EXPECT_EQ(sorted.size(), size_t(n));
    }
    EXPECT_NE(epochs[0], epochs[1]);
    auto resumed = task_of(kind == Task::vision ? d : t, kind);
    resumed->seek(int64_t(5) * B);  // step 5: two steps into the second epoch
    Rng r2(1);
    for (int step = 5; step < 3 * n / B; ++step) {
      const auto got = picks(*resumed, kind, r2);
      EXPECT_TRUE(std::equal(got.begin(), got.end(), all.begin() + step * B)) << "step " << step;
    }
    if (kind != Task::vision) continue;
    // Repeated augmentation (train.repeated_aug = 3): an epoch's n rows are the first
    // images of its permutation (here 5: three in a block of nine rows, two in the last
    // three), none more than 3 times, and no two neighbouring rows (the pairs mixup and
    // CutMix mix) one image; from the middle of an epoch too.
    for (const int from : {0, 5}) {
      auto repeated = task_of(d, kind, 3);
      repeated->seek(int64_t(from) * B);
      EXPECT_NE(repeated->describe().find("each image 3 times"), std::string::npos) << repeated->describe();
      Rng r3(1);
      std::vector<int> rows(size_t(from) * B, -1);
      for (int step = from; step < 3 * n / B; ++step) {
        const auto got = picks(*repeated, kind, r3);
        rows.insert(rows.end(), got.begin(), got.end());
      }
      for (int e = from * B / n; e < 3; ++e) {
        const std::vector<int> epoch(rows.begin() + e * n, rows.begin() + (e + 1) * n);
        const std::vector<int> first(all.begin() + e * n, all.begin() + e * n + 5);
        for (int r = 0; r < n; ++r) {
          if (epoch[size_t(r)] < 0) continue;  // before the resumed run's first step
          EXPECT_NE(std::find(first.begin(), first.end(), epoch[size_t(r)]), first.end())
              << "epoch " << e << " row " << r;
          EXPECT_LE(std::count(epoch.begin(), epoch.end(), epoch[size_t(r)]), 3) << "epoch " << e << " row " << r;
          if (r % 2 == 0 && epoch[size_t(r)] >= 0) {
            EXPECT_NE(epoch[size_t(r)], epoch[size_t(r) + 1]) << e << " " << r;
          }
        }
        if (from == 0) {
          for (const int image : first) EXPECT_NE(std::find(epoch.begin(), epoch.end(), image), epoch.end()) << e;
        }
      }
    }
  }
  // Repetition is of a shuffled epoch's images: refused alone, or past 16.
  RunConfig rc;
  rc.train.repeated_aug = 3;
  EXPECT_NE(test::error_of([&] { rc.train.validate(); }).find("'repeated_aug' repeats the images of train.shuffle's"),
            std::string::npos);
  rc.train.shuffle = true;
  rc.train.repeated_aug = 17;
  EXPECT_NE(test::error_of([&] { rc.train.validate(); })
                .find("'repeated_aug' (the times an epoch takes each of its images) "
                      "must be in [1, 16], got 17"),
            std::string::npos);
}

// A rank's share of a batch (TrainTask::fill_rows): every row is drawn, so the labels and
// the RNG are the whole batch's, but only the rank's rows are made, a streamed folder's
// decoded, each the held folder's row; the other rows' memory is not written.
TEST(TrainMemory, AStreamedVisionTaskMakesOnlyTheRowsItIsGiven) {
  test::TempDir dir("train_fill_rows");
  test::write_vision_folder(dir.file("set"), {"a", "b", "c"});
  constexpr int B = 16, first = 4, count = 8;
  auto task_of = [&](bool stream) {
    RunConfig rc;
    rc.model = tiny_vision();
    rc.train.batch_size = B;
    rc.train.augment_shift = 2;
    rc.train.stream_images = stream;
    TaskInputs in;
    in.data_path = dir.file("set");
    return make_task(rc, in);
  };
  auto held = task_of(false), streamed = task_of(true);
  streamed->fill_rows(first, count);
  EXPECT_NE(test::error_of([&] { streamed->fill_rows(12, 8); }).find("rows outside the batch"), std::string::npos);
  Rng a(3), b(3);
  std::vector<uint8_t> outside_before;
  for (int round = 0; round < 3; ++round) {
    const Batch& h = held->next_batch(a);
    const Batch& s = streamed->next_batch(b);
    ASSERT_TRUE(h.image_bytes && s.image_bytes);
    constexpr size_t sz = 64;
    std::vector<uint8_t> outside(s.image_bytes, s.image_bytes + first * sz);
    outside.insert(outside.end(), s.image_bytes + (first + count) * sz, s.image_bytes + B * sz);
    if (round > 0) {
      EXPECT_EQ(outside, outside_before) << "round " << round;
    }
    outside_before = outside;
    EXPECT_TRUE(std::equal(h.targets, h.targets + B, s.targets));
    EXPECT_TRUE(
        std::equal(h.image_bytes + first * sz, h.image_bytes + (first + count) * sz, s.image_bytes + first * sz))
        << "round " << round;
    EXPECT_EQ(a.state(), b.state());
  }
}

// An IDX data set is held as its bytes, which the model normalises as it cuts its patches;
// the run is the one over the floats they stand for, normalised on the host, to the bit:
// every loss, the test accuracy and the weights, with shifts (each channel's black shifted
// in) and stochastic depth, in colour (each channel its own normalisation); and a run over
// the floats resumes one over the bytes (the data's fingerprint is the same).
TEST(TrainMemory, AVisionRunOverBytesIsTheRunOverTheFloatsTheyStandFor) {
  test::TempDir dir("train_bytes");
  constexpr int n = 48, C = 3, H = 8, W = 8;
  std::mt19937 gen(5);
  std::vector<uint8_t> bytes(size_t(n) * C * H * W), test_bytes(size_t(16) * C * H * W);
  for (auto* v : {&bytes, &test_bytes})
    for (size_t k = 0; k < v->size(); ++k) (*v)[k] = uint8_t(gen() % (k / (H * W) % C == 1 ? 64 : 256));
  std::vector<int32_t> labels(n), test_labels(16);
  for (int i = 0; i < n; ++i) labels[size_t(i)] = (bytes[size_t(i) * C * H * W] + bytes[size_t(i) * C * H * W + 9]) % 3;
  for (int i = 0; i < 16; ++i) test_labels[size_t(i)] = i % 3;
  auto as_set = [&](const std::vector<uint8_t>& b, const std::vector<int32_t>& l, bool as_bytes) {
    std::vector<float> f;
    for (uint8_t v : b) f.push_back(float(v) * (1.0f / 255.0f));  // as IDX files were read as floats
    ImageSet s = make_image_set(f, l, C, H, W, 3, "imgs");
    if (as_bytes) {
      s.as_bytes = true;
      s.bytes = b;
      s.pixels.clear();
    }
    return s;
  };
  auto run = [&](bool as_bytes, const std::string& out, int64_t stop_after, bool resume) {
    auto d = std::make_shared<TrainData>();
    d->images = as_set(bytes, labels, as_bytes);
    d->test_images = as_set(test_bytes, test_labels, as_bytes);
    TrainOptions o;
    o.run.model = ModelConfig::from_json(
        {{"task", "vision"}, {"d_model", 16}, {"d_ffn", 32}, {"n_layers", 2}, {"survival_prob", 0.7}}, "test", true);
    o.run.train.batch_size = 8;
    o.run.train.steps = 8;
    o.stop_after = stop_after;
    o.run.train.log_every = 1;
    o.run.train.eval_every = 4;
    o.run.train.augment_shift = 2;
    o.out_dir = out;
    o.progress_bar = false;
    o.data = d;
    o.resume = resume;
    return train(o);
  };
  const TrainSummary floats = run(false, dir.file("floats"), 0, false);
  const TrainSummary from_bytes = run(true, dir.file("bytes"), 0, false);
  EXPECT_EQ(test::train_losses(dir.file("bytes")), test::train_losses(dir.file("floats")));
  EXPECT_EQ(from_bytes.val_metrics, floats.val_metrics);
  const auto a = load_model(model_file(dir.file("floats"))), b = load_model(model_file(dir.file("bytes")));
  ASSERT_EQ(a->num_params(), b->num_params());
  EXPECT_EQ(std::memcmp(a->weights(), b->weights(), sizeof(float) * a->num_params()), 0);
  EXPECT_EQ(a->config().normalization, b->config().normalization);

  EXPECT_TRUE(run(true, dir.file("half"), 4, false).interrupted);
  EXPECT_EQ(run(false, dir.file("half"), 0, true).steps, 8);
  EXPECT_EQ(test::train_losses(dir.file("half")), test::train_losses(dir.file("floats")));
}

}  // namespace
}  // namespace gmlp
