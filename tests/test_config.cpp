// Config files: every shipped config loads; bad keys, types and values are rejected
// with the key named; JSON round trips.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>

#include "gmlp/config.h"
#include "gmlp/error.h"
#include "gmlp/model.h"
#include "test_util.h"

namespace gmlp {
namespace {

using test::error_of;

TEST(Config, ShippedConfigsLoadAndBuild) {
  int n = 0;
  for (const auto& e : std::filesystem::directory_iterator(test::source_dir() + "/configs")) {
    if (e.path().extension() != ".json") continue;
    SCOPED_TRACE(e.path().string());
    RunConfig rc = RunConfig::load(e.path().string());
    // A char config gets its vocabulary from the corpus; build it at a typical size.
    if (rc.model.token_input() && rc.model.tokenizer.value("kind", "") == "char") rc.model.vocab_size = 65;
    Model m(rc.model);
    Rng rng(1);
    m.init(rng);
    if (rc.model.token_input()) {
      const int T = 3;
      std::vector<int32_t> tokens(T + 1, 1);
      EXPECT_TRUE(std::isfinite(m.forward(tokens.data(), tokens.data() + 1, T + 1, 1, T)));
    } else {
      const ModelConfig& c = rc.model;
      std::vector<float> image(size_t(c.image_channels) * c.image_height * c.image_width, 0.5f);
      int32_t label = 1;
      Batch b;
      b.B = 1;
      b.T = c.seq_len;
      b.images = image.data();
      b.targets = &label;
      EXPECT_TRUE(std::isfinite(m.forward(b)));
    }
    ++n;
  }
  EXPECT_GE(n, 4);
}

TEST(Config, DefaultJsonMatchesBuiltInDefaults) {
  const RunConfig rc = RunConfig::load(test::source_dir() + "/configs/default.json");
  EXPECT_EQ(rc.to_json(), RunConfig{}.to_json());
}

TEST(Config, RoundTripsThroughJson) {
  ModelConfig m;
  m.d_model = 40;
  m.gelu = Gelu::tanh;
  m.pos_embedding = PosEmbedding::sinusoidal;
  m.tokenizer = {{"kind", "char"}, {"chars", "ab\n"}};
  m.vocab_size = 3;
  EXPECT_EQ(ModelConfig::from_json(m.to_json(), "t").to_json(), m.to_json());
  TrainConfig t;
  t.schedule = Schedule::noam;
  t.seed = 99;
  t.stream_images = true;
  t.auto_augment = "rand-m9-mstd0.5-inc1";
  t.auto_augment_interpolation = "random";
  t.shuffle = true;
  t.repeated_aug = 3;
  t.model_ema = 0.99996f;
  EXPECT_EQ(TrainConfig::from_json(t.to_json(), "t").to_json(), t.to_json());
  EXPECT_EQ(TrainConfig::from_json(t.to_json(), "t").auto_augment, "rand-m9-mstd0.5-inc1");
  EXPECT_TRUE(TrainConfig::from_json(t.to_json(), "t").stream_images);
  EXPECT_FALSE(TrainConfig::from_json(nlohmann::json::object(), "t").stream_images);
}

TEST(Config, RejectsBadValuesNamingTheKey) {
  using nlohmann::json;
  auto model_err = [](json j) { return error_of([&] { ModelConfig::from_json(j, "here"); }); };
  auto train_err = [](json j) { return error_of([&] { TrainConfig::from_json(j, "here"); }); };
  EXPECT_NE(model_err({{"d_ffn", 7}}).find("'d_ffn' must be even"), std::string::npos);
  EXPECT_NE(model_err({{"seq_len", 1}}).find("'seq_len'"), std::string::npos);
  EXPECT_NE(model_err({{"d_model", 0}}).find("'d_model' must be positive"), std::string::npos);
  EXPECT_NE(model_err({{"gelu", "relu"}}).find("'gelu'"), std::string::npos);
  EXPECT_NE(model_err({{"pos_embedding", "learned"}}).find("'pos_embedding'"), std::string::npos);
  EXPECT_NE(model_err({{"dmodel", 3}}).find("unknown key 'dmodel'"), std::string::npos);
  EXPECT_NE(model_err({{"d_model", "big"}}).find("'d_model' must be an integer"), std::string::npos);
  EXPECT_NE(model_err({{"d_model", 1.5}}).find("'d_model' must be an integer"), std::string::npos);
  EXPECT_NE(model_err(json::array()).find("expected a JSON object"), std::string::npos);
  EXPECT_NE(model_err({{"d_model", 4294967320LL}}).find("'d_model' is out of range"), std::string::npos);
  EXPECT_NE(model_err({{"n_layers", 1000000}}).find("'n_layers' must be at most"), std::string::npos);
  EXPECT_NE(model_err({{"seq_len", 3000000}}).find("'seq_len' must be at most"), std::string::npos);
  EXPECT_NE(model_err({{"tokenizer", {{"kind", 5}}}}).find("string 'kind'"), std::string::npos);
  EXPECT_NE(model_err({{"vocab_size", 65}}).find("byte tokenizer has 256 tokens"), std::string::npos);
  EXPECT_NE(model_err({{"vocab_size", 65}, {"tokenizer", {{"kind", "char"}, {"chars", "abc"}}}}).find("has 3 tokens"),
            std::string::npos);
  EXPECT_NE(train_err({{"seed", -1}}).find("'seed' is out of range"), std::string::npos);
  EXPECT_NE(train_err({{"stream_images", 1}}).find("'stream_images' must be true or false, got 1"), std::string::npos);
  EXPECT_NE(train_err({{"stream_images", "yes"}}).find("'stream_images' must be true or false"), std::string::npos);
  EXPECT_NE(train_err({{"batch_size", 4294967312LL}}).find("'batch_size' is out of range"), std::string::npos);
  EXPECT_NE(train_err({{"schedule", "linear"}}).find("'schedule'"), std::string::npos);
  EXPECT_NE(train_err({{"schedule", "noam"}, {"warmup", 0}}).find("'warmup'"), std::string::npos);
  EXPECT_NE(train_err({{"min_lr", 1.0}}).find("'min_lr'"), std::string::npos);
  EXPECT_NE(train_err({{"beta2", 1.0}}).find("'beta2'"), std::string::npos);
  EXPECT_NE(train_err({{"label_smoothing", 1.0}}).find("'label_smoothing' must be in [0, 1), got 1"),
            std::string::npos);
  EXPECT_NE(train_err({{"label_smoothing", -0.1}}).find("'label_smoothing'"), std::string::npos);
  EXPECT_NE(train_err({{"mixup", -0.5}}).find("'mixup' (the Beta distribution's alpha"), std::string::npos);
  EXPECT_NE(train_err({{"cutmix", 1000}}).find("'cutmix' (the Beta distribution's alpha"), std::string::npos);
  EXPECT_NE(train_err({{"random_erase", 1.5}})
                .find("'random_erase' (the share of images erased in part) must be in "
                      "[0, 1], got 1.5"),
            std::string::npos);
  EXPECT_NE(train_err({{"auto_augment", 5}}).find("'auto_augment' must be a string, got 5"), std::string::npos);
  EXPECT_NE(train_err({{"auto_augment", "rand-z1"}}).find("'auto_augment' \"rand-z1\": unknown section 'z1'"),
            std::string::npos);
  EXPECT_NE(train_err({{"auto_augment_interpolation", "nearest"}}).find("'auto_augment_interpolation' must be"),
            std::string::npos);
  EXPECT_NE(train_err({{"repeated_aug", 0}, {"shuffle", true}}).find("'repeated_aug' (the times an epoch takes"),
            std::string::npos);
  EXPECT_NE(train_err({{"model_ema", 1.0}}).find("'model_ema' (the weights' average's decay a step) must be in [0, 1)"),
            std::string::npos);
  EXPECT_NE(train_err({{"batch_size", -2}}).find("'batch_size'"), std::string::npos);
  EXPECT_NE(train_err({{"val_fraction", 1.0}}).find("'val_fraction'"), std::string::npos);
  // Every message says where the config came from.
  EXPECT_EQ(model_err({{"d_ffn", 7}}).rfind("here", 0), 0u);
}

TEST(Config, EnumNamesAreParsedOnceAndUnknownOnesListTheChoices) {
  using nlohmann::json;
  auto model_err = [](json j) { return error_of([&] { ModelConfig::from_json(j, "here"); }); };
  // An unknown s(Z) used to become the split SGU silently.
  const std::string e = model_err({{"sgu", "splitt"}});
  EXPECT_NE(e.find("'sgu' must be one of \"split\", \"none\", \"linear\", \"additive\" or \"multiplicative\""),
            std::string::npos)
      << e;
  EXPECT_NE(model_err({{"task", "lm"}}).find("'task' must be one of"), std::string::npos);
  EXPECT_NE(model_err({{"spatial", 1}}).find("'spatial' must be a string"), std::string::npos);
  for (const char* name : {"split", "none", "linear", "additive", "multiplicative"}) {
    const ModelConfig c = ModelConfig::from_json({{"sgu", name}, {"sgu_heads", 1}}, "t");
    EXPECT_EQ(name_of(c.sgu), name);
    EXPECT_EQ(c.to_json()["sgu"], name);
  }
}

TEST(Config, RejectsNonFiniteAndOutOfRangeFloats) {
  using nlohmann::json;
  // 1e39 is a finite double but overflows float: it used to be saved as null, and the
  // run could not be resumed.
  const std::string e = error_of([&] { TrainConfig::from_json({{"clip", 1e39}}, "here"); });
  EXPECT_NE(e.find("'clip' must be a finite number within float's range"), std::string::npos) << e;
  EXPECT_NE(error_of([&] { ModelConfig::from_json({{"norm_eps", -1e300}}, "here"); }).find("'norm_eps'"),
            std::string::npos);
}

TEST(Config, BoundsTheParameterCountNotJustEachDimension) {
  // Every dimension within its own bound, the product far past any engine.
  nlohmann::json j = {{"d_model", 1 << 20}, {"d_ffn", 1 << 20}, {"n_layers", 32}, {"seq_len", (1 << 20) - 1},
                      {"sgu_heads", 1 << 19}};
  const std::string e = error_of([&] { ModelConfig::from_json(j, "here"); });
  EXPECT_NE(e.find("parameters, more than the 4294967296 this engine holds"), std::string::npos) << e;
  // The count agrees with the layout the model builds.
  ModelConfig c;
  c.d_attn = 8;
  c.sgu_heads = 2;
  double layout = 0;
  for (const auto& p : param_layout(c)) layout += double(p.size);
  EXPECT_EQ(c.param_count(), layout);
  c.spatial = Spatial::toeplitz;
  c.task = Task::mlm;
  layout = 0;
  for (const auto& p : param_layout(c)) layout += double(p.size);
  EXPECT_EQ(c.param_count(), layout);
}

TEST(Config, OpenValuesAreLeftToTheDataOnlyWhenAsked) {
  const nlohmann::json vision = {{"task", "vision"}};
  EXPECT_NE(error_of([&] { ModelConfig::from_json(vision, "here"); }).find("'n_classes' >= 2"), std::string::npos);
  const ModelConfig open = ModelConfig::from_json(vision, "here", /*open=*/true);
  EXPECT_EQ(open.image_channels, 0);
  EXPECT_EQ(open.n_classes, 0);
  // Open is not lax: what the data does not decide is still checked.
  EXPECT_NE(error_of([&] { ModelConfig::from_json({{"task", "vision"}, {"d_ffn", 7}}, "here", true); }).find("d_ffn"),
            std::string::npos);
  // A normalisation must have the images' channels: a model normalises a batch of bytes
  // with it only inside a forward, where it could not fail cleanly.
  nlohmann::json shaped = {
      {"task", "vision"},  {"n_classes", 3},   {"image_channels", 3},
      {"image_height", 8}, {"image_width", 8}, {"patch_height", 4},
      {"patch_width", 4},  {"seq_len", 4},     {"normalization", {{"mean", {0.5}}, {"std", {0.25}}}}};
  EXPECT_NE(error_of([&] {
              ModelConfig::from_json(shaped, "here");
            }).find("'normalization' has 1 channels, but 'image_channels' = 3"),
            std::string::npos);
  shaped["normalization"] = {{"mean", {0.5, 0.5, 0.5}}, {"std", {0.25, 0.25, 0.0}}};
  EXPECT_NE(error_of([&] { ModelConfig::from_json(shaped, "here"); }).find("needs a finite mean and std > 0"),
            std::string::npos);
  shaped["normalization"] = {{"mean", {0.5, 0.5, 0.5}}, {"std", {0.25, 0.25, 0.25}}};
  EXPECT_EQ(ModelConfig::from_json(shaped, "here").image_channels, 3);
}

TEST(Config, FileErrorsNameTheFile) {
  test::TempDir dir("config");
  EXPECT_NE(error_of([&] { RunConfig::load(dir.file("absent.json")); }).find("absent.json"), std::string::npos);
  std::ofstream(dir.file("x.json")) << R"({"model": {}, "optim": {}})";
  const std::string e = error_of([&] { RunConfig::load(dir.file("x.json")); });
  EXPECT_NE(e.find("x.json"), std::string::npos) << e;
  EXPECT_NE(e.find("unknown key 'optim'"), std::string::npos) << e;
}

}  // namespace
}  // namespace gmlp
