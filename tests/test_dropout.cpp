// Dropout's masks by counter (src/ops/dropout_mask.h): the rate and the scale, draws
// independent across channels, rows, positions, layers and seeds, a mask that goes by
// global batch row and position whatever the batch's shape, and the ops that apply it.
// The generator against the PyTorch reference's own copy: the parity fixtures
// (test_parity.cpp, "classify_dropout" and the others).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include "ops/ops.h"  // internal to gmlp_core: src/ is not on the public include path
#include "grad_check.h"
#include "oracles.h"

namespace gmlp {
namespace {

using ops::DropMask;
using test::Vec;

double zero_fraction(const Vec& v) {
  size_t z = 0;
  for (float x : v) z += x == 0.f;
  return double(z) / double(v.size());
}

// The documented generator written out one step at a time, apart from the header's.
float spec_value(uint64_t seed, int stream, float p, int b, int t, int c) {
  auto mix = [](uint64_t z) {
    z ^= z >> 30;
    z *= 0xBF58476D1CE4E5B9ULL;
    z ^= z >> 27;
    z *= 0x94D049BB133111EBULL;
    z ^= z >> 31;
    return z;
  };
  const uint64_t K = mix(seed ^ mix(uint64_t(stream) + 1));
  const uint64_t R = mix(K ^ (uint64_t(b) << 32 | uint64_t(t)));
  const uint64_t u = mix(R + uint64_t(c + 1) * 0x9E3779B97F4A7C15ULL) >> 40;
  return double(u) / 16777216.0 < double(p) ? 0.f : 1.f / (1.f - p);
}

TEST(DropoutMask, EveryValueIsTheDocumentedGenerators) {
  const uint64_t seed = 0xfeedface12345678ULL;
  const int B = 3, T = 5, d = 70, off = 7;
  for (float p : {0.1f, 0.3f, 0.5f}) {
    const Vec m = test::materialised(ops::drop_mask(seed, 2, p, off), B, T, d);
    for (int t = 0; t < T; ++t)
      for (int b = 0; b < B; ++b)
        for (int c = 0; c < d; ++c)
          ASSERT_EQ(m[(size_t(t) * B + b) * d + c], spec_value(seed, 2, p, off + b, t, c))
              << "p " << p << " b " << b << " t " << t << " c " << c;
  }
}

TEST(DropoutMask, HasTheRateAndTheScale) {
  const int B = 16, T = 32, d = 64;  // 32768 draws
  for (float p : {0.05f, 0.1f, 0.25f, 0.5f, 0.9f}) {
    const Vec m = test::materialised(ops::drop_mask(42, 0, p, 0), B, T, d);
    const float scale = 1.f / (1.f - p);
    for (float v : m) ASSERT_TRUE(v == 0.f || v == scale) << v;
    const double sigma = std::sqrt(double(p) * (1 - p) / double(m.size()));
    EXPECT_NEAR(zero_fraction(m), p, 5 * sigma) << "p " << p;
  }
  EXPECT_FALSE(ops::drop_mask(42, 0, 0.f, 0).active()) << "rate 0 drops nothing";
  EXPECT_EQ(ops::drop_mask(42, 0, 1e-9f, 0).threshold, 1u) << "any positive rate drops something";
}

// Neighbours in every direction, and other layers and seeds, are drawn independently:
// both dropped at rate 1/2 in a quarter of the pairs.
TEST(DropoutMask, DrawsAreIndependentAcrossChannelsRowsPositionsLayersAndSeeds) {
  const int B = 16, T = 32, d = 64;
  const Vec a = test::materialised(ops::drop_mask(7, 0, 0.5f, 0), B, T, d);
  auto both = [&](const Vec& x, const Vec& y, size_t shift) {
    size_t n = 0, hits = 0;
    for (size_t i = 0; i + shift < x.size(); ++i, ++n) hits += x[i] == 0.f && y[i + shift] == 0.f;
    return double(hits) / double(n);
  };
  const double tol = 5 * std::sqrt(0.25 * 0.75 / double(a.size()));
  EXPECT_NEAR(both(a, a, 1), 0.25, tol) << "channels";
  EXPECT_NEAR(both(a, a, d), 0.25, tol) << "rows";
  EXPECT_NEAR(both(a, a, size_t(B) * d), 0.25, tol) << "positions";
  EXPECT_NEAR(both(a, test::materialised(ops::drop_mask(7, 1, 0.5f, 0), B, T, d), 0), 0.25, tol) << "layers";
  EXPECT_NEAR(both(a, test::materialised(ops::drop_mask(8, 0, 0.5f, 0), B, T, d), 0), 0.25, tol) << "seeds";
}

// A rank's rows (row_offset) and a shorter batch draw what the whole batch draws at the
// same global row, position and channel.
TEST(DropoutMask, GoesByGlobalRowAndPositionWhateverTheBatchShape) {
  const int B = 4, T = 6, d = 24;
  const Vec whole = test::materialised(ops::drop_mask(99, 3, 0.4f, 0), B, T, d);
  const int n = 2, r0 = 2, Ts = 3;
  const Vec part = test::materialised(ops::drop_mask(99, 3, 0.4f, r0), n, Ts, d);
  for (int t = 0; t < Ts; ++t)
    for (int b = 0; b < n; ++b)
      for (int c = 0; c < d; ++c)
        ASSERT_EQ(part[(size_t(t) * n + b) * d + c], whole[(size_t(t) * B + r0 + b) * d + c])
            << "b " << b << " t " << t << " c " << c;
}

// The ops around the mask: the residual with stochastic depth, its backward, and the
// classifier's input (B rows at position 0).
TEST(DropoutMask, TheOpsApplyItWithStochasticDepth) {
  const int B = 3, T = 4, M = T * B, d = 10;
  std::mt19937 rng(1);
  const Vec x = test::uniform(size_t(M) * d, -1.f, 1.f, rng), y = test::uniform(size_t(M) * d, -1.f, 1.f, rng),
            keep = {2.f, 0.f, 1.f};
  const DropMask m = ops::drop_mask(5, 0, 0.3f, 1);
  const Vec mask = test::materialised(m, B, T, d);
  Vec out(x.size()), dy(x.size());
  ops::residual_add(x.data(), y.data(), keep.data(), m, M, B, d, out.data());
  ops::residual_branch_backward(y.data(), keep.data(), m, M, B, d, dy.data());
  for (int r = 0; r < M; ++r)
    for (int c = 0; c < d; ++c) {
      const size_t i = size_t(r) * d + c;
      // (the compiler may fuse the multiply-add in one place and not the other)
      ASSERT_NEAR(out[i], x[i] + keep[size_t(r % B)] * mask[i] * y[i], 1e-6f) << i;
      ASSERT_EQ(dy[i], keep[size_t(r % B)] * mask[i] * y[i]) << i;
    }
  Vec plain(x.size());
  ops::residual_add(x.data(), y.data(), keep.data(), DropMask{}, M, B, d, plain.data());
  for (size_t i = 0; i < x.size(); ++i) ASSERT_NEAR(plain[i], x[i] + keep[(i / d) % B] * y[i], 1e-6f) << i;
  Vec head(size_t(B) * d);
  ops::dropout_apply(x.data(), m, B, d, head.data());
  for (size_t i = 0; i < head.size(); ++i) ASSERT_EQ(head[i], x[i] * mask[i]) << "row i / d at position 0: " << i;
}

}  // namespace
}  // namespace gmlp
