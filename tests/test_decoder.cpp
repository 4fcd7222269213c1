// The cached decoder against full forwards: the same logits at every position, and the
// same generated text through window slides, for the reference fixtures and for a small
// random model of every causal variant of docs/variants.md.
#include <gtest/gtest.h>

#include <functional>
#include <string>
#include <vector>

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

// Generation with the cache and with the window recomputed gives the same tokens, greedy
// and sampled, over 2.5 windows: the context slides twice and the cache is rebuilt.
void expect_cached_equals_recomputed(Model& model, const std::vector<int32_t>& prompt) {
  const int n = model.config().seq_len;
  for (float temperature : {0.f, 1.f}) {
    SamplingOptions opt;
    opt.temperature = temperature;
    Rng r1(42), r2(42);
    const auto cached = generate(model, prompt, 5 * n / 2, opt, r1, nullptr, true);
    const auto full = generate(model, prompt, 5 * n / 2, opt, r2, nullptr, false);
    EXPECT_EQ(cached, full) << "temperature " << temperature;
    EXPECT_EQ(cached.size(), size_t(5 * n / 2));
  }
}

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
  const std::vector<int32_t> prompt = {1, 2, 3};
  expect_cached_equals_recomputed(*model, prompt);
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

INSTANTIATE_TEST_SUITE_P(DecoderFixtures, DecoderVsForward, ::testing::Values("tiny", "odd", "deep", "long"));

// ---- Every causal variant, on small random models.

struct Variant {
  std::string name;
  std::function<void(ModelConfig&)> set;
};

std::vector<Variant> causal_variants() {
  return {
      {"split", [](ModelConfig&) {}},
      {"linear", [](ModelConfig& c) { c.sgu = Sgu::linear; }},
      {"additive", [](ModelConfig& c) { c.sgu = Sgu::additive; }},
      {"multiplicative", [](ModelConfig& c) { c.sgu = Sgu::multiplicative; }},
      {"none", [](ModelConfig& c) { c.sgu = Sgu::none; }},
      {"heads2", [](ModelConfig& c) { c.sgu_heads = 2; }},
      {"multiplicative_heads3", [](ModelConfig& c) { c.sgu = Sgu::multiplicative; c.sgu_heads = 3; }},
      {"toeplitz", [](ModelConfig& c) { c.spatial = Spatial::toeplitz; }},
      {"toeplitz_heads2", [](ModelConfig& c) { c.spatial = Spatial::toeplitz; c.sgu_heads = 2; }},
      {"additive_toeplitz_heads2", [](ModelConfig& c) { c.sgu = Sgu::additive; c.spatial = Spatial::toeplitz; c.sgu_heads = 2; }},
      {"amlp", [](ModelConfig& c) { c.d_attn = 8; }},
      {"amlp_heads2", [](ModelConfig& c) { c.d_attn = 8; c.sgu_heads = 2; }},
      {"amlp_toeplitz", [](ModelConfig& c) { c.d_attn = 8; c.spatial = Spatial::toeplitz; }},
      {"sinusoidal", [](ModelConfig& c) { c.pos_embedding = PosEmbedding::sinusoidal; }},
      {"tanh_gelu", [](ModelConfig& c) { c.gelu = Gelu::tanh; c.sgu_norm_eps = 1e-6f; }},
      {"everything", [](ModelConfig& c) {
         c.d_attn = 4;
         c.sgu_heads = 4;
         c.spatial = Spatial::toeplitz;
         c.pos_embedding = PosEmbedding::sinusoidal;
         c.gelu = Gelu::tanh;
         c.n_layers = 3;
       }},
  };
}

ModelConfig variant_config(const Variant& v) {
  ModelConfig c;
  c.vocab_size = 256;  // the byte tokenizer
  c.d_model = 16;
  c.d_ffn = 48;
  c.n_layers = 2;
  c.seq_len = 12;
  v.set(c);
  c.validate();
  return c;
}

// the init of docs/model.md §2, then spatial weights U(-0.3, 0.3) and biases 1 + U(-0.3, 0.3): large enough
// that the mixing matters, and a wrong row or bias index shows.
std::unique_ptr<Model> random_model(const ModelConfig& c, uint64_t seed) {
  auto m = std::make_unique<Model>(c);
  Rng rng(seed);
  m->init(rng);
  for (const ParamInfo& p : m->params()) {
    const bool w = p.name.find("sgu.spatial.weight") != std::string::npos;
    const bool b = p.name.find("sgu.spatial.bias") != std::string::npos;
    if (!w && !b) continue;
    float* v = m->weights() + p.offset;
    for (size_t i = 0; i < p.size; ++i) v[i] = (b ? 1.f : 0.f) + rng.uniform(-0.3f, 0.3f);
  }
  return m;
}

class DecoderVariants : public ::testing::TestWithParam<Variant> {};

TEST_P(DecoderVariants, PrefillAndStepsMatchTheForwardAtEveryPosition) {
  const ModelConfig c = variant_config(GetParam());
  ASSERT_TRUE(Decoder::supports(c));
  auto model = random_model(c, 7);
  const int n = c.seq_len, V = c.vocab_size;
  Rng rng(11);
  std::vector<int32_t> tokens(size_t(n), 0);
  for (auto& t : tokens) t = int32_t(rng.below(uint64_t(V)));
  // One forward over the whole window: causal, so position t's logits are those of the
  // prefix ending at t.
  NoGrad no_grad(*model);
  model->forward(tokens.data(), nullptr, n, 1, n);
  const std::vector<float> want(model->logits(), model->logits() + size_t(n) * V);
  Decoder dec(*model);
  for (int first : {1, 5, n}) {
    for (int len = first; len <= n; ++len) {
      const float* got = len == first ? dec.prefill(tokens.data(), len) : dec.step(tokens[size_t(len - 1)]);
      ASSERT_TRUE(test::all_close(got, want.data() + size_t(len - 1) * V, size_t(V), 2e-5f, 1e-4f,
                                  "prefill " + std::to_string(first) + ", logits at length " + std::to_string(len)));
    }
    EXPECT_EQ(dec.length(), n);
  }
  EXPECT_THROW(dec.step(tokens[0]), Error) << "a full context cannot take another token";
}

TEST_P(DecoderVariants, CachedAndUncachedGenerateTheSameTokensThroughSlides) {
  const ModelConfig c = variant_config(GetParam());
  auto model = random_model(c, 8);
  const std::vector<int32_t> prompt = {72, 101, 108};
  expect_cached_equals_recomputed(*model, prompt);
}

INSTANTIATE_TEST_SUITE_P(Decoder, DecoderVariants, ::testing::ValuesIn(causal_variants()),
                         [](const ::testing::TestParamInfo<Variant>& i) { return i.param.name; });

TEST(DecoderSupports, EveryCausalLmAndNothingElse) {
  for (const Variant& v : causal_variants()) EXPECT_TRUE(Decoder::supports(variant_config(v))) << v.name;
  ModelConfig mlm = variant_config(causal_variants()[0]);
  mlm.task = Task::mlm;
  EXPECT_FALSE(Decoder::supports(mlm));
  Model model(mlm);
  EXPECT_THROW(Decoder{model}, Error);
}

}  // namespace
}  // namespace gmlp
