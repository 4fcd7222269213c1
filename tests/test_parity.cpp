// Parity with the PyTorch reference (tests/reference): the same checkpoint, the same
// tokens; logits, loss, every parameter gradient, and 10 AdamW steps must agree.
//
// The reference computes in float64 from the same float32 parameters, so these
// tolerances bound our float32 error, not a mismatch between two float32 programs.
#include <gtest/gtest.h>

#include <algorithm>

#include "gmlp/checkpoint.h"
#include "gmlp/optimizer.h"
#include "gmlp/trainer.h"
#include "oracles.h"  // the engine's dropout masks, to hold against the reference's
#include "test_util.h"

namespace gmlp {
namespace {

constexpr float kLogitAtol = 5e-6f, kLogitRtol = 1e-5f;
constexpr float kGradAtol = 3e-7f, kGradRtol = 1e-4f;
constexpr float kLossRtol = 1e-6f;
constexpr float kTrainLossRtol = 1e-6f;
constexpr float kFinalAtol = 1e-5f, kFinalRtol = 1e-5f;

class Parity : public ::testing::TestWithParam<std::string> {
 protected:
  std::string model_path() { return test::reference_fixture_dir() + "/" + GetParam() + ".model.safetensors"; }
  SafeTensorsFile case_file() {
    return SafeTensorsFile::load(test::reference_fixture_dir() + "/" + GetParam() + ".case.safetensors");
  }
};

std::vector<int32_t> to_i32(const std::vector<int64_t>& v) { return std::vector<int32_t>(v.begin(), v.end()); }

// Every case: a causal LM stores tokens [B, T+1] (targets are the shift); the other
// tasks store inputs [B, T] and targets ([B, T] per token or [B] per row), and may add
// lengths [B] (padding), keep [L, B] (stochastic depth), dropout_seed [1] with the masks
// the reference made of it, drop [L, T, B, d] and head_drop [B, d], and images [B, C, H, W].
void check_forward_and_gradients(const std::string& model_path, const SafeTensorsFile& cf) {
  auto model = load_model(model_path);
  const ModelConfig& c = model->config();
  std::vector<int64_t> shape;
  Batch batch;
  std::vector<int32_t> tokens, targets, lengths;
  std::vector<float> images, keep;
  if (c.token_input()) {
    tokens = to_i32(cf.read_int("tokens", &shape));
    batch.B = int(shape[0]);
    batch.stride = int(shape[1]);
    batch.tokens = tokens.data();
    if (cf.has("targets")) {
      batch.T = batch.stride;
      targets = to_i32(cf.read_int("targets"));
      batch.targets = targets.data();
    } else {
      batch.T = batch.stride - 1;
      batch.targets = tokens.data() + 1;
    }
  } else {
    images = cf.read_f32("images", &shape);
    batch.B = int(shape[0]);
    batch.T = c.seq_len;
    batch.images = images.data();
    targets = to_i32(cf.read_int("targets"));
    batch.targets = targets.data();
  }
  if (cf.has("lengths")) {
    lengths = to_i32(cf.read_int("lengths"));
    batch.lengths = lengths.data();
  }
  if (cf.has("keep")) {
    keep = cf.read_f32("keep");
    batch.keep = keep.data();
  }
  const int B = batch.B, T = batch.T, V = c.out_dim();
  if (cf.has("dropout_seed")) {
    batch.dropout = true;
    batch.dropout_seed = uint64_t(cf.read_int("dropout_seed")[0]);
    // The reference's copy of the generator made these masks of the seed: [L, T, B, d]
    // (sequence-major rows, as the engine's ops read them) and [B, d]. The engine's must
    // be the same to the bit.
    const int d = c.d_model;
    auto engine_mask = [&](int stream, float p, int rows, int positions) {
      return test::materialised(ops::drop_mask(batch.dropout_seed, stream, p, 0), rows, positions, d);
    };
    ASSERT_EQ(cf.has("drop"), c.dropout > 0);
    if (cf.has("drop")) {
      const std::vector<float> want = cf.read_f32("drop");
      for (int l = 0; l < c.n_layers; ++l) {
        const std::vector<float> got = engine_mask(l, c.dropout, B, T);
        ASSERT_TRUE(std::equal(got.begin(), got.end(), want.begin() + ptrdiff_t(l) * B * T * d))
            << "layer " << l << "'s dropout mask differs from the reference's";
      }
    }
    ASSERT_EQ(cf.has("head_drop"), c.head_dropout > 0);
    if (cf.has("head_drop")) {
      ASSERT_EQ(engine_mask(c.n_layers, c.head_dropout, B, 1), cf.read_f32("head_drop"))
          << "the classifier input's dropout mask differs from the reference's";
    }
  }

  model->zero_grad();
  const double loss = model->forward(batch);
  const float want_loss = cf.read_f32("loss")[0];
  EXPECT_NEAR(loss, want_loss, kLossRtol * std::fabs(want_loss)) << "loss";

  // Per-token logits are sequence-major [T, B, V] here and [B, T, V] in the reference.
  const auto want_logits = cf.read_f32("logits");
  std::vector<float> got(want_logits.size());
  if (c.per_token_output()) {
    ASSERT_EQ(got.size(), size_t(B) * T * V);
    for (int b = 0; b < B; ++b)
      for (int t = 0; t < T; ++t)
        for (int v = 0; v < V; ++v)
          got[(size_t(b) * T + t) * V + v] = model->logits()[(size_t(t) * B + b) * V + v];
  } else {
    ASSERT_EQ(got.size(), size_t(B) * V);
    std::copy(model->logits(), model->logits() + got.size(), got.begin());
  }
  EXPECT_TRUE(test::all_close(got.data(), want_logits.data(), got.size(), kLogitAtol, kLogitRtol, "logits"));

  model->backward();
  for (const auto& p : model->params()) {
    const auto want = cf.read_f32("grad." + p.name);
    ASSERT_EQ(want.size(), p.size) << p.name;
    EXPECT_TRUE(test::all_close(model->grads() + p.offset, want.data(), p.size, kGradAtol, kGradRtol,
                                "grad." + p.name));
  }
}

TEST_P(Parity, ForwardLossAndEveryGradient) { check_forward_and_gradients(model_path(), case_file()); }

// The variants share the optimizer, so their cases check forward and gradients only.
class VariantParity : public Parity {};
TEST_P(VariantParity, ForwardLossAndEveryGradient) { check_forward_and_gradients(model_path(), case_file()); }

TEST_P(Parity, TenAdamWSteps) {
  auto model = load_model(model_path());
  const auto cf = case_file();
  const auto tc = TrainConfig::from_json(nlohmann::json::parse(cf.metadata().at("gmlp.train")), "fixture");
  std::vector<int64_t> shape;
  const auto tokens = to_i32(cf.read_int("train.tokens", &shape));
  const int steps = int(shape[0]), B = int(shape[1]), T = int(shape[2]) - 1;
  const auto want_losses = cf.read_f32("train.losses");
  const auto want_lrs = cf.read_f32("train.lrs");

  AdamW opt(model->params(), model->num_params(), tc);
  for (int s = 0; s < steps; ++s) {
    const int32_t* batch = tokens.data() + size_t(s) * B * (T + 1);
    model->zero_grad();
    const double loss = model->forward(batch, batch + 1, T + 1, B, T);
    EXPECT_NEAR(loss, want_losses[size_t(s)], kTrainLossRtol * std::fabs(want_losses[size_t(s)])) << "step " << s + 1;
    model->backward();
    clip_grad_norm(model->grads(), model->num_params(), tc.clip);
    const float lr = learning_rate(tc, model->config().d_model, s + 1);
    EXPECT_NEAR(lr, want_lrs[size_t(s)], 1e-6f * want_lrs[size_t(s)]) << "lr at step " << s + 1;
    opt.step(model->weights(), model->grads(), lr);
  }
  for (const auto& p : model->params()) {
    const auto want = cf.read_f32("final." + p.name);
    EXPECT_TRUE(test::all_close(model->weights() + p.offset, want.data(), p.size, kFinalAtol, kFinalRtol,
                                "final." + p.name));
  }
}

INSTANTIATE_TEST_SUITE_P(Reference, Parity, ::testing::Values("tiny", "odd", "deep", "long"));
// docs/variants.md: every task and variant against the same reference.
INSTANTIATE_TEST_SUITE_P(Variants, VariantParity,
                         ::testing::Values("mlm_bidir", "mlm_pad", "classify_pad", "heads_causal", "heads_bidir_pad",
                                           "toeplitz_causal", "toeplitz_bidir", "toeplitz_heads", "amlp_causal",
                                           "amlp_bidir_pad", "sgu_none", "sgu_linear", "sgu_additive",
                                           "sgu_multiplicative", "sgu_linear_bidir_pad", "vision", "vision_drop",
                                           "vision_amlp_heads", "classify_dropout", "mlm_dropout",
                                           "vision_drop_dropout"));

}  // namespace
}  // namespace gmlp

