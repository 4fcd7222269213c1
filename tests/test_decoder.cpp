// The cached decoder against full forwards: the same logits at every position, and the
// same generated text through window slides, for the reference fixtures and for a small
// random model of every causal variant of docs/variants.md.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "gmlp/checkpoint.h"
#include "gmlp/decoder.h"
#include "gmlp/error.h"
#include "gmlp/files.h"
#include "gmlp/generate.h"
#include "separate_memory.h"
#include "ops/ops.h"
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
  // A model whose first forward has no gradients builds the smaller arena (no U: the
  // GELU runs in place) and still gives the same logits.
  auto fresh = load();
  NoGrad no_grad(*fresh);
  EXPECT_EQ(fresh->forward(tokens.data(), tokens.data() + 1, n + 1, B, n), loss);
  EXPECT_TRUE(std::equal(with_grad.begin(), with_grad.end(), fresh->logits()));
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

// A window of random tokens, and the logits of one forward over it: causal, so position
// t's logits are those of the prefix ending at t.
struct Window {
  std::vector<int32_t> tokens;
  std::vector<float> logits;
};
Window random_window(Model& model, uint64_t seed) {
  const int n = model.config().seq_len, V = model.config().vocab_size;
  Rng rng(seed);
  Window w;
  w.tokens.resize(size_t(n));
  for (auto& t : w.tokens) t = int32_t(rng.below(uint64_t(V)));
  NoGrad no_grad(model);
  model.forward(w.tokens.data(), nullptr, n, 1, n);
  w.logits.assign(model.logits(), model.logits() + size_t(n) * V);
  return w;
}

