// End-to-end runs of the non-LM tasks through the real `gmlp` binary, on tiny data
// written into temp dirs: masked-LM pretraining, sentence classification (train, eval,
// classify, finetune from the masked LM), vision on a synthetic IDX set (train, eval,
// classify-image), the s(Z) ablation, exact resumption, and clear failures.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <map>
#include <random>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

#include "gmlp/bench.h"
#include "gmlp/checkpoint.h"
#include "gmlp/files.h"
#include "gmlp/safetensors.h"
#include "gmlp/tokenizer.h"
#include "gmlp/threads.h"
#include "gmlp/trainer.h"
#include "ops/ops.h"
#include "test_util.h"

namespace gmlp {
namespace {

namespace fs = std::filesystem;
using test::run_command;
using test::write_sentences;

const std::string kText = test::kGplText;
// A model that trains a step in about a millisecond.
const std::string kTiny =
    " --set model.d_model=16 --set model.d_ffn=32 --set model.n_layers=2 --set model.seq_len=16"
    " --batch-size 8 --set train.warmup=2 --set train.eval_batches=4 --no-progress";

std::string gmlp() { return test::gmlp_exe(); }

using test::read_jsonl;
using test::train_losses;

bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

// Two checkpoints hold the same tensors, bit for bit.
::testing::AssertionResult same_weights(const std::string& a, const std::string& b) {
  const auto fa = SafeTensorsFile::load(a), fb = SafeTensorsFile::load(b);
  if (fa.names() != fb.names()) return ::testing::AssertionFailure() << "different tensor names";
  for (const auto& n : fa.names())
    if (fa.read_f32(n) != fb.read_f32(n)) return ::testing::AssertionFailure() << "tensor " << n << " differs";
  return ::testing::AssertionSuccess();
}

// ---- synthetic data


using test::quadrant_image;
using test::write_idx;
using test::write_pgm;
using test::write_vision_folder;
using test::write_vision_set;

const std::vector<std::string> kQuadrants = {"top-left", "top-right", "bottom-left"};

const std::string kVisionTiny =
    " --task vision --set model.d_model=16 --set model.d_ffn=32 --set model.n_layers=2 --batch-size 16"
    " --set train.warmup=5 --set train.min_lr=3e-3 --lr 1e-2 --no-progress";

// ---- masked LM

TEST(TasksCli, MaskedLmTrainsAndItsCheckpointHasTheSpecials) {
  test::TempDir dir("tasks_mlm");
  const std::string out = dir.file("run");
  auto r = run_command(gmlp() + " train --task mlm --data " + kText + " --out " + out +
                       " --steps 20 --eval-every 10 --log-every 5" + kTiny);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_TRUE(contains(r.output, "perplexity")) << r.output;
  int vals = 0;
  for (const auto& j : read_jsonl(metrics_file(out)))
    if (j.contains("val_ppl")) {
      ++vals;
      EXPECT_GT(j["val_ppl"].get<double>(), 1.0);
      EXPECT_LT(j["val_ppl"].get<double>(), 400.0) << "a masked byte model starts near 258";
      EXPECT_GT(j["val_masked"].get<int64_t>(), 0);
    }
  EXPECT_EQ(vals, 2);
  EXPECT_EQ(train_losses(out).size(), 4u);
  auto m = load_model(model_file(out));
  EXPECT_EQ(m->config().task, Task::mlm);
  EXPECT_EQ(m->config().vocab_size, 258) << "[PAD] and [MASK] appended to the 256 bytes";
  auto tok = tokenizer_from_json(m->config().tokenizer);
  EXPECT_EQ(tok->pad_id(), 256);
  EXPECT_EQ(tok->mask_id(), 257);
  EXPECT_EQ(m->param("head.weight").shape, (std::vector<int64_t>{258, 16}));
  // gmlp eval scores a masked LM by its perplexity on a fixed masking: the same twice,
  // and consistent with its loss.
  r = run_command(gmlp() + " eval --json --model " + out + " --data " + kText);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const auto e = nlohmann::json::parse(r.output.substr(r.output.find('{')));
  EXPECT_NEAR(e["perplexity"].get<double>(), std::exp(e["loss"].get<double>()), 1e-9 * e["perplexity"].get<double>());
  EXPECT_GT(e["masked"].get<int64_t>(), 1000) << "15% of a 35 KB text";
  EXPECT_LT(e["perplexity"].get<double>(), 400.0);
  const auto again = run_command(gmlp() + " eval --json --model " + out + " --data " + kText);
  EXPECT_EQ(again.output, r.output);
}

TEST(TasksCli, MaskedLmResumesExactly) {
  test::TempDir dir("tasks_mlm_resume");
  const std::string common = " train --task mlm --data " + kText +
                             " --steps 16 --log-every 1 --eval-every 6 --ckpt-every 5 --set model.d_attn=8" + kTiny;
  auto r = run_command(gmlp() + common + " --out " + dir.file("straight"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  r = run_command(gmlp() + common + " --out " + dir.file("split") + " --stop-after 7");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_TRUE(contains(r.output, "interrupted after 7 steps")) << r.output;
  r = run_command(gmlp() + " train --out " + dir.file("split") + " --resume --no-progress");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(train_losses(dir.file("straight")), train_losses(dir.file("split")));
  EXPECT_EQ(read_jsonl(metrics_file(dir.file("straight"))).size(), read_jsonl(metrics_file(dir.file("split"))).size());
  EXPECT_TRUE(same_weights(model_file(dir.file("straight")), model_file(dir.file("split"))));
  EXPECT_TRUE(read_file(model_file(dir.file("straight"))) == read_file(model_file(dir.file("split"))))
      << "the checkpoints (config metadata included) differ";
}

// ---- vision

// Shifts and stochastic depth draw from the run's RNG: resumption must restore it. So do
// DeiT's mixing, erasing, RandAugment and mirror images, the weights' average resumes with
// the run, and train.shuffle's epochs go by the step: a
// run stopped mid-epoch (4 steps an epoch) resumes as the straight run.
TEST(TasksCli, VisionResumesExactlyWithAugmentationAndStochasticDepth) {
  test::TempDir dir("tasks_vision_resume");
  write_vision_set(dir.file("data"));
  for (const std::string extra :
       {"",
        " --set train.shuffle=true --set train.augment_flip=true --set train.mixup=0.8 --set train.cutmix=1"
        " --set train.random_erase=0.25 --set train.label_smoothing=0.1 --set train.auto_augment=v0r"
        " --set train.auto_augment_interpolation=random --set train.repeated_aug=3 --set train.model_ema=0.9"}) {
    SCOPED_TRACE(extra);
    const std::string common = " train --data " + dir.file("data") + kVisionTiny +
                               " --steps 14 --log-every 1 --eval-every 5 --ckpt-every 4"
                               " --set model.survival_prob=0.7 --set train.augment_shift=1" +
                               extra;
    auto r = run_command(gmlp() + common + " --out " + dir.file("straight"));
    ASSERT_EQ(r.exit_code, 0) << r.output;
    EXPECT_EQ(contains(r.output, "shuffled each epoch"), !extra.empty()) << r.output;
    r = run_command(gmlp() + common + " --out " + dir.file("split") + " --stop-after 6");
    ASSERT_EQ(r.exit_code, 0) << r.output;
    r = run_command(gmlp() + " train --out " + dir.file("split") + " --resume --no-progress");
    ASSERT_EQ(r.exit_code, 0) << r.output;
    const auto a = train_losses(dir.file("straight"));
    EXPECT_EQ(a.size(), 14u);
    EXPECT_EQ(a, train_losses(dir.file("split")));
    EXPECT_TRUE(same_weights(model_file(dir.file("straight")), model_file(dir.file("split"))));
    EXPECT_TRUE(read_file(model_file(dir.file("straight"))) == read_file(model_file(dir.file("split"))))
        << "the checkpoints (config metadata included) differ";
    // A different seed gives a different run (so the equality above is not vacuous).
    r = run_command(gmlp() + common + " --out " + dir.file("other") + " --seed 9");
    ASSERT_EQ(r.exit_code, 0) << r.output;
    EXPECT_NE(a, train_losses(dir.file("other")));
    if (!extra.empty()) {
      // The weights' average (train.model_ema) resumes exactly too, is evaluated beside
      // the weights (a vision run's evaluations are its test split's, so its report has no
      // score of its own), and leaves the training as it was.
      EXPECT_TRUE(read_file(ema_model_file(dir.file("straight"))) == read_file(ema_model_file(dir.file("split"))));
      EXPECT_FALSE(same_weights(model_file(dir.file("straight")), ema_model_file(dir.file("straight"))));
      EXPECT_TRUE(contains(read_file(metrics_file(dir.file("split"))), "\"ema_val_acc\""));
      EXPECT_FALSE(nlohmann::json::parse(read_file(report_file(dir.file("straight")))).contains("ema"));
      r = run_command(gmlp() + common + " --set train.model_ema=0 --out " + dir.file("plain"));
      ASSERT_EQ(r.exit_code, 0) << r.output;
      EXPECT_TRUE(read_file(model_file(dir.file("straight"))) == read_file(model_file(dir.file("plain"))));
      EXPECT_FALSE(std::filesystem::exists(ema_model_file(dir.file("plain"))));
      // The average file is a model: gmlp eval scores it.
      r = run_command(gmlp() + " eval --model " + ema_model_file(dir.file("straight")) + " --data " + dir.file("data"));
      EXPECT_EQ(r.exit_code, 0) << r.output;
    }
    for (const char* run : {"straight", "split", "other", "plain"}) std::filesystem::remove_all(dir.file(run));
  }
  // Epochs are a data set's examples: a language model, which draws windows, refuses them.
  const auto r = run_command(gmlp() + " train --data " + test::kGplText + " --steps 1 --set train.shuffle=true --out " +
                             dir.file("lm") + " 2>&1");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_TRUE(contains(r.output, "'train.shuffle' takes a data set's examples in epochs")) << r.output;
}

// The same task from an image folder (train/<class>/*.pgm, test/<class>/*.pgm): the
// classes are the folders' names, the shape the images' (or what of it the config sets),
// and `gmlp eval` reads a test folder by the model's class names (one holding two of the
// three classes is scored by name, not by its folders' order).
TEST(TasksCli, VisionTrainsAndEvalsFromAnImageFolder) {
  test::TempDir dir("tasks_vision_folder");
  const std::string data = dir.file("data"), out = dir.file("run");
  const std::vector<std::string> folders = {"a-top-left", "b-top-right", "c-bottom-left"};
  write_vision_folder(data, folders);
  std::mt19937 rng(7);
  auto r =
      run_command(gmlp() + " train --data " + data + " --out " + out + kVisionTiny + " --steps 80 --eval-every 40");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_TRUE(contains(r.output, "64 train / 30 test images of 1x8x8")) << r.output;
  auto m = load_model(model_file(out));
  const ModelConfig& c = m->config();
  EXPECT_EQ(c.class_names, folders);
  EXPECT_EQ((std::vector<int>{c.image_channels, c.image_height, c.image_width, c.n_classes}),
            (std::vector<int>{1, 8, 8, 3}));
  r = run_command(gmlp() + " eval --model " + out + " --data " + data);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  std::smatch mt;
  ASSERT_TRUE(std::regex_search(r.output, mt, std::regex("top-1 accuracy ([0-9.]+) \\(30 examples\\)"))) << r.output;
  EXPECT_GT(std::stod(mt[1].str()), 0.9) << r.output;
  std::filesystem::remove_all(data + "/test/a-top-left");
  r = run_command(gmlp() + " eval --model " + out + " --data " + data);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  ASSERT_TRUE(std::regex_search(r.output, mt, std::regex("top-1 accuracy ([0-9.]+) \\(20 examples\\)"))) << r.output;
  EXPECT_GT(std::stod(mt[1].str()), 0.9) << r.output;
  // What of the shape the config sets, the images are brought to: grey made colour.
  r = run_command(gmlp() + " train --data " + data + " --out " + dir.file("rgb") + kVisionTiny +
                  " --steps 2 --eval-every 2 --set model.image_channels=3");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_TRUE(contains(r.output, "64 train / 20 test images of 3x8x8")) << r.output;
  // A class count other than the folders' is refused (the model must keep their names).
  r = run_command(gmlp() + " train --data " + data + " --out " + dir.file("four") + kVisionTiny +
                  " --steps 2 --set model.n_classes=4 2>&1");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_TRUE(contains(r.output, "has 3 class folders, but the model has 'n_classes' = 4")) << r.output;
  // A model without class names cannot score an image folder.
  write_vision_set(dir.file("idx"));
  std::filesystem::remove(dir.file("idx/classes.txt"));
  r = run_command(gmlp() + " train --data " + dir.file("idx") + " --out " + dir.file("unnamed") + kVisionTiny +
                  " --steps 2 --eval-every 2");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  r = run_command(gmlp() + " eval --model " + dir.file("unnamed") + " --data " + data + " 2>&1");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_TRUE(contains(r.output, "matched to the model's by name, and this model has no class names")) << r.output;
  // A test folder of a class the model does not have is refused, naming it.
  std::filesystem::create_directories(data + "/test/d-elsewhere");
  write_pgm(data + "/test/d-elsewhere/0.pgm", quadrant_image(0, rng), 8, 8);
  r = run_command(gmlp() + " eval --model " + out + " --data " + data + " 2>&1");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_TRUE(contains(r.output, "class folder 'd-elsewhere' is not one of the model's classes")) << r.output;
}

// Streamed (train.stream_images), an image folder's images are decoded from their files
// at each use, to the bytes a held folder holds: the held run, bit for bit (losses,
// evaluations, weights), with shifts, mirror images and crops (of the file's own pixels
// streamed, of the held bytes held: the same, the files being the model's size); it
// resumes as itself, and refuses a folder whose files changed; an image found unreadable
// mid-run stops it, naming the file.
TEST(TasksCli, AStreamedImageFolderTrainsAsItWouldHeld) {
  test::TempDir dir("tasks_vision_stream");
  const std::string data = dir.file("data");
  write_vision_folder(data, {"a", "b", "c"});
  const std::string common = " train --data " + data + kVisionTiny +
                             " --steps 12 --log-every 1 --eval-every 6 --ckpt-every 4"
                             " --set model.survival_prob=0.7 --set train.augment_shift=1"
                             " --set train.augment_crop=0.4 --set train.augment_flip=true";
  const std::string stream = " --set train.stream_images=true";
  auto r = run_command(gmlp() + common + " --out " + dir.file("held"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_FALSE(contains(r.output, "streamed")) << r.output;
  r = run_command(gmlp() + common + stream + " --out " + dir.file("streamed"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_TRUE(contains(r.output, "64 train / 30 test images of 1x8x8")) << r.output;
  EXPECT_TRUE(contains(r.output, "crops of 40-100% of the area, mirrored half the time, streamed from their files"))
      << r.output;
  const auto losses = train_losses(dir.file("held"));
  EXPECT_EQ(losses.size(), 12u);
  EXPECT_EQ(losses, train_losses(dir.file("streamed")));
  auto evals = [](const std::string& run) {
    std::vector<double> v;
    for (const auto& j : read_jsonl(metrics_file(run)))
      if (j.contains("val_loss")) v.insert(v.end(), {j["val_loss"].get<double>(), j["val_acc"].get<double>()});
    return v;
  };
  EXPECT_EQ(evals(dir.file("held")).size(), 4u);
  EXPECT_EQ(evals(dir.file("held")), evals(dir.file("streamed")));
  EXPECT_TRUE(same_weights(model_file(dir.file("held")), model_file(dir.file("streamed"))));
  // `gmlp eval` streams a folder's test split: the run's last evaluation, of the same model.
  r = run_command(gmlp() + " eval --model " + dir.file("held") + " --data " + data + " --json");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const auto ev = nlohmann::json::parse(r.output);
  EXPECT_EQ(ev["examples"], 30);
  EXPECT_EQ(ev["accuracy"].get<double>(), evals(dir.file("held")).back());
  EXPECT_NEAR(ev["loss"].get<double>(), evals(dir.file("held"))[2], 1e-6);
  // Resumed, the run streams again (its config says so) and is the straight run.
  r = run_command(gmlp() + common + stream + " --out " + dir.file("split") + " --stop-after 6");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  r = run_command(gmlp() + " train --out " + dir.file("split") + " --resume --no-progress");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_TRUE(contains(r.output, "streamed from their files")) << r.output;
  EXPECT_EQ(losses, train_losses(dir.file("split")));
  EXPECT_TRUE(read_file(model_file(dir.file("streamed"))) == read_file(model_file(dir.file("split"))));
  // A streamed set is known by its files' names (and labels): one renamed, the run
  // refuses to resume on it.
  r = run_command(gmlp() + common + stream + " --out " + dir.file("renamed") + " --stop-after 4");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  std::filesystem::rename(data + "/train/a/0.pgm", data + "/train/a/00.pgm");
  r = run_command(gmlp() + " train --out " + dir.file("renamed") + " --resume --no-progress 2>&1");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_TRUE(contains(r.output, "fingerprint")) << r.output;
  std::filesystem::rename(data + "/train/a/00.pgm", data + "/train/a/0.pgm");
  // An image that cannot be read, with the normalisation given (so no pass over the set
  // reads it first): the run stops when a batch draws it, naming it and the way on; the
  // file replaced by a readable one of the same name, the run resumes from its last
  // checkpoint to its end.
  std::ofstream(data + "/train/b/zz.png") << "not a png";
  // Without the normalisation given, the pass over the set before training finds it,
  // and says what the pass is and how to skip it.
  r = run_command(gmlp() + " train --data " + data + kVisionTiny + stream + " --steps 2 --out " + dir.file("norm") +
                  " 2>&1");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_TRUE(contains(r.output, "zz.png")) << r.output;
  EXPECT_TRUE(contains(r.output, "computes their normalisation")) << r.output;
  EXPECT_TRUE(contains(r.output, "give 'model.normalization' to skip the pass")) << r.output;
  r = run_command(gmlp() + " train --data " + data + kVisionTiny + stream +
                  " --steps 40 --log-every 1 --ckpt-every 1 --eval-every 1000 --seed 2"  // draws zz.png at step 8
                  " --set 'model.normalization={\"mean\":[0.4],\"std\":[0.3]}' --out " +
                  dir.file("broken") + " 2>&1");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_TRUE(contains(r.output, "zz.png")) << r.output;
  EXPECT_TRUE(contains(r.output, "replace the file with a readable image of the same name")) << r.output;
  EXPECT_TRUE(contains(r.output, "step 3/40")) << "found mid-run, after a checkpoint: " << r.output;
  std::filesystem::copy_file(data + "/train/b/1.pgm", data + "/train/b/zz.png",
                             std::filesystem::copy_options::overwrite_existing);
  r = run_command(gmlp() + " train --out " + dir.file("broken") + " --resume --no-progress 2>&1");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(train_losses(dir.file("broken")).size(), 40u);
}

TEST(TasksCli, VisionLearnsQuadrantsEvalsAndClassifiesAnImage) {
  test::TempDir dir("tasks_vision");
  const std::string data = dir.file("data"), out = dir.file("run");
  write_vision_set(data);
  auto r = run_command(gmlp() + " train --data " + data + " --out " + out + kVisionTiny + " --steps 80 --eval-every 40");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_TRUE(contains(r.output, "accuracy")) << r.output;
  // The image shape, patches and classes came from the data.
  auto m = load_model(model_file(out));
  const ModelConfig& c = m->config();
  EXPECT_EQ(c.task, Task::vision);
  EXPECT_EQ(c.image_channels, 1);
  EXPECT_EQ(c.image_height, 8);
  EXPECT_EQ(c.image_width, 8);
  EXPECT_EQ(c.patch_height, 4);
  EXPECT_EQ(c.seq_len, 4);
  EXPECT_EQ(c.n_classes, 3);
  EXPECT_EQ(c.class_names, kQuadrants);
  EXPECT_FALSE(c.normalization.is_null()) << "the training set's normalisation is stored with the model";
  EXPECT_EQ(m->param("patch.weight").shape, (std::vector<int64_t>{16, 16}));

  r = run_command(gmlp() + " eval --model " + out + " --data " + data);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  std::smatch mt;
  ASSERT_TRUE(std::regex_search(r.output, mt, std::regex("top-1 accuracy ([0-9.]+) \\(32 examples\\)"))) << r.output;
  // Bright quadrant vs dim noise is learned within 80 steps (1.0 in practice).
  EXPECT_GT(std::stod(mt[1].str()), 0.9) << r.output;
  for (const auto& name : kQuadrants) EXPECT_TRUE(contains(r.output, name)) << "confusion names " << name << "\n" << r.output;
  EXPECT_TRUE(contains(r.output, "recall")) << r.output;
  r = run_command(gmlp() + " eval --json --model " + out + " --data " + data);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const auto j = nlohmann::json::parse(r.output);
  EXPECT_EQ(j["examples"], 32);
  int64_t total = 0;
  for (const auto& row : j["confusion"]["matrix"])
    for (const auto& v : row) total += v.get<int64_t>();
  EXPECT_EQ(total, 32);

  // One image file per class, read through the PGM parser and the stored normalisation.
  std::mt19937 rng(99);
  for (int k = 0; k < 3; ++k) {
    const std::string img = dir.file("q" + std::to_string(k) + ".pgm");
    write_pgm(img, quadrant_image(k, rng), 8, 8);
    r = run_command(gmlp() + " classify-image --model " + out + " " + img);
    ASSERT_EQ(r.exit_code, 0) << r.output;
    EXPECT_EQ(r.output.rfind(kQuadrants[size_t(k)] + "\t", 0), 0u) << "first the predicted class:\n" << r.output;
    EXPECT_TRUE(contains(r.output, img)) << r.output;
  }
  // A larger image is resized to the model's 8x8.
  std::vector<uint8_t> big(16 * 16, 10);
  for (int y = 0; y < 8; ++y)
    for (int x = 8; x < 16; ++x) big[size_t(y) * 16 + x] = 240;
  write_pgm(dir.file("big.pgm"), big, 16, 16);
  r = run_command(gmlp() + " classify-image --model " + out + " --top 1 " + dir.file("big.pgm"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(r.output.rfind("top-right\t", 0), 0u) << r.output;
}

// ---- sentence classification and fine-tuning

TEST(TasksCli, ClassifyTrainEvalClassifyAndFinetune) {
  test::TempDir dir("tasks_classify");
  const std::string train_tsv = dir.file("train.tsv"), test_tsv = dir.file("test.tsv");
  write_sentences(train_tsv, 30, 1);
  write_sentences(test_tsv, 10, 2);
  const std::string clf = dir.file("clf");
  const std::string sizes =
      " --set model.d_model=16 --set model.d_ffn=32 --set model.n_layers=2 --set model.seq_len=48"
      " --batch-size 16 --set train.warmup=5 --no-progress";
  auto r = run_command(gmlp() + " train --task classify --data " + train_tsv + " --test " + test_tsv + " --out " +
                       clf + " --steps 60 --eval-every 30 --lr 1e-2" + sizes);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_TRUE(contains(r.output, "accuracy")) << r.output;
  int vals = 0;
  for (const auto& j : read_jsonl(metrics_file(clf)))
    if (j.contains("val_acc")) {
      ++vals;
      EXPECT_EQ(j["val_examples"], 6);  // 5% of each class held out of the training file
    }
  EXPECT_EQ(vals, 2);
  auto m = load_model(model_file(clf));
  EXPECT_EQ(m->config().task, Task::classify);
  EXPECT_EQ(m->config().n_classes, 3);
  EXPECT_EQ(m->config().class_names, (std::vector<std::string>{"animals", "colours", "numbers"}));

  r = run_command(gmlp() + " eval --model " + clf + " --data " + test_tsv);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  std::smatch mt;
  ASSERT_TRUE(std::regex_search(r.output, mt, std::regex("top-1 accuracy ([0-9.]+) \\(30 examples\\)"))) << r.output;
  // Keywords decide the class: learned within 60 steps (0.97 to 1.0 over seeds).
  EXPECT_GT(std::stod(mt[1].str()), 0.8) << r.output;
  for (const char* name : {"animals", "colours", "numbers", "recall"}) EXPECT_TRUE(contains(r.output, name)) << r.output;

  const std::vector<std::pair<std::string, std::string>> texts = {{"colours", "the red and blue a green we yellow"},
                                                                  {"animals", "we dog the cat a horse of goat"},
                                                                  {"numbers", "and one the two saw nine a ten"}};
  std::string cmd = gmlp() + " classify --model " + clf;
  for (const auto& [label, text] : texts) cmd += " --text '" + text + "'";
  r = run_command(cmd);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  std::vector<std::string> lines;
  {
    std::istringstream is(r.output);
    for (std::string l; std::getline(is, l);)
      if (!l.empty()) lines.push_back(l);
  }
  ASSERT_EQ(lines.size(), texts.size()) << r.output;
  for (size_t i = 0; i < texts.size(); ++i) {
    EXPECT_EQ(lines[i].substr(0, lines[i].find('\t')), texts[i].first) << lines[i];
    EXPECT_TRUE(contains(lines[i], texts[i].second)) << lines[i];
  }

  // Fine-tuning a masked LM: its encoder initialises the classifier (not its head).
  const std::string mlm = dir.file("mlm");
  r = run_command(gmlp() + " train --task mlm --data " + kText + " --out " + mlm + " --steps 5" + kTiny);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const std::string ft = dir.file("ft");
  r = run_command(gmlp() + " finetune --init-from " + mlm + " --data " + train_tsv + " --test " + test_tsv + " --out " +
                  ft + " --steps 5 --eval-every 5 --batch-size 8 --no-progress");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  // 2 blocks x 10 tensors + embedding + final norm (2): every tensor but the head's two.
  EXPECT_TRUE(contains(r.output, "23 of 25 tensors initialised from")) << r.output;
  auto fm = load_model(model_file(ft));
  EXPECT_EQ(fm->config().task, Task::classify);
  EXPECT_EQ(fm->config().seq_len, 16) << "the architecture is the checkpoint's";
  EXPECT_EQ(fm->config().tokenizer, load_model(model_file(mlm))->config().tokenizer);
  r = run_command(gmlp() + " finetune --init-from " + mlm + " --scratch --data " + train_tsv + " --test " + test_tsv +
                  " --out " + dir.file("scratch") + " --steps 5 --eval-every 5 --batch-size 8 --no-progress");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_FALSE(contains(r.output, "initialised from")) << r.output;
  auto sm = load_model(model_file(dir.file("scratch")));
  EXPECT_EQ(sm->config().to_json()["d_model"], 16);
  // A vision checkpoint cannot seed a text classifier.
  auto vision_cfg = ModelConfig::from_json({{"task", "vision"}, {"n_classes", 3}, {"image_channels", 1},
                                            {"image_height", 8}, {"image_width", 8}, {"patch_height", 4},
                                            {"patch_width", 4}, {"d_model", 16}, {"d_ffn", 32}, {"n_layers", 1}},
                                           "test");
  Model vm(vision_cfg);
  save_model(vm, dir.file("vision.safetensors"));
  r = run_command(gmlp() + " finetune --init-from " + dir.file("vision.safetensors") + " --data " + train_tsv +
                  " --out " + dir.file("bad") + " --steps 2 --no-progress");
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_TRUE(contains(r.output, "vision model")) << r.output;
  EXPECT_FALSE(fs::exists(dir.file("bad")));
}

// ---- the ablation

// gmlp bench builds a batch of each task's shape: images for vision, masked targets for
// mlm, padded sentences for classify; generate is the causal LM's only.
TEST(TasksCli, BenchEveryTask) {
  const std::string src = test::source_dir();
  for (const std::string cfg : {"configs/mnist.json", "configs/ablate.json", "configs/fashion.json"}) {
    auto r = run_command(gmlp() + " bench --config " + src + "/" + cfg +
                         " --mode train --repeats 1 --warmup 0 --batch-size 2 --json");
    ASSERT_EQ(r.exit_code, 0) << cfg << "\n" << r.output;
    const auto j = nlohmann::json::parse(r.output.substr(r.output.find('{')));
    EXPECT_GT(j["tokens_per_s"].get<double>(), 0.0) << cfg;
    EXPECT_EQ(j.contains("images_per_s"), cfg != "configs/ablate.json") << cfg;
  }
  auto r = run_command(gmlp() + " bench --config " + src + "/configs/ablate.json --set model.task=\"classify\"" +
                       " --set model.n_classes=3 --mode infer --repeats 1 --warmup 0 --batch-size 2");
  EXPECT_EQ(r.exit_code, 0) << r.output;
  r = run_command(gmlp() + " bench --config " + src + "/configs/mnist.json --mode generate");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_TRUE(contains(r.output, "needs a causal LM")) << r.output;
}

// --grad-accum K: the steps in K pieces (their count and memory: CudaCli.
// ABenchInPiecesTakesEachStepInPieces), said in the record; a K that does not divide the
// batch, or one given where no training step is timed, is refused, naming it.
TEST(TasksCli, BenchTakesItsStepsInPiecesOnRequest) {
  const std::string cmd = gmlp() + " bench --config " + test::source_dir() +
                          "/configs/tiny.json --set model.n_layers=1 --repeats 1 --warmup 0 --batch-size 4 ";
  auto r = run_command(cmd + "--grad-accum 2 --json");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  auto j = nlohmann::json::parse(r.output.substr(r.output.find('{')));
  EXPECT_EQ(j["grad_accum"].get<int>(), 2);
  EXPECT_GT(j["tokens_per_s"].get<double>(), 0.0);
  r = run_command(cmd + "--grad-accum 2");
  EXPECT_TRUE(contains(r.output, "each batch in 2 pieces")) << r.output;
  r = run_command(cmd + "--json");  // the config's train.grad_accum, 1
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(nlohmann::json::parse(r.output.substr(r.output.find('{')))["grad_accum"].get<int>(), 1);
  for (const auto& [args, says] : std::vector<std::pair<std::string, std::string>>{
           {"--grad-accum 3", "--grad-accum 3 does not divide the batch of 4 rows"},
           {"--grad-accum -2", "--grad-accum must be positive"},
           {"--grad-accum 2 --mode infer", "--mode infer times no training step"},
           {"--set train.batch_size=16 --set train.grad_accum=8",
            "the config's train.grad_accum (8) does not divide --batch-size 4"}}) {
    r = run_command(cmd + args);
    EXPECT_EQ(r.exit_code, 1) << args << "\n" << r.output;
    EXPECT_TRUE(contains(r.output, says)) << args << "\n" << r.output;
  }
}

// --products: every product of the steps by shape, the layers' count of calls each; the
// spatial weight gradient as one product split by K. Generation has no steps to time.
TEST(TasksCli, BenchTimesProductsByShape) {
  const std::string src = test::source_dir();
  const std::string cmd = gmlp() + " bench --config " + src + "/configs/tiny.json --repeats 2 --warmup 0 --batch-size 4 ";
  auto r = run_command(cmd + "--mode train --products --json");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  auto j = nlohmann::json::parse(r.output.substr(r.output.find('{')));
  ASSERT_TRUE(j.contains("products")) << r.output;
  // tiny: d 128, d_ffn 512, 4 layers, n 128; 4 windows: M = 512 rows, B * g = 1024 columns.
  auto find = [&](const std::string& kind, int M, int N, int K) -> const nlohmann::json* {
    for (const auto& p : j["products"])
      if (p["kind"] == kind && p["M"] == M && p["N"] == N && p["K"] == K) return &p;
    return nullptr;
  };
  const auto* proj_in = find("NT", 512, 512, 128);
  const auto* spatial_dw = find("NN/k", 128, 128, 1024);
  ASSERT_NE(proj_in, nullptr) << r.output;
  ASSERT_NE(spatial_dw, nullptr) << r.output;
  EXPECT_EQ((*proj_in)["calls_per_step"].get<double>(), 4.0);
  EXPECT_EQ((*spatial_dw)["calls_per_step"].get<double>(), 4.0);
  for (const auto& p : j["products"]) {
    EXPECT_GT(p["median_s"].get<double>(), 0.0) << p;
    EXPECT_GT(p["gflops"].get<double>(), 0.0) << p;
  }
  r = run_command(cmd + "--mode infer --json");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_FALSE(nlohmann::json::parse(r.output.substr(r.output.find('{'))).contains("products"));
  r = run_command(cmd + "--mode generate --products");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_TRUE(contains(r.output, "--products times training or inference steps")) << r.output;
}

// How OpenMP threads wait: spinning only when every thread has a core nobody else runs on.
TEST(ThreadWait, SpinOnlyWhenTheThreadsFitOnFreeCores) {
  EXPECT_TRUE(spin_fits(2, 0, 2));
  EXPECT_FALSE(spin_fits(2, 1, 2));  // another process holds a core
  EXPECT_FALSE(spin_fits(3, 0, 2));  // more threads than cores
  EXPECT_FALSE(spin_fits(1, 0, 2));  // one thread never waits for another
  EXPECT_TRUE(spin_fits(4, 2, 8));
  EXPECT_FALSE(spin_fits(4, 5, 8));
}

// The program reports what it chose, and the user's own variables always win. The
// machine's load during the test decides spin or passive, so only the form is checked,
// except with one thread, which always waits passively.
TEST(ThreadWait, TheCliChoosesUnlessTheUserHas) {
  const std::string cmd = " bench --config " + test::source_dir() + "/configs/tiny.json --mode infer --repeats 1 "
                          "--warmup 0 --batch-size 1 --json";
  const std::string clean = "env -u OMP_WAIT_POLICY -u GOMP_SPINCOUNT -u GMLP_OMP_WAIT ";
  auto omp_wait = [&](const std::string& prefix) {
    const auto r = run_command(prefix + gmlp() + cmd);
    EXPECT_EQ(r.exit_code, 0) << r.output;
    return nlohmann::json::parse(r.output.substr(r.output.find('{')))["omp_wait"].get<std::string>();
  };
  const std::string two = omp_wait(clean + "OMP_NUM_THREADS=2 ");
  EXPECT_TRUE(std::regex_match(two, std::regex("(spin|passive): 2 threads, [0-9]+ other running, [0-9]+ cores"))) << two;
  EXPECT_TRUE(std::regex_match(omp_wait(clean + "OMP_NUM_THREADS=1 "), std::regex("passive: 1 threads, .*")));
  EXPECT_EQ(omp_wait(clean + "OMP_WAIT_POLICY=ACTIVE "), "OMP_WAIT_POLICY=ACTIVE");
  EXPECT_EQ(omp_wait(clean + "GOMP_SPINCOUNT=1000 "), "GOMP_SPINCOUNT=1000");
}

// The executable's malloc (CMakeLists.txt's GMLP_JEMALLOC): jemalloc where the build
// found it, interposed on glibc's for the whole process (oneDNN's packing buffers
// included: they are what it is for); the tests' own process keeps glibc's. bench names
// the library that malloc resolved to, not what the build meant to link.
TEST(Malloc, TheExecutableAllocatesWithJemallocWhereBuiltWithIt) {
  // The C library's, or in a sanitizer build its runtime's, in the executable as here.
  const std::string own = malloc_name();
  EXPECT_EQ(own.rfind("jemalloc", 0), std::string::npos) << own;
  const auto r = run_command(gmlp() + " bench --config " + test::source_dir() +
                             "/configs/tiny.json --mode infer --repeats 1 --warmup 0 --batch-size 1 --json");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const std::string m = nlohmann::json::parse(r.output.substr(r.output.find('{')))["malloc"].get<std::string>();
#ifdef GMLP_EXE_JEMALLOC
  EXPECT_TRUE(std::regex_match(m, std::regex("jemalloc [0-9]+\\.[0-9]+\\.[0-9]+"))) << m;
#else
  EXPECT_EQ(m, own);
#endif
}

// Which library multiplies fp32 matrices (products.cpp): OpenBLAS, unless it runs AVX2
// kernels on an AVX-512 CPU and oneDNN is built in. OPENBLAS_CORETYPE=Haswell forces
// OpenBLAS's AVX2 kernels, so the expected choice follows from the CPU alone, which
// GCC's own CPU detection (an independent reading of CPUID and the OS's XCR0) gives.
// GMLP_CPU_GEMM overrides; a misspelt value stops the program before it writes.
TEST(CpuGemm, TheCliChoosesTheLibraryUnlessTheUserHas) {
  const std::string cmd = " bench --config " + test::source_dir() + "/configs/tiny.json --mode infer --repeats 1 "
                          "--warmup 0 --batch-size 1 --json";
  auto cpu_gemm = [&](const std::string& prefix) {
    const auto r = run_command("env -u GMLP_CPU_GEMM OPENBLAS_CORETYPE=Haswell " + prefix + gmlp() + cmd);
    EXPECT_EQ(r.exit_code, 0) << r.output;
    return nlohmann::json::parse(r.output.substr(r.output.find('{')))["cpu_gemm"].get<std::string>();
  };
  __builtin_cpu_init();
  const bool avx512 = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
                      __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512vl") &&
                      __builtin_cpu_supports("avx512cd");
  EXPECT_EQ(cpu_gemm(""), avx512 && ops::have_onednn()
                              ? "oneDNN, AVX-512 (OpenBLAS runs Haswell kernels on this AVX-512 CPU)"
                              : "OpenBLAS, Haswell kernels");
  EXPECT_EQ(cpu_gemm("GMLP_CPU_GEMM=openblas "), "OpenBLAS, Haswell kernels (GMLP_CPU_GEMM=openblas)");
  if (ops::have_onednn()) {
    EXPECT_EQ(cpu_gemm("GMLP_CPU_GEMM=onednn "), "oneDNN (GMLP_CPU_GEMM=onednn)");
  }
  test::TempDir dir("cpu_gemm");
  const auto bad = run_command("GMLP_CPU_GEMM=mkl " + gmlp() + " train --steps 2 --data " + test::kGplText +
                               " --out " + dir.file("run") + " 2>&1");
  EXPECT_EQ(bad.exit_code, 1) << bad.output;
  EXPECT_NE(bad.output.find("gmlp: error: GMLP_CPU_GEMM='mkl' is not one of openblas, onednn"), std::string::npos)
      << bad.output;
  EXPECT_FALSE(std::filesystem::exists(dir.file("run")));
}

TEST(TasksCli, AblateTwoVariants) {
  test::TempDir dir("tasks_ablate");
  const std::string out = dir.file("abl");
  auto r = run_command(gmlp() + " ablate --variants split none --steps 5 --data " + kText + " --out " + out +
                       " --no-progress --set model.d_model=16 --set model.d_ffn=32 --set model.n_layers=1"
                       " --set model.seq_len=16 --set train.batch_size=8 --set train.warmup=1"
                       " --set train.eval_batches=2");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_TRUE(contains(r.output, "split: Z1 * f(Z2) (gMLP)")) << r.output;
  EXPECT_TRUE(contains(r.output, "none: s(Z) = Z")) << r.output;
  EXPECT_TRUE(contains(r.output, "perplexity")) << r.output;
  EXPECT_FALSE(contains(r.output, "linear: f(Z)")) << "only the chosen variants run\n" << r.output;
  const auto doc = nlohmann::json::parse(read_file(out + "/ablation.json"));
  ASSERT_EQ(doc["results"].size(), 2u);
  std::map<std::string, int64_t> params;
  for (const auto& res : doc["results"]) {
    const std::string v = res["variant"];
    params[v] = res["params"].get<int64_t>();
    EXPECT_GT(res["val_ppl"].get<double>(), 1.0) << v;
    EXPECT_TRUE(std::isfinite(res["val_ppl"].get<double>())) << v;
    EXPECT_EQ(res["steps"], 5) << v;
    // The reported size is the trained checkpoint's.
    auto m = load_model(model_file(out + "/" + v));
    EXPECT_EQ(int64_t(m->num_params()), params[v]) << v;
    EXPECT_EQ(name_of(m->config().sgu), v);
    EXPECT_EQ(m->config().task, Task::mlm);
  }
  ASSERT_EQ(params.size(), 2u);
  // "none" drops the SGU (gate norm, W, b) but its proj_out reads all d_ffn channels.
  // split: 16*32+32 in, 16+16 gate norm, 16*16+16 spatial, 16*16+16 out;
  // none:  16*32+32 in,                                    16*32+16 out.
  EXPECT_EQ(params["split"] - params["none"], (16 + 16) + (16 * 16 + 16) + (16 * 16) - (16 * 32));
}

// ---- bad input: a non-zero exit, a message naming the problem, nothing written

class TasksCliBadInput : public ::testing::Test {
 protected:
  void SetUp() override {
    // A vision checkpoint straight from the library (no training needed to be refused).
    auto cfg = ModelConfig::from_json({{"task", "vision"}, {"n_classes", 3}, {"image_channels", 1},
                                       {"image_height", 8}, {"image_width", 8}, {"patch_height", 4},
                                       {"patch_width", 4}, {"d_model", 16}, {"d_ffn", 32}, {"n_layers", 1}},
                                      "test");
    Model m(cfg);
    Rng rng(1);
    m.init(rng);
    fs::create_directories(dir_.file("vrun"));
    save_model(m, model_file(dir_.file("vrun")));
    fs::create_directories(dir_.file("empty"));
  }
  void expect_failure(const std::string& args, const std::vector<std::string>& fragments,
                      const std::string& must_not_exist = "") {
    auto r = run_command(gmlp() + " " + args);
    EXPECT_NE(r.exit_code, 0) << args << "\n" << r.output;
    EXPECT_TRUE(contains(r.output, "error")) << r.output;
    for (const auto& f : fragments) EXPECT_TRUE(contains(r.output, f)) << "expected '" << f << "' in:\n" << r.output;
    if (!must_not_exist.empty()) {
      EXPECT_FALSE(fs::exists(must_not_exist)) << must_not_exist << " was written";
    }
  }
  test::TempDir dir_{"tasks_bad"};
};

TEST_F(TasksCliBadInput, FinetuneWithoutAnEncoderOrConfig) {
  write_sentences(dir_.file("train.tsv"), 3, 1);
  expect_failure("finetune --data " + dir_.file("train.tsv") + " --out " + dir_.file("ft") + " --no-progress",
                 {"--init-from", "--config"}, dir_.file("ft"));
  expect_failure("finetune --scratch --config /dev/null --data " + dir_.file("train.tsv") + " --out " + dir_.file("ft"),
                 {"--scratch"}, dir_.file("ft"));
}

TEST_F(TasksCliBadInput, ClassifyImageMissingFile) {
  const std::string img = dir_.file("nope.pgm");
  expect_failure("classify-image --model " + dir_.file("vrun") + " " + img, {img});
}

TEST_F(TasksCliBadInput, ClassifyImageTruncatedPgm) {
  const std::string img = dir_.file("cut.pgm");
  {
    std::ofstream f(img, std::ios::binary);
    f << "P5\n8 8\n255\n" << std::string(20, '\x80');  // 20 of 64 pixels
  }
  expect_failure("classify-image --model " + dir_.file("vrun") + " " + img, {img, "P5"});
}

TEST_F(TasksCliBadInput, ClassifyImageWithATextModel) {
  write_pgm(dir_.file("ok.pgm"), std::vector<uint8_t>(64, 100), 8, 8);
  ModelConfig c;
  c.d_model = 8, c.d_ffn = 16, c.n_layers = 1, c.seq_len = 8;
  Model m(c);
  save_model(m, dir_.file("lm.safetensors"));
  expect_failure("classify-image --model " + dir_.file("lm.safetensors") + " " + dir_.file("ok.pgm"),
                 {"\"causal_lm\"", "not an image classifier"});
}

TEST_F(TasksCliBadInput, EvalVisionModelOnAFolderWithoutIdx) {
  expect_failure("eval --model " + dir_.file("vrun") + " --data " + dir_.file("empty"),
                 {dir_.file("empty"), "t10k-images-idx3-ubyte"});
  expect_failure("eval --model " + dir_.file("vrun") + " --data " + dir_.file("absent"),
                 {dir_.file("absent"), "not a directory"});
}

TEST_F(TasksCliBadInput, TrainVisionOnAnEmptyFolder) {
  const std::string out = dir_.file("run");
  expect_failure("train --task vision --data " + dir_.file("empty") + " --out " + out + " --steps 3 --no-progress",
                 {dir_.file("empty"), "images"}, out);
  // Images but no labels: the labels file is named.
  fs::create_directories(dir_.file("half"));
  write_idx(dir_.file("half") + "/t10k-images-idx3-ubyte", {2, 8, 8}, std::vector<uint8_t>(128, 1));
  write_idx(dir_.file("half") + "/train-images-idx3-ubyte", {2, 8, 8}, std::vector<uint8_t>(128, 1));
  expect_failure("train --task vision --data " + dir_.file("half") + " --out " + out + " --steps 3 --no-progress",
                 {"labels"}, out);
}

TEST_F(TasksCliBadInput, ClassifyTestFileWithAnUnknownLabel) {
  write_sentences(dir_.file("train.tsv"), 3, 1);
  std::ofstream(dir_.file("test.tsv")) << "animals\ta cat\nplants\ta tree\n";
  const std::string out = dir_.file("clf");
  expect_failure("train --task classify --data " + dir_.file("train.tsv") + " --test " + dir_.file("test.tsv") +
                     " --out " + out + " --steps 2 --no-progress --set model.d_model=8 --set model.d_ffn=16"
                     " --set model.seq_len=16",
                 {"test.tsv", "plants"}, out);
}

}  // namespace
}  // namespace gmlp
