// Model-level properties of the gMLP variants (docs/variants.md): padding never
// changes a real token's output; Toeplitz models run past n with a reach of n tokens;
// causal models never look ahead; stochastic depth scales exactly the dropped or kept
// branch; every variant's checkpoint round-trips with the documented tensor names; and
// impossible configs are refused naming the key.
#include <gtest/gtest.h>
#include <malloc.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <map>
#include <ostream>
#include <random>
#include <string>
#include <vector>

#include "gmlp/checkpoint.h"
#include "gmlp/config.h"
#include "gmlp/error.h"
#include "gmlp/model.h"
#include "gmlp/safetensors.h"
#include "backend/cpu_backend.h"
#include "test_util.h"

namespace gmlp {
namespace {

using Vec = std::vector<float>;
using Ids = std::vector<int32_t>;

// A tiny model of `task`; spatial_init is large so that any leak through the token
// mixing shows (the default 0.01 would hide it in rounding).
ModelConfig tiny(const std::string& task, const std::function<void(ModelConfig&)>& edit = {}) {
  ModelConfig c;
  c.task = *enum_from_name<Task>(task);
  c.d_model = 16;
  c.d_ffn = 32;
  c.n_layers = 2;
  c.seq_len = 64;
  c.spatial_init = 0.5f;
  if (task == "classify") c.n_classes = 3;
  if (task == "vision") {
    c.vocab_size = 0;
    c.tokenizer = nullptr;
    c.n_classes = 3;
    c.image_channels = 2;
    c.image_height = 8;
    c.image_width = 12;
    c.patch_height = 4;
    c.patch_width = 3;
    c.seq_len = 8;
  }
  if (edit) edit(c);
  return c;
}

std::unique_ptr<Model> make(const ModelConfig& c, uint64_t seed = 5) {
  auto m = std::make_unique<Model>(c);
  Rng rng(seed);
  m->init(rng);
  return m;
}

Ids random_ids(size_t n, int vocab, std::mt19937& rng) {
  std::uniform_int_distribution<int> u(0, vocab - 1);
  Ids v(n);
  for (auto& x : v) x = u(rng);
  return v;
}

// The logits of one forward, copied out ([T*B, V] sequence-major or [B, classes]).
Vec logits_of(Model& m, const Batch& b) {
  m.forward(b);
  const size_t rows = m.config().per_token_output() ? size_t(b.T) * b.B : size_t(b.B);
  return Vec(m.logits(), m.logits() + rows * m.config().out_dim());
}

Batch token_batch(const Ids& tokens, int B, int T, int stride, const int32_t* lengths = nullptr,
                  const float* keep = nullptr) {
  Batch b;
  b.B = B;
  b.T = T;
  b.stride = stride;
  b.tokens = tokens.data();
  b.lengths = lengths;
  b.keep = keep;
  return b;
}

// ---- padding

struct Variant {
  std::string name;
  ModelConfig cfg;
};
void PrintTo(const Variant& v, std::ostream* os) { *os << v.name; }

std::vector<Variant> bidirectional_variants() {
  return {
      {"mlm_split", tiny("mlm")},
      {"mlm_heads2", tiny("mlm", [](ModelConfig& c) { c.sgu_heads = 2; })},
      {"mlm_linear", tiny("mlm", [](ModelConfig& c) { c.sgu = Sgu::linear; })},
      {"mlm_additive", tiny("mlm", [](ModelConfig& c) { c.sgu = Sgu::additive; })},
      {"mlm_multiplicative", tiny("mlm", [](ModelConfig& c) { c.sgu = Sgu::multiplicative; })},
      {"mlm_amlp", tiny("mlm", [](ModelConfig& c) { c.d_attn = 8; })},
      {"mlm_toeplitz", tiny("mlm", [](ModelConfig& c) { c.spatial = Spatial::toeplitz; })},
      {"mlm_toeplitz_heads2_sinusoidal", tiny("mlm", [](ModelConfig& c) {
         c.spatial = Spatial::toeplitz;
         c.sgu_heads = 2;
         c.pos_embedding = PosEmbedding::sinusoidal;
       })},
      {"classify", tiny("classify")},
      {"classify_amlp_heads2", tiny("classify", [](ModelConfig& c) {
         c.d_attn = 8;
         c.sgu_heads = 4;
       })},
  };
}

class PaddingInvariance : public ::testing::TestWithParam<Variant> {};

// The requirement: a real token's output is identical whether the batch is
// padded to 40 or to the full n, whatever the padding holds.
TEST_P(PaddingInvariance, RealTokensIgnoreThePadding) {
  const ModelConfig& c = GetParam().cfg;
  auto m = make(c);
  const int B = 3, n = c.seq_len, T1 = 40;
  ASSERT_EQ(n, 64);
  const Ids lengths = {40, 23, 1};
  std::mt19937 rng(3);
  const Ids real = random_ids(size_t(B) * n, c.vocab_size, rng);
  // Same real tokens, different garbage after them.
  Ids short_ids = random_ids(size_t(B) * T1, c.vocab_size, rng), full_ids = random_ids(size_t(B) * n, c.vocab_size, rng);
  for (int b = 0; b < B; ++b)
    for (int t = 0; t < lengths[size_t(b)]; ++t) {
      short_ids[size_t(b) * T1 + t] = real[size_t(b) * n + t];
      full_ids[size_t(b) * n + t] = real[size_t(b) * n + t];
    }
  const Vec a = logits_of(*m, token_batch(short_ids, B, T1, T1, lengths.data()));
  Vec z;
  {
    NoGrad ng(*m);  // the inference path must agree too
    z = logits_of(*m, token_batch(full_ids, B, n, n, lengths.data()));
  }
  const int V = c.out_dim();
  if (c.per_token_output()) {
    for (int b = 0; b < B; ++b)
      for (int t = 0; t < lengths[size_t(b)]; ++t)
        ASSERT_TRUE(test::all_close(a.data() + (size_t(t) * B + b) * V, z.data() + (size_t(t) * B + b) * V, size_t(V),
                                    1e-5f, 1e-5f, "row " + std::to_string(b) + " position " + std::to_string(t)));
  } else {
    EXPECT_TRUE(test::all_close(a.data(), z.data(), size_t(B) * V, 1e-5f, 1e-5f, "class logits"));
  }
  // The check is sensitive: without the lengths the garbage does reach the real tokens.
  const Vec a2 = logits_of(*m, token_batch(short_ids, B, T1, T1));
  const Vec z2 = logits_of(*m, token_batch(full_ids, B, n, n));
  double worst = 0.0;
  if (c.per_token_output()) {
    for (int t = 0; t < lengths[1]; ++t)
      for (int v = 0; v < V; ++v)
        worst = std::max(worst, double(std::fabs(a2[(size_t(t) * B + 1) * V + v] - z2[(size_t(t) * B + 1) * V + v])));
  } else {
    for (size_t i = 0; i < a2.size(); ++i) worst = std::max(worst, double(std::fabs(a2[i] - z2[i])));
  }
  EXPECT_GT(worst, 1e-3) << "unmasked padding should have changed the outputs; the test would not notice a leak";
}

INSTANTIATE_TEST_SUITE_P(Each, PaddingInvariance, ::testing::ValuesIn(bidirectional_variants()),
                         [](const auto& info) { return info.param.name; });

TEST(PaddingGradients, LossAndEveryGradientIgnoreThePadding) {
  // Classify: the loss and every gradient are the same at T = 40 and T = 64.
  const ModelConfig c = tiny("classify", [](ModelConfig& c) { c.d_attn = 8; });
  auto m = make(c);
  const int B = 2, n = 64, T1 = 40;
  const Ids lengths = {40, 17};
  const Ids labels = {2, 0};
  std::mt19937 rng(9);
  Ids full = random_ids(size_t(B) * n, c.vocab_size, rng), shrt(size_t(B) * T1);
  for (int b = 0; b < B; ++b)
    for (int t = 0; t < T1; ++t) shrt[size_t(b) * T1 + t] = full[size_t(b) * n + t];
  for (int t = 17; t < T1; ++t) shrt[size_t(1) * T1 + t] = 7;  // different padding
  auto grads = [&](const Ids& ids, int T, double* loss) {
    Batch b = token_batch(ids, B, T, T, lengths.data());
    b.targets = labels.data();
    m->zero_grad();
    *loss = m->forward(b);
    m->backward();
    return Vec(m->grads(), m->grads() + m->num_params());
  };
  double l1 = 0, l2 = 0;
  const Vec g1 = grads(shrt, T1, &l1), g2 = grads(full, n, &l2);
  EXPECT_NEAR(l1, l2, 1e-6);
  // Spatial weights of columns j >= 40 get nothing at T = 40 and must get nothing at
  // T = 64 either (every key there is padding), so all gradients agree.
  EXPECT_TRUE(test::all_close(g1.data(), g2.data(), g1.size(), 1e-6f, 1e-4f, "gradients"));
}

// ---- Toeplitz: any length, a reach of n tokens

TEST(Toeplitz, CausalLmRunsPastNAndMatchesShorterRuns) {
  for (int heads : {1, 2}) {
    SCOPED_TRACE("heads=" + std::to_string(heads));
    const ModelConfig c = tiny("causal_lm", [&](ModelConfig& c) {
      c.spatial = Spatial::toeplitz;
      c.seq_len = 16;
      c.sgu_heads = heads;
    });
    auto m = make(c);
    const int B = 2, V = c.vocab_size;
    std::mt19937 rng(4);
    const Ids ids = random_ids(size_t(B) * 65, V, rng);  // rows of 65: T = 64 tokens and their targets
    for (int T : {32, 64}) {
      SCOPED_TRACE("T=" + std::to_string(T));
      Batch b = token_batch(ids, B, T, 65);
      b.targets = ids.data() + 1;
      m->zero_grad();
      const double loss = m->forward(b);
      EXPECT_TRUE(std::isfinite(loss));
      EXPECT_GT(loss, 1.0);
      m->backward();
      bool finite = true;
      for (size_t i = 0; i < m->num_params(); ++i) finite = finite && std::isfinite(m->grads()[i]);
      EXPECT_TRUE(finite) << "non-finite gradient";
      const ParamInfo& w = m->param("blocks.0.sgu.spatial.weight");
      const ParamInfo& bias = m->param("blocks.0.sgu.spatial.bias");
      EXPECT_EQ(w.shape, (heads == 1 ? std::vector<int64_t>{16} : std::vector<int64_t>{2, 16}));
      for (int k = 0; k < heads; ++k) {
        double wn = 0;
        for (size_t i = 0; i < 16; ++i) wn += std::fabs(m->grads()[w.offset + size_t(k) * 16 + i]);
        EXPECT_GT(wn, 0.0) << "head " << k;
        EXPECT_NE(m->grads()[bias.offset + size_t(k) * 16 + 15], 0.f)
            << "positions past n use (and train) the last bias of head " << k;
      }
    }
    // The first 16 positions at T = 32 are those of a T = 16 run over the same tokens.
    const Vec l16 = logits_of(*m, token_batch(ids, B, 16, 65));
    const Vec l32 = logits_of(*m, token_batch(ids, B, 32, 65));
    EXPECT_TRUE(test::all_close(l32.data(), l16.data(), l16.size(), 1e-5f, 1e-5f, "first 16 positions"));
  }
}

TEST(Toeplitz, ReachIsNTokensPerLayer) {
  // n = 8, two layers: position i sees tokens i - 14 .. i; token 0 reaches position 14, not 15.
  const ModelConfig c = tiny("causal_lm", [](ModelConfig& c) {
    c.spatial = Spatial::toeplitz;
    c.seq_len = 8;
  });
  auto m = make(c);
  const int B = 1, T = 30, V = c.vocab_size;
  std::mt19937 rng(6);
  Ids ids = random_ids(T, V, rng);
  const Vec a = logits_of(*m, token_batch(ids, B, T, T));
  ids[0] = (ids[0] + 1) % V;
  const Vec b = logits_of(*m, token_batch(ids, B, T, T));
  for (int t = 15; t < T; ++t)
    for (int v = 0; v < V; ++v) ASSERT_EQ(a[size_t(t) * V + v], b[size_t(t) * V + v]) << "position " << t;
  double reach = 0;
  for (int v = 0; v < V; ++v) reach = std::max(reach, double(std::fabs(a[14 * size_t(V) + v] - b[14 * size_t(V) + v])));
  EXPECT_GT(reach, 1e-4) << "token 0 should still reach position 14 through two layers";
}

TEST(Toeplitz, BidirectionalReachAndFullModelsRefuseLongerSequences) {
  const ModelConfig c = tiny("mlm", [](ModelConfig& c) {
    c.spatial = Spatial::toeplitz;
    c.seq_len = 8;
    c.n_layers = 1;
  });
  auto m = make(c);
  const int T = 20, V = c.vocab_size;
  std::mt19937 rng(8);
  Ids ids = random_ids(T, V, rng);
  const Vec a = logits_of(*m, token_batch(ids, 1, T, T));
  ids[10] = (ids[10] + 1) % V;
  const Vec b = logits_of(*m, token_batch(ids, 1, T, T));
  // One bidirectional layer: token 10 reaches positions 3 .. 17 and no others.
  for (int t = 0; t < T; ++t) {
    double diff = 0;
    for (int v = 0; v < V; ++v) diff = std::max(diff, double(std::fabs(a[size_t(t) * V + v] - b[size_t(t) * V + v])));
    if (t < 3 || t > 17) {
      EXPECT_EQ(diff, 0.0) << "position " << t;
    } else {
      EXPECT_GT(diff, 0.0) << "position " << t;
    }
  }
  auto full = make(tiny("mlm", [](ModelConfig& c) { c.seq_len = 8; }));
  const std::string e = test::error_of([&] { full->forward(token_batch(ids, 1, T, T)); });
  EXPECT_NE(e.find("longer than the model's window n = 8"), std::string::npos) << e;
}

// ---- causality

std::vector<Variant> causal_variants() {
  return {
      {"split", tiny("causal_lm")},
      {"heads4", tiny("causal_lm", [](ModelConfig& c) { c.sgu_heads = 4; })},
      {"toeplitz", tiny("causal_lm", [](ModelConfig& c) { c.spatial = Spatial::toeplitz; })},
      {"toeplitz_heads2", tiny("causal_lm", [](ModelConfig& c) {
         c.spatial = Spatial::toeplitz;
         c.sgu_heads = 2;
       })},
      {"amlp", tiny("causal_lm", [](ModelConfig& c) { c.d_attn = 8; })},
      {"linear", tiny("causal_lm", [](ModelConfig& c) { c.sgu = Sgu::linear; })},
      {"additive", tiny("causal_lm", [](ModelConfig& c) { c.sgu = Sgu::additive; })},
      {"multiplicative", tiny("causal_lm", [](ModelConfig& c) { c.sgu = Sgu::multiplicative; })},
      {"none", tiny("causal_lm", [](ModelConfig& c) { c.sgu = Sgu::none; })},
  };
}

class Causality : public ::testing::TestWithParam<Variant> {};

TEST_P(Causality, ChangingATokenNeverChangesEarlierPositions) {
  const ModelConfig& c = GetParam().cfg;
  auto m = make(c);
  const int B = 2, T = 24, V = c.vocab_size, t0 = 9;
  std::mt19937 rng(12);
  Ids ids = random_ids(size_t(B) * T, V, rng);
  const Vec a = logits_of(*m, token_batch(ids, B, T, T));
  for (int b = 0; b < B; ++b) ids[size_t(b) * T + t0] = (ids[size_t(b) * T + t0] + 37) % V;
  const Vec z = logits_of(*m, token_batch(ids, B, T, T));
  for (int t = 0; t < t0; ++t)
    for (int b = 0; b < B; ++b)
      for (int v = 0; v < V; ++v)
        ASSERT_EQ(a[(size_t(t) * B + b) * V + v], z[(size_t(t) * B + b) * V + v]) << "position " << t << ", row " << b;
  // And the change does reach the later positions (through the mixing, or at least at t0).
  double later = 0;
  const int from = c.has_sgu() ? t0 + 1 : t0;
  for (size_t i = size_t(from) * B * V; i < a.size(); ++i) later = std::max(later, double(std::fabs(a[i] - z[i])));
  EXPECT_GT(later, 1e-4);
}

INSTANTIATE_TEST_SUITE_P(Each, Causality, ::testing::ValuesIn(causal_variants()),
                         [](const auto& info) { return info.param.name; });

// ---- stochastic depth

TEST(StochasticDepth, KeepOfOnesIsNoKeep) {
  for (const std::string task : {"causal_lm", "vision"}) {
    SCOPED_TRACE(task);
    const ModelConfig c = tiny(task, [](ModelConfig& c) { c.survival_prob = 0.5f; });
    auto m = make(c);
    const int B = 3, L = c.n_layers;
    std::mt19937 rng(13);
    Ids ids;
    Vec images;
    Batch b;
    b.B = B;
    if (c.token_input()) {
      ids = random_ids(size_t(B) * 20, c.vocab_size, rng);
      b = token_batch(ids, B, 20, 20);
    } else {
      std::uniform_real_distribution<float> u(-1, 1);
      images.resize(size_t(B) * c.image_channels * c.image_height * c.image_width);
      for (auto& x : images) x = u(rng);
      b.T = c.seq_len;
      b.images = images.data();
    }
    const Vec plain = logits_of(*m, b);
    const Vec ones(size_t(L) * B, 1.f);
    b.keep = ones.data();
    const Vec kept = logits_of(*m, b);
    EXPECT_TRUE(test::all_close(kept.data(), plain.data(), plain.size(), 1e-6f, 1e-6f, "keep = 1"));
  }
}

TEST(StochasticDepth, AllDroppedLeavesTheHeadOnTheEmbedding) {
  // Token model: logits = head(LN(E[token])). Vision: head(mean over patches of LN(patch embedding)).
  for (const std::string task : {"causal_lm", "vision"}) {
    SCOPED_TRACE(task);
    const ModelConfig c = tiny(task, [](ModelConfig& c) { c.survival_prob = 0.5f; });
    auto m = make(c);
    const int B = 2, L = c.n_layers, d = c.d_model, V = c.out_dim();
    const float* w = m->weights();
    auto at = [&](const char* name) { return w + m->param(name).offset; };
    const float *nw = at("norm.weight"), *nb = at("norm.bias"), *hw = at("head.weight"), *hb = at("head.bias");
    // Make the final norm non-trivial so it is really checked.
    {
      std::mt19937 r(2);
      std::uniform_real_distribution<float> u(0.5f, 1.5f);
      for (size_t i = 0; i < size_t(d); ++i) {
        m->weights()[m->param("norm.weight").offset + i] = u(r);
        m->weights()[m->param("norm.bias").offset + i] = u(r) - 1.f;
      }
    }
    auto ln = [&](std::vector<double> x) {
      double mean = 0, var = 0;
      for (double v : x) mean += v;
      mean /= d;
      for (double v : x) var += (v - mean) * (v - mean);
      var /= d;
      for (int i = 0; i < d; ++i) x[size_t(i)] = (x[size_t(i)] - mean) / std::sqrt(var + c.norm_eps) * nw[i] + nb[i];
      return x;
    };
    auto head = [&](const std::vector<double>& h, int o) {
      double s = hb[o];
      for (int i = 0; i < d; ++i) s += hw[size_t(o) * d + i] * h[size_t(i)];
      return s;
    };
    const Vec zeros(size_t(L) * B, 0.f);
    std::mt19937 rng(14);
    if (c.token_input()) {
      const int T = 10;
      const Ids ids = random_ids(size_t(B) * T, c.vocab_size, rng);
      const Vec got = logits_of(*m, token_batch(ids, B, T, T, nullptr, zeros.data()));
      const float* E = at("embed.weight");
      for (int t = 0; t < T; ++t)
        for (int b = 0; b < B; ++b) {
          const int id = ids[size_t(b) * T + t];
          const auto h = ln(std::vector<double>(E + size_t(id) * d, E + size_t(id + 1) * d));
          for (int o = 0; o < V; ++o)
            ASSERT_NEAR(got[(size_t(t) * B + b) * V + o], head(h, o), 2e-5) << "t=" << t << " b=" << b;
        }
    } else {
      const int C = c.image_channels, H = c.image_height, W = c.image_width, ph = c.patch_height, pw = c.patch_width;
      const int P = C * ph * pw;
      std::uniform_real_distribution<float> u(-1, 1);
      Vec images(size_t(B) * C * H * W);
      for (auto& x : images) x = u(rng);
      Batch bt;
      bt.B = B;
      bt.T = c.seq_len;
      bt.images = images.data();
      bt.keep = zeros.data();
      const Vec got = logits_of(*m, bt);
      const float *pwt = at("patch.weight"), *pbs = at("patch.bias");
      for (int b = 0; b < B; ++b) {
        std::vector<double> pooled(size_t(d), 0.0);
        for (int gy = 0; gy < H / ph; ++gy)
          for (int gx = 0; gx < W / pw; ++gx) {
            std::vector<double> e(static_cast<size_t>(d), 0.0);
            for (int o = 0; o < d; ++o) {
              double s = pbs[o];
              for (int ch = 0; ch < C; ++ch)
                for (int py = 0; py < ph; ++py)
                  for (int px = 0; px < pw; ++px)
                    s += pwt[size_t(o) * P + (ch * ph + py) * pw + px] *
                         images[((size_t(b) * C + ch) * H + gy * ph + py) * W + gx * pw + px];
              e[size_t(o)] = s;
            }
            const auto h = ln(e);
            for (int i = 0; i < d; ++i) pooled[size_t(i)] += h[size_t(i)] / c.seq_len;
          }
        for (int o = 0; o < V; ++o) EXPECT_NEAR(got[size_t(b) * V + o], head(pooled, o), 2e-5) << "b=" << b;
      }
    }
  }
}

TEST(StochasticDepth, KeepScalesOneBlockOfOneRow) {
  // keep[1, 0] = 2 and keep[1, 1] = 0: row 0 is the model with block 1's proj_out
  // doubled, row 1 the model with it zeroed.
  const ModelConfig c = tiny("causal_lm", [](ModelConfig& c) { c.survival_prob = 0.5f; });
  auto m = make(c);
  const int B = 2, T = 12, V = c.vocab_size;
  std::mt19937 rng(15);
  const Ids ids = random_ids(size_t(B) * T, V, rng);
  const Vec keep = {1.f, 1.f, 2.f, 0.f};  // [L, B]
  const Vec got = logits_of(*m, token_batch(ids, B, T, T, nullptr, keep.data()));
  for (float scale : {2.f, 0.f}) {
    Model m2(c);
    std::copy(m->weights(), m->weights() + m->num_params(), m2.weights());
    for (const char* name : {"blocks.1.proj_out.weight", "blocks.1.proj_out.bias"}) {
      const ParamInfo& p = m2.param(name);
      for (size_t i = 0; i < p.size; ++i) m2.weights()[p.offset + i] *= scale;
    }
    const Vec want = logits_of(m2, token_batch(ids, B, T, T));
    const int b = scale == 2.f ? 0 : 1;
    for (int t = 0; t < T; ++t)
      ASSERT_TRUE(test::all_close(got.data() + (size_t(t) * B + b) * V, want.data() + (size_t(t) * B + b) * V,
                                  size_t(V), 1e-5f, 1e-5f, "row " + std::to_string(b) + " t " + std::to_string(t)));
  }
}

TEST(StochasticDepth, DroppedBlockGetsNoGradient) {
  const ModelConfig c = tiny("mlm", [](ModelConfig& c) {
    c.survival_prob = 0.5f;
    c.d_attn = 8;
  });
  auto m = make(c);
  const int B = 2, T = 16, V = c.vocab_size;
  std::mt19937 rng(16);
  const Ids ids = random_ids(size_t(B) * T, V, rng);
  Ids targets(ids.size(), -1);
  for (size_t i = 0; i < ids.size(); i += 3) targets[i] = ids[i];
  const Vec keep = {2.f, 2.f, 0.f, 0.f};  // block 0 kept (x2), block 1 dropped for both rows
  Batch b = token_batch(ids, B, T, T, nullptr, keep.data());
  b.targets = targets.data();
  m->zero_grad();
  EXPECT_TRUE(std::isfinite(m->forward(b)));
  m->backward();
  for (const auto& p : m->params()) {
    double s = 0;
    for (size_t i = 0; i < p.size; ++i) s += std::fabs(m->grads()[p.offset + i]);
    if (p.name.rfind("blocks.1.", 0) == 0) {
      EXPECT_EQ(s, 0.0) << p.name;
    } else if (p.name.rfind("blocks.0.", 0) == 0) {
      EXPECT_GT(s, 0.0) << p.name;
    }
  }
}

TEST(StochasticDepth, DrawKeepFollowsTheLinearDecayRule) {
  ModelConfig c = tiny("vision", [](ModelConfig& c) {
    c.n_layers = 4;
    c.survival_prob = 0.5f;
  });
  const float want_p[] = {0.875f, 0.75f, 0.625f, 0.5f};
  for (int l = 0; l < 4; ++l) EXPECT_NEAR(survival_probability(c, l), want_p[l], 1e-6) << "block " << l;
  const int B = 4000;
  Vec keep(size_t(4) * B);
  Rng rng(77);
  draw_keep(c, B, rng, keep.data());
  for (int l = 0; l < 4; ++l) {
    int kept = 0;
    for (int b = 0; b < B; ++b) {
      const float k = keep[size_t(l) * B + b];
      ASSERT_TRUE(k == 0.f || k == 1.f / survival_probability(c, l)) << "keep " << k << " in block " << l;
      kept += k != 0.f;
    }
    EXPECT_NEAR(double(kept) / B, want_p[l], 0.03) << "block " << l;
  }
  c.survival_prob = 1.f;
  draw_keep(c, B, rng, keep.data());
  EXPECT_TRUE(std::all_of(keep.begin(), keep.end(), [](float k) { return k == 1.f; }));
}

// ---- checkpoints and tensor names

struct CkptCase {
  std::string name;
  ModelConfig cfg;
  std::map<std::string, std::vector<int64_t>> shapes;  // documented names and shapes to find
  std::vector<std::string> absent;                     // names that must not exist
};
void PrintTo(const CkptCase& k, std::ostream* os) { *os << k.name; }

std::vector<CkptCase> checkpoint_cases() {
  // d = 16, d_ffn = 32, n = 64 (n = 16 for the causal Toeplitz), A = 8.
  using S = std::vector<int64_t>;
  return {
      {"causal_split", tiny("causal_lm"),
       {{"embed.weight", S{256, 16}}, {"blocks.0.sgu.spatial.weight", S{64, 64}}, {"blocks.0.sgu.spatial.bias", S{64}},
        {"blocks.1.sgu.norm.weight", S{16}}, {"blocks.0.proj_out.weight", S{16, 16}}, {"head.weight", S{256, 16}}},
       {"patch.weight"}},
      {"mlm", tiny("mlm"), {{"blocks.1.sgu.spatial.weight", S{64, 64}}, {"head.bias", S{256}}}, {}},
      {"linear", tiny("mlm", [](ModelConfig& c) { c.sgu = Sgu::linear; }),
       {{"blocks.0.sgu.norm.weight", S{32}}, {"blocks.0.proj_out.weight", S{16, 32}}}, {}},
      {"additive", tiny("mlm", [](ModelConfig& c) { c.sgu = Sgu::additive; }),
       {{"blocks.0.sgu.norm.bias", S{32}}, {"blocks.0.proj_out.weight", S{16, 32}}}, {}},
      {"multiplicative", tiny("causal_lm", [](ModelConfig& c) { c.sgu = Sgu::multiplicative; }),
       {{"blocks.0.sgu.spatial.weight", S{64, 64}}, {"blocks.0.proj_out.weight", S{16, 32}}}, {}},
      {"none", tiny("mlm", [](ModelConfig& c) { c.sgu = Sgu::none; }), {{"blocks.0.proj_out.weight", S{16, 32}}},
       {"blocks.0.sgu.norm.weight", "blocks.0.sgu.spatial.weight", "blocks.0.sgu.spatial.bias"}},
      {"heads2", tiny("causal_lm", [](ModelConfig& c) { c.sgu_heads = 2; }),
       {{"blocks.0.sgu.spatial.weight", S{2, 64, 64}}, {"blocks.0.sgu.spatial.bias", S{2, 64}}}, {}},
      {"toeplitz_bidirectional", tiny("mlm", [](ModelConfig& c) { c.spatial = Spatial::toeplitz; }),
       {{"blocks.0.sgu.spatial.weight", S{127}}, {"blocks.0.sgu.spatial.bias", S{64}}}, {}},
      {"toeplitz_causal", tiny("causal_lm", [](ModelConfig& c) {
         c.spatial = Spatial::toeplitz;
         c.seq_len = 16;
       }),
       {{"blocks.0.sgu.spatial.weight", S{16}}, {"blocks.0.sgu.spatial.bias", S{16}}}, {}},
      {"toeplitz_heads2", tiny("mlm", [](ModelConfig& c) {
         c.spatial = Spatial::toeplitz;
         c.sgu_heads = 2;
       }),
       {{"blocks.0.sgu.spatial.weight", S{2, 127}}, {"blocks.0.sgu.spatial.bias", S{2, 64}}}, {}},
      {"toeplitz_causal_heads2", tiny("causal_lm", [](ModelConfig& c) {
         c.spatial = Spatial::toeplitz;
         c.sgu_heads = 2;
       }),
       {{"blocks.0.sgu.spatial.weight", S{2, 64}}}, {}},
      {"amlp", tiny("mlm", [](ModelConfig& c) { c.d_attn = 8; }),
       {{"blocks.0.attn.qkv.weight", S{24, 16}},
        {"blocks.0.attn.qkv.bias", S{24}},
        {"blocks.1.attn.out.weight", S{16, 8}},
        {"blocks.1.attn.out.bias", S{16}},
        {"blocks.0.sgu.spatial.weight", S{64, 64}}},
       {}},
      {"classify", tiny("classify", [](ModelConfig& c) { c.class_names = {"a", "b", "c"}; }),
       {{"head.weight", S{3, 16}}, {"head.bias", S{3}}, {"embed.weight", S{256, 16}}}, {}},
      {"vision", tiny("vision", [](ModelConfig& c) { c.survival_prob = 0.8f; }),
       {{"patch.weight", S{16, 24}}, {"patch.bias", S{16}}, {"blocks.0.sgu.spatial.weight", S{8, 8}}, {"head.weight", S{3, 16}}},
       {"embed.weight"}},
  };
}

class CheckpointRoundTrip : public ::testing::TestWithParam<CkptCase> {};

TEST_P(CheckpointRoundTrip, SameWeightsSameLogitsDocumentedNames) {
  const CkptCase& k = GetParam();
  const ModelConfig& c = k.cfg;
  auto m = make(c, 21);
  // Non-default norms and biases, so that a tensor loaded into the wrong slot shows.
  {
    Rng r(3);
    for (size_t i = 0; i < m->num_params(); ++i) m->weights()[i] += r.uniform(-0.01f, 0.01f);
  }
  test::TempDir dir("variants_ckpt");
  const std::string path = dir.file("m.safetensors");
  save_model(*m, path);
  auto loaded = load_model(path);
  EXPECT_EQ(loaded->config().to_json(), c.to_json());
  ASSERT_EQ(loaded->num_params(), m->num_params());
  EXPECT_TRUE(std::equal(m->weights(), m->weights() + m->num_params(), loaded->weights()));

  std::mt19937 rng(22);
  const int B = 2;
  Ids ids, lengths = {c.seq_len, std::max(1, c.seq_len / 2)};
  Vec images;
  Batch b;
  if (c.token_input()) {
    const int T = std::min(c.seq_len, 20);
    lengths = {T, T / 2};
    ids = random_ids(size_t(B) * T, c.vocab_size, rng);
    b = token_batch(ids, B, T, T, c.causal() ? nullptr : lengths.data());
  } else {
    std::uniform_real_distribution<float> u(-1, 1);
    images.resize(size_t(B) * c.image_channels * c.image_height * c.image_width);
    for (auto& x : images) x = u(rng);
    b.B = B;
    b.T = c.seq_len;
    b.images = images.data();
  }
  const Vec a = logits_of(*m, b), z = logits_of(*loaded, b);
  ASSERT_EQ(a.size(), z.size());
  EXPECT_TRUE(std::equal(a.begin(), a.end(), z.begin())) << "logits differ after the round trip";

  // The file holds exactly the layout's tensors, with the documented names and shapes.
  const auto f = SafeTensorsFile::load(path);
  std::vector<std::string> want_names;
  for (const auto& p : m->params()) {
    want_names.push_back(p.name);
    ASSERT_TRUE(f.has(p.name)) << p.name;
    EXPECT_EQ(f.info(p.name).shape, p.shape) << p.name;
    EXPECT_EQ(f.info(p.name).dtype, "F32") << p.name;
  }
  auto got_names = f.names();
  std::sort(got_names.begin(), got_names.end());
  std::sort(want_names.begin(), want_names.end());
  EXPECT_EQ(got_names, want_names);
  for (const auto& [name, shape] : k.shapes) {
    ASSERT_TRUE(f.has(name)) << name;
    EXPECT_EQ(f.info(name).shape, shape) << name;
  }
  for (const auto& name : k.absent) EXPECT_FALSE(f.has(name)) << name;
  for (const auto& n : got_names) {
    if (!c.has_sgu()) {
      EXPECT_EQ(n.find(".sgu."), std::string::npos) << n;
    }
    if (c.d_attn == 0) {
      EXPECT_EQ(n.find(".attn."), std::string::npos) << n;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Each, CheckpointRoundTrip, ::testing::ValuesIn(checkpoint_cases()),
                         [](const auto& info) { return info.param.name; });

// ---- config errors name the key

TEST(VariantConfig, ImpossibleCombinationsNameTheKey) {
  using nlohmann::json;
  auto err = [](const json& j) { return test::error_of([&] { ModelConfig::from_json(j, "cfg"); }); };
  const json vision = {{"task", "vision"},        {"n_classes", 3},     {"image_channels", 1},
                       {"image_height", 8},       {"image_width", 8},   {"patch_height", 4},
                       {"patch_width", 4},        {"d_model", 16},      {"d_ffn", 32}};
  // The base vision config is fine (seq_len from the grid).
  EXPECT_EQ(ModelConfig::from_json(vision, "cfg").seq_len, 4);
  struct Case {
    std::string what;
    json j;
    std::vector<std::string> keys;  // each must appear in the message, quoted
  };
  auto with = [&](json j, const json& more) {
    j.update(more);
    return j;
  };
  const std::vector<Case> cases = {
      {"aMLP needs the split SGU", {{"d_attn", 8}, {"sgu", "linear"}}, {"'d_attn'", "'sgu'"}},
      {"heads must divide the gate", {{"d_ffn", 32}, {"sgu_heads", 3}}, {"'sgu_heads'"}},
      {"heads must divide the gate (non-split)", {{"d_ffn", 30}, {"sgu", "additive"}, {"sgu_heads", 4}},
       {"'sgu_heads'"}},
      {"heads without an SGU", {{"sgu", "none"}, {"sgu_heads", 2}}, {"'sgu_heads'"}},
      {"vision with a tokenizer", with(vision, {{"tokenizer", {{"kind", "byte"}}}}), {"'tokenizer'"}},
      {"vision with a vocabulary", with(vision, {{"vocab_size", 256}}), {"'vocab_size'"}},
      {"seq_len is not the grid", with(vision, {{"seq_len", 5}}), {"'seq_len'"}},
      {"classify without n_classes", {{"task", "classify"}}, {"'n_classes'"}},
      {"vision without n_classes", with(vision, {{"n_classes", 0}}), {"'n_classes'"}},
      {"n_classes on an mlm", {{"task", "mlm"}, {"n_classes", 3}}, {"'n_classes'"}},
      {"image fields on a token model", {{"task", "classify"}, {"n_classes", 2}, {"image_height", 8}},
       {"'image_height'"}},
      {"class_names of the wrong count", {{"task", "classify"}, {"n_classes", 3}, {"class_names", {"a", "b"}}},
       {"'class_names'"}},
      {"unknown spatial", {{"spatial", "circulant"}}, {"'spatial'"}},
      {"unknown sgu", {{"sgu", "gated"}}, {"'sgu'"}},
      {"survival_prob out of range", {{"survival_prob", 0.0}}, {"'survival_prob'"}},
  };
  for (const auto& k : cases) {
    SCOPED_TRACE(k.what);
    const std::string e = err(k.j);
    EXPECT_EQ(e.rfind("cfg", 0), 0u) << "the message names the source first: " << e;
    for (const auto& key : k.keys) EXPECT_NE(e.find(key), std::string::npos) << "expected " << key << " in: " << e;
  }
  // Patches that do not tile are refused (the key is checked in PatchTilingNamesTheKey).
  EXPECT_NE(err(with(vision, {{"patch_height", 3}})).find("do not tile"), std::string::npos);
  // The Model constructor validates too.
  ModelConfig bad = tiny("mlm");
  bad.d_attn = 8;
  bad.sgu = Sgu::multiplicative;
  EXPECT_NE(test::error_of([&] { Model m(bad); }).find("'d_attn'"), std::string::npos);
}

// config.h promises errors "that name the key and the value"; the tiling check names
// neither patch key ("patches of 3x4 do not tile images of 8x8").
TEST(VariantConfig, PatchTilingNamesTheKey) {
  using nlohmann::json;
  const json vision = {{"task", "vision"}, {"n_classes", 3},   {"image_channels", 1}, {"image_height", 8},
                       {"image_width", 8}, {"patch_height", 4}, {"patch_width", 4}};
  for (const auto& [key, more] : std::vector<std::pair<std::string, json>>{
           {"'patch_height'", {{"patch_height", 3}, {"seq_len", 4}}}, {"'patch_width'", {{"patch_width", 3}, {"seq_len", 4}}}}) {
    json j = vision;
    j.update(more);
    const std::string e = test::error_of([&] { ModelConfig::from_json(j, "cfg"); });
    EXPECT_NE(e.find(key), std::string::npos) << "expected " << key << " in: " << e;
  }
}

// The sparse masked-LM head (output layer only at the chosen rows) is an
// optimisation: same loss, same gradient for every parameter, with padding and aMLP.
TEST(SparseMlmHead, SameLossAndGradientsAsTheFullHead) {
  ModelConfig c;
  c.task = Task::mlm;
  c.tokenizer = {{"kind", "byte"}, {"specials", {"[PAD]", "[MASK]"}}};
  c.vocab_size = 258;
  c.d_model = 16;
  c.d_ffn = 32;
  c.n_layers = 2;
  c.seq_len = 12;
  c.d_attn = 8;
  const int B = 3, T = 10;
  Rng rng(21);
  std::vector<int32_t> tokens(size_t(B) * T), targets(size_t(B) * T, -1), lengths = {10, 7, 4};
  for (auto& t : tokens) t = int32_t(rng.below(256));
  for (int b = 0; b < B; ++b)
    for (int t = 0; t < lengths[size_t(b)]; t += 3) targets[size_t(b) * T + t] = int32_t(rng.below(256));
  Batch batch;
  batch.B = B;
  batch.T = T;
  batch.tokens = tokens.data();
  batch.stride = T;
  batch.targets = targets.data();
  batch.lengths = lengths.data();
  std::vector<double> loss(2);
  std::vector<std::vector<float>> grads(2), logits(2);
  for (int sparse = 0; sparse < 2; ++sparse) {
    Model m(c);
    Rng init(5);
    m.init(init);
    m.set_sparse_mlm_head(sparse == 1);
    m.zero_grad();
    loss[size_t(sparse)] = m.forward(batch);
    m.backward();
    grads[size_t(sparse)].assign(m.grads(), m.grads() + m.num_params());
    logits[size_t(sparse)].assign(m.logits(), m.logits() + size_t(m.logit_rows()) * 258);
    EXPECT_EQ(m.logit_rows(), sparse ? 9 : B * T);  // t = 0, 3, 6, 9 within lengths 10, 7, 4
  }
  EXPECT_NEAR(loss[0], loss[1], 1e-6 * loss[0]);
  EXPECT_TRUE(test::all_close(grads[1].data(), grads[0].data(), grads[0].size(), 1e-7f, 1e-5f, "gradients"));
  // The sparse rows are the full head's rows at the chosen positions (t-major order).
  int k = 0;
  for (int t = 0; t < T; ++t)
    for (int b = 0; b < B; ++b)
      if (targets[size_t(b) * T + t] >= 0) {
        EXPECT_TRUE(test::all_close(logits[1].data() + size_t(k) * 258, logits[0].data() + (size_t(t) * B + b) * 258,
                                    258, 1e-6f, 1e-6f, "logits row " + std::to_string(k)));
        ++k;
      }
}

// A longer window grows the arena by half again at least: a window growing a token at a
// time (generation recomputing it) rebuilds the arena a few times, not once a token, and
// the room a call leaves unused changes no result.
TEST(Arena, AWindowGrowingATokenAtATimeRebuildsItAFewTimes) {
  struct CountingCpu : CpuBackend {
    int allocs = 0;
    void* alloc(size_t bytes) override {
      ++allocs;
      return CpuBackend::alloc(bytes);
    }
  } be;
  const ModelConfig c = tiny("causal_lm");  // n = 64
  Model m(c, be);
  Rng rng(5);
  m.init(rng);
  std::mt19937 g(6);
  const Ids ids = random_ids(size_t(c.seq_len), c.vocab_size, g);
  NoGrad no_grad(m);
  int rebuilds = 0;
  for (int T = c.seq_len / 2; T <= c.seq_len; ++T) {
    const int before = be.allocs;
    m.forward(ids.data(), nullptr, T, 1, T);
    rebuilds += be.allocs > before;
    // Against a model whose arena is exactly this call's size (33 to 47 tokens run in an
    // arena of 48, 49 to 63 in one of 64).
    auto exact = make(c);
    ASSERT_EQ(Vec(m.weights(), m.weights() + m.num_params()), Vec(exact->weights(), exact->weights() + exact->num_params()));
    NoGrad no_grad_exact(*exact);
    exact->forward(ids.data(), nullptr, T, 1, T);
    const size_t n = size_t(T) * c.vocab_size;
    ASSERT_EQ(Vec(m.logits(), m.logits() + n), Vec(exact->logits(), exact->logits() + n)) << "T = " << T;
  }
  EXPECT_EQ(rebuilds, 3) << "32, then 48 and 64 tokens: one arena each";
}

}  // namespace
}  // namespace gmlp

namespace gmlp {
namespace {

// The backward's gradient hook (data-parallel training reduces each range as it comes):
// the ranges tile the whole buffer once, from its end to its start, one per layer plus
// the head and the input layer, and each already holds its final gradient when reported.
TEST(GradReadyHook, RangesTileTheBufferInBackwardOrderAndAreFinal) {
  const ModelConfig c = tiny("causal_lm", [](ModelConfig& c) { c.n_layers = 3; });
  auto m = make(c);
  std::mt19937 rng(3);
  const Ids ids = random_ids(size_t(4) * 9, c.vocab_size, rng);
  struct Seen {
    size_t offset, count;
    std::vector<float> grads;
  };
  std::vector<Seen> seen;
  m->set_grad_ready_hook([&](size_t off, size_t n) {
    seen.push_back({off, n, std::vector<float>(m->grads() + off, m->grads() + off + n)});
  });
  m->zero_grad();
  m->forward(ids.data(), ids.data() + 1, 9, 4, 8);
  m->backward();
  ASSERT_EQ(seen.size(), size_t(c.n_layers) + 2);
  size_t end = m->num_params();
  for (const auto& s : seen) {
    EXPECT_EQ(s.offset + s.count, end) << "contiguous, from the end of the buffer";
    EXPECT_EQ(s.grads, std::vector<float>(m->grads() + s.offset, m->grads() + s.offset + s.count))
        << "the range at " << s.offset << " changed after it was reported";
    end = s.offset;
  }
  EXPECT_EQ(end, 0u);
  EXPECT_EQ(seen[1].offset, m->param("blocks.2.norm.weight").offset);
  EXPECT_EQ(seen.back().count, m->param("embed.weight").size);
}

// The backward writes dU over the U its forward saved, so a second backward needs a
// forward again (it is refused, not run on what is left), and that forward restores
// the same gradients. Without an SGU, U is overwritten the same way.
TEST(Backward, OncePerForward) {
  for (const Sgu sgu : {Sgu::split, Sgu::none}) {
    SCOPED_TRACE(name_of(sgu));
    const ModelConfig c = tiny("causal_lm", [sgu](ModelConfig& c) { c.sgu = sgu; });
    auto m = make(c);
    std::mt19937 rng(4);
    const Ids ids = random_ids(size_t(3) * 9, c.vocab_size, rng);
    m->zero_grad();
    m->forward(ids.data(), ids.data() + 1, 9, 3, 8);
    m->backward();
    const Vec first(m->grads(), m->grads() + m->num_params());
    EXPECT_THROW(m->backward(), Error);
    m->zero_grad();
    m->forward(ids.data(), ids.data() + 1, 9, 3, 8);
    m->backward();
    EXPECT_EQ(first, Vec(m->grads(), m->grads() + m->num_params()));
  }
}

// A batch's values are checked one by one before any of its work is queued (the
// messages are built only for a value that fails: model.cpp), each failure naming the
// value, and a refused batch leaves the model as it was.
TEST(BatchChecks, AnOutOfRangeValueIsNamedAndTheModelRunsOnAsBefore) {
  for (const std::string task : {"causal_lm", "mlm"}) {
    SCOPED_TRACE(task);
    const ModelConfig c = tiny(task);
    auto m = make(c);
    std::mt19937 rng(4);
    const int B = 3, T = 8;
    Ids ids = random_ids(size_t(B) * T, c.vocab_size, rng), targets = ids;
    if (task == "mlm")
      for (size_t i = 0; i < targets.size(); ++i) targets[i] = i % 3 == 0 ? ids[i] : -1;
    Batch good;
    good.B = B;
    good.T = T;
    good.stride = T;
    good.tokens = ids.data();
    good.targets = targets.data();
    const double loss = m->forward(good);

    Ids bad_ids = ids, bad_targets = targets;
    bad_ids[5] = c.vocab_size;
    bad_targets[6] = c.vocab_size + 44;
    const Ids lengths = {T, T + 1, T};
    Batch b = good;
    b.tokens = bad_ids.data();
    EXPECT_NE(test::error_of([&] { m->forward(b); }).find("forward: token id 256 outside the vocabulary of 256"),
              std::string::npos);
    b = good;
    b.targets = bad_targets.data();
    EXPECT_NE(test::error_of([&] { m->forward(b); }).find("forward: target 300 outside the 256 tokens"),
              std::string::npos);
    b = good;
    b.lengths = lengths.data();  // padding: the bidirectional models'
    EXPECT_NE(test::error_of([&] { m->forward(b); })
                  .find(task == "mlm" ? "forward: row 1 has length 9, outside [1, 8]" : "padding lengths are for"),
              std::string::npos);
    EXPECT_EQ(m->forward(good), loss) << "a refused batch changed what the next one computes";
  }
}

// Gradients exist only once something asks for them: a model that runs forwards alone
// (evaluation, generation, inference) never allocates its parameter-sized gradient
// buffer; the first grads() makes it, zero, and a backward without a zero_grad first
// starts from those zeros as it always did.
TEST(Backward, GradientsAreMadeOnFirstUse) {
  const auto heap_in_use = [] {
    const struct mallinfo2 mi = mallinfo2();
    return mi.uordblks + mi.hblkhd;
  };
  {
    const size_t before = heap_in_use();
    std::vector<float> probe(size_t(1) << 20, 1.f);
    if (heap_in_use() - before < probe.size() * sizeof(float))
      GTEST_SKIP() << "malloc's statistics do not see this process's allocations (a sanitizer's allocator?)";
  }
  // Over a million parameters: the gradients are one block of 4 MB or more.
  const ModelConfig c = tiny("causal_lm", [](ModelConfig& c) {
    c.d_model = 128;
    c.d_ffn = 2048;
    c.n_layers = 3;
  });
  auto m = make(c);
  const size_t bytes = m->num_params() * sizeof(float);
  ASSERT_GE(bytes, size_t(4) << 20);
  std::mt19937 rng(4);
  const Ids ids = random_ids(size_t(2) * 9, c.vocab_size, rng);
  {
    NoGrad no_grad(*m);
    m->forward(ids.data(), nullptr, 9, 2, 8);
  }
  size_t before = heap_in_use();
  const float* g = m->grads();
  EXPECT_GE(heap_in_use() - before, bytes) << "the gradients were there before anything asked for them";
  EXPECT_EQ(Vec(g, g + m->num_params()), Vec(m->num_params(), 0.f));
  before = heap_in_use();
  m->grads();
  m->zero_grad();
  EXPECT_EQ(heap_in_use(), before) << "made twice";
  // A backward on a fresh model (no zero_grad, no grads()) equals one after zero_grad.
  auto fresh = make(c);
  fresh->forward(ids.data(), ids.data() + 1, 9, 2, 8);
  fresh->backward();
  m->zero_grad();
  m->forward(ids.data(), ids.data() + 1, 9, 2, 8);
  m->backward();
  EXPECT_EQ(Vec(fresh->grads(), fresh->grads() + fresh->num_params()), Vec(m->grads(), m->grads() + m->num_params()));
}

}  // namespace
}  // namespace gmlp
