// The cached decoder against full forwards: the same logits at every position, and the
// same generated text through window slides.
#include <gtest/gtest.h>

#include "gmlp/checkpoint.h"
#include "gmlp/decoder.h"
#include "gmlp/error.h"
#include "gmlp/generate.h"
#include "test_util.h"

namespace gmlp {
namespace {

class DecoderVsForward : public ::testing::TestWithParam<std::string> {
 protected:
  std::unique_ptr<Model> load() {
    return load_model(test::reference_fixture_dir() + "/" + GetParam() + ".model.safetensors");
  }
};

TEST_P(DecoderVsForward, SameLogitsAtEveryPosition) {
  auto model = load();
  const int n = model->config().seq_len, V = model->config().vocab_size;
  Rng rng(11);
  std::vector<int32_t> tokens(size_t(n), 0);
  for (auto& t : tokens) t = int32_t(rng.below(uint64_t(V)));
  Decoder dec(*model);
  // Prefill a few tokens, then step one at a time to the end of the window.
  const int first = std::min(3, n);
  for (int len = first; len <= n; ++len) {
    const float* got = len == first ? dec.prefill(tokens.data(), len) : dec.step(tokens[size_t(len - 1)]);
    std::vector<float> mine(got, got + V);
    model->forward(tokens.data(), nullptr, len, 1, len);
    const float* want = model->logits() + size_t(len - 1) * V;
    ASSERT_TRUE(test::all_close(mine.data(), want, size_t(V), 2e-5f, 2e-5f, "logits at length " + std::to_string(len)));
  }
  EXPECT_EQ(dec.length(), n);
  EXPECT_THROW(dec.step(tokens[0]), Error) << "a full context cannot take another token";
}

TEST_P(DecoderVsForward, CachedAndFullRecomputeGenerateTheSameText) {
  auto model = load();
  const int n = model->config().seq_len;
  const std::vector<int32_t> prompt = {1, 2, 3};
  for (float temperature : {0.f, 1.f}) {
    SamplingOptions opt;
    opt.temperature = temperature;
    Rng r1(42), r2(42);
    // 2.5 windows: the context slides twice.
    const auto cached = generate(*model, prompt, 5 * n / 2, opt, r1, nullptr, true);
    const auto full = generate(*model, prompt, 5 * n / 2, opt, r2, nullptr, false);
    EXPECT_EQ(cached, full) << "temperature " << temperature;
    EXPECT_EQ(cached.size(), size_t(5 * n / 2));
  }
}

TEST_P(DecoderVsForward, NoGradForwardGivesTheSameLogitsAndRefusesBackward) {
  auto model = load();
  const int n = model->config().seq_len, V = model->config().vocab_size, B = 3;
  Rng rng(12);
  std::vector<int32_t> tokens(size_t(B) * (n + 1));
  for (auto& t : tokens) t = int32_t(rng.below(uint64_t(V)));
  const double loss = model->forward(tokens.data(), tokens.data() + 1, n + 1, B, n);
  const std::vector<float> with_grad(model->logits(), model->logits() + size_t(B) * n * V);
  {
    NoGrad no_grad(*model);
    EXPECT_EQ(model->forward(tokens.data(), tokens.data() + 1, n + 1, B, n), loss);
    EXPECT_TRUE(std::equal(with_grad.begin(), with_grad.end(), model->logits()));
    EXPECT_THROW(model->backward(), Error);
  }
  EXPECT_TRUE(model->grad_enabled()) << "NoGrad restores the setting";
}

INSTANTIATE_TEST_SUITE_P(Reference, DecoderVsForward, ::testing::Values("tiny", "odd", "deep", "long"));

}  // namespace
}  // namespace gmlp