TEST_P(DecoderVariants, PrefillAndStepsMatchTheForwardAtEveryPosition) {
  const ModelConfig c = variant_config(GetParam());
  ASSERT_TRUE(Decoder::supports(c));
  auto model = random_model(c, 7);
  const int n = c.seq_len, V = c.vocab_size;
  const auto [tokens, want] = random_window(*model, 11);
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

// With bf16 products (emulated: the same rounding as the instructions) the cached
// decoder's logits stay near the float32 forward's, and are not float32's.
TEST_P(DecoderVariants, Bf16StepsStayNearTheFloat32Forward) {
  const ModelConfig c = variant_config(GetParam());
  auto model = random_model(c, 7);
  const int n = c.seq_len, V = c.vocab_size;
  const auto [tokens, want] = random_window(*model, 12);
  test::Fp32ProductsAgain restore;
  ops::set_products(ops::Products::bf16_emulated);
  Decoder dec(*model);
  double moved = 0.0;
  for (int len = 1; len <= n; ++len) {
    const float* got = len == 1 ? dec.prefill(tokens.data(), 1) : dec.step(tokens[size_t(len - 1)]);
    const float* w = want.data() + size_t(len - 1) * V;
    ASSERT_TRUE(test::all_close(got, w, size_t(V), 2e-2f, 2e-2f, "logits at length " + std::to_string(len)));
    for (int v = 0; v < V; ++v) moved = std::max(moved, std::fabs(double(got[v]) - w[v]));
  }
  EXPECT_GT(moved, 1e-4) << "bf16 gave the float32 logits; were the products rounded at all?";
}

TEST_P(DecoderVariants, CachedAndUncachedGenerateTheSameTokensThroughSlides) {
  const ModelConfig c = variant_config(GetParam());
  auto model = random_model(c, 8);
  const std::vector<int32_t> prompt = {72, 101, 108};
  expect_cached_equals_recomputed(*model, prompt);
}

// Several streams in one decoder: prompts of different lengths, stepped in changing
// subsets and orders, each stream's logits equal bit for bit to those of a one-stream
// decoder fed the same tokens (the rows beside it change nothing).
TEST_P(DecoderVariants, StreamsSteppedTogetherEqualOneStreamDecodersBitForBit) {
  const ModelConfig c = variant_config(GetParam());
  auto model = random_model(c, 9);
  const int n = c.seq_len, V = c.vocab_size, S = 4;
  Rng rng(13);
  std::vector<std::vector<int32_t>> seq(S, std::vector<int32_t>(size_t(n)));
  for (auto& s : seq)
    for (auto& t : s) t = int32_t(rng.below(uint64_t(V)));
  const int first[S] = {1, 4, 2, 7};
  Decoder many(*model, S);
  std::vector<std::unique_ptr<Decoder>> one;
  for (int k = 0; k < S; ++k) {
    one.push_back(std::make_unique<Decoder>(*model));
    const float* a = many.prefill(seq[k].data(), first[k], k);
    const float* b = one[k]->prefill(seq[k].data(), first[k]);
    ASSERT_TRUE(std::equal(a, a + V, b)) << "prefill of stream " << k;
  }
  // Each round steps the streams not yet full, skipping one in turn, in reversed order
  // every other round.
  for (int round = 0; round < 2 * n; ++round) {
    std::vector<int> which;
    std::vector<int32_t> tokens;
    for (int k = 0; k < S; ++k)
      if (many.length(k) < n && k != round % S) which.push_back(k);
    if (which.empty()) continue;
    if (round % 2) std::reverse(which.begin(), which.end());
    for (int k : which) tokens.push_back(seq[k][size_t(many.length(k))]);
    const float* all = many.step(tokens.data(), which.data(), int(which.size()));
    for (size_t r = 0; r < which.size(); ++r) {
      const int k = which[r];
      const float* want = one[size_t(k)]->step(tokens[r]);
      ASSERT_TRUE(std::equal(want, want + V, all + size_t(k) * V)) << "stream " << k << " at length " << many.length(k);
    }
  }
  for (int k = 0; k < S; ++k) EXPECT_EQ(many.length(k), n) << k;
  const int32_t t = 0;
  const int twice[2] = {0, 0};
  const int32_t two[2] = {0, 0};
  Decoder fresh(*model, 2);
  fresh.prefill(&t, 1, 0);
  fresh.prefill(&t, 1, 1);
  EXPECT_THROW(fresh.step(two, twice, 2), Error) << "a stream given twice";
  EXPECT_THROW(fresh.step(t), Error) << "step(token) on a decoder of two streams";
}

// generate_batch gives every prompt the tokens generate() gives it with the same
// generator, greedy and sampled, through window slides that happen at different steps
// for prompts of different lengths.
TEST_P(DecoderVariants, BatchedGenerationEqualsOnePromptAtATime) {
  const ModelConfig c = variant_config(GetParam());
  auto model = random_model(c, 10);
  const int n = c.seq_len;
  const std::vector<std::vector<int32_t>> prompts = {{72}, {72, 101, 108, 108, 111}, {1, 2, 3}, {9}};
  for (float temperature : {0.f, 1.f}) {
    SamplingOptions opt;
    opt.temperature = temperature;
    std::vector<Rng> rngs;
    for (size_t k = 0; k < prompts.size(); ++k) rngs.emplace_back(100 + k);
    const auto got = generate_batch(*model, prompts, 5 * n / 2, opt, rngs);
    ASSERT_EQ(got.size(), prompts.size());
    for (size_t k = 0; k < prompts.size(); ++k) {
      Rng r(100 + k);
      EXPECT_EQ(got[k], generate(*model, prompts[k], 5 * n / 2, opt, r)) << "prompt " << k << ", t " << temperature;
    }
  }
  // A stream stopped by the callback ends; the others go on.
  SamplingOptions greedy;
  greedy.temperature = 0.f;
  std::vector<Rng> rngs(2, Rng(1));
  const auto got = generate_batch(*model, {{1}, {2}}, 6, greedy, rngs,
                                  [](int k, int32_t) { return k != 0; });
  EXPECT_EQ(got[0].size(), 1u);
  EXPECT_EQ(got[1].size(), 6u);
}

// A decoder whose model lives in memory apart from the host's takes a device's path
// (caches and scratch in backend memory, the step's token ids, streams and positions
// uploaded, logits read back) with the CPU's arithmetic: prefill, streams stepped
// together and batched generation equal the host decoder's bit for bit.
TEST_P(DecoderVariants, OnSeparateMemoryEqualsTheHostDecoderBitForBit) {
  const ModelConfig c = variant_config(GetParam());
  auto host = random_model(c, 12);
  Model dev(c, test::separate_backend());
  std::copy(host->weights(), host->weights() + host->num_params(), dev.weights());
  const int n = c.seq_len, V = c.vocab_size, S = 3;
  Rng rng(17);
  std::vector<std::vector<int32_t>> seq(S, std::vector<int32_t>(size_t(n)));
  for (auto& s : seq)
    for (auto& t : s) t = int32_t(rng.below(uint64_t(V)));
  Decoder a(*host, S), b(dev, S);
  const int first[S] = {3, 1, 6};
  for (int k = 0; k < S; ++k) {
    const float* x = a.prefill(seq[k].data(), first[k], k);
    const float* y = b.prefill(seq[k].data(), first[k], k);
    ASSERT_TRUE(std::equal(x, x + V, y)) << "prefill of stream " << k;
  }
  for (int round = 0; round < n; ++round) {
    std::vector<int> which;
    std::vector<int32_t> tokens;
    for (int k = S - 1; k >= 0; --k)
      if (a.length(k) < n && (k + round) % 3 != 0) which.push_back(k);
    if (which.empty()) continue;
    for (int k : which) tokens.push_back(seq[size_t(k)][size_t(a.length(k))]);
    const float* x = a.step(tokens.data(), which.data(), int(which.size()));
    const float* y = b.step(tokens.data(), which.data(), int(which.size()));
    for (int k : which) {
      ASSERT_EQ(a.length(k), b.length(k));
      ASSERT_TRUE(std::equal(x + size_t(k) * V, x + size_t(k + 1) * V, y + size_t(k) * V))
          << "stream " << k << " at length " << a.length(k);
    }
  }
  SamplingOptions opt;
  opt.temperature = 1.f;
  std::vector<Rng> ra(2, Rng(5)), rb(2, Rng(5));
  const std::vector<std::vector<int32_t>> prompts = {{72, 101}, {9}};
  EXPECT_EQ(generate_batch(*host, prompts, 2 * n, opt, ra), generate_batch(dev, prompts, 2 * n, opt, rb));
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

// gmlp generate --prompts: one JSON line per prompt, in order, each the text that
// `--prompt` gives with seed + k (as UTF-8); a bad file is refused before anything is printed.
TEST(GenerateCli, PromptsFileGivesWhatOnePromptAtATimeGives) {
  test::TempDir dir("generate_prompts");
  const std::string model = test::reference_fixture_dir() + "/tiny.model.safetensors";
  const std::string file = dir.file("prompts.txt");
  write_file_atomic(file, "Hello\n\nab\r\nthe end\n");
  const std::string common = " generate --model " + model + " --max-tokens 20 --temperature 1 --seed 5";
  const auto r = test::run_command(test::gmlp_exe() + common + " --prompts " + file + " --batch 2 2>&1");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  std::vector<nlohmann::json> lines;
  size_t start = 0;
  while (start < r.output.size()) {
    const size_t end = r.output.find('\n', start);
    lines.push_back(nlohmann::json::parse(r.output.substr(start, end - start)));
    start = end + 1;
  }
  const std::vector<std::string> prompts = {"Hello", "ab", "the end"};
  ASSERT_EQ(lines.size(), prompts.size()) << r.output;
  for (size_t k = 0; k < prompts.size(); ++k) {
    EXPECT_EQ(lines[k]["prompt"], prompts[k]);
    // Streamed output: the prompt, the text, a newline.
    const auto one = test::run_command(test::gmlp_exe() + " generate --model " + model +
                                       " --max-tokens 20 --temperature 1 --seed " + std::to_string(5 + k) +
                                       " --prompt '" + prompts[k] + "'");
    ASSERT_EQ(one.exit_code, 0) << one.output;
    // JSON carries text as UTF-8: bytes that are not (a random model's) become U+FFFD.
    const std::string want = one.output.substr(prompts[k].size(), one.output.size() - prompts[k].size() - 1);
    const auto as_json = nlohmann::json::parse(
        nlohmann::json(want).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace));
    EXPECT_EQ(lines[k]["text"], as_json) << "prompt " << k;
  }
  write_file_atomic(file, "\n\n");
  auto bad = test::run_command(test::gmlp_exe() + common + " --prompts " + file + " 2>&1");
  EXPECT_EQ(bad.exit_code, 1);
  EXPECT_NE(bad.output.find("gmlp: error: --prompts " + file + ": no prompts"), std::string::npos) << bad.output;
  write_file_atomic(file, "ok\n" + std::string(1000, 'x') + "\n");
  bad = test::run_command(test::gmlp_exe() + common + " --prompts " + file + " 2>/dev/null");
  EXPECT_EQ(bad.exit_code, 1);
  EXPECT_EQ(bad.output, "") << "nothing is printed before every prompt is checked";
  bad = test::run_command(test::gmlp_exe() + common + " --prompts " + dir.file("missing") + " 2>&1");
  EXPECT_EQ(bad.exit_code, 1);
  EXPECT_NE(bad.output.find("missing"), std::string::npos) << bad.output;
}

}  // namespace
}  // namespace gmlp