namespace gmlp {
namespace {

// The other direction: a checkpoint trained and written here loads into PyTorch
// (strict state_dict, names and shapes from docs/checkpoint.md) and gives the same logits.
TEST(Interop, PyTorchLoadsOurCheckpoint) {
  test::TempDir dir("interop");
  const std::string run = dir.file("run");
  auto r = test::run_command(test::gmlp_exe() + " train --data /usr/share/common-licenses/GPL-3 --out " + run +
                             " --steps 15 --no-progress --tokenizer char --set model.pos_embedding=\"sinusoidal\""
                             " --set model.d_model=24 --set model.d_ffn=40 --set model.n_layers=2"
                             " --set model.seq_len=20 --batch-size 4");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  auto model = load_model(model_file(run));
  const int B = 3, T = 17, V = model->config().vocab_size;
  Rng rng(5);
  std::vector<int32_t> tokens(size_t(B) * (T + 1));
  for (auto& t : tokens) t = int32_t(rng.below(uint64_t(V)));
  SafeTensorsWriter w;
  w.add_i32("tokens", {B, T + 1}, tokens.data());
  w.write(dir.file("tokens.safetensors"));
  r = test::run_command("/usr/bin/python3 " + test::source_dir() + "/tests/reference/logits_of_checkpoint.py " +
                        model_file(run) + " " + dir.file("tokens.safetensors") + " " + dir.file("out.safetensors"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const auto out = SafeTensorsFile::load(dir.file("out.safetensors"));
  const double loss = model->forward(tokens.data(), tokens.data() + 1, T + 1, B, T);
  EXPECT_NEAR(loss, out.read_f32("loss")[0], 1e-5 * loss);
  const auto want = out.read_f32("logits");
  std::vector<float> got(want.size());
  for (int b = 0; b < B; ++b)
    for (int t = 0; t < T; ++t)
      for (int v = 0; v < V; ++v) got[(size_t(b) * T + t) * V + v] = model->logits()[(size_t(t) * B + b) * V + v];
  EXPECT_TRUE(test::all_close(got.data(), want.data(), got.size(), kLogitAtol, kLogitRtol, "logits"));
}

}  // namespace
}  // namespace gmlp
