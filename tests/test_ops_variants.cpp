// The ops of the gMLP variants (docs/variants.md) against central differences and
// direct formulas: the SGU in every s(Z) form with several heads, causal or not, with
// padding and past n (Toeplitz); aMLP's tiny attention; the Toeplitz fold as the
// adjoint of its materialisation; the any-ld token mixing; patch extraction.
// Entries an op must never read are NaN, so reading one poisons the result.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <limits>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "ops/ops.h"  // internal to gmlp_core: src/ is not on the public include path
#include "grad_check.h"
#include "oracles.h"
#include "test_util.h"

namespace gmlp {
namespace {

using namespace test;  // Vec, Idx, kNaN, uniform, gather, all_finite, Tol, grad_check
Idx all(size_t n) {
  Idx at(n);
  for (size_t i = 0; i < n; ++i) at[i] = i;
  return at;
}
double dot(const Vec& a, const Vec& b) {
  double s = 0.0;
  for (size_t i = 0; i < a.size(); ++i) s += double(a[i]) * b[i];
  return s;
}
std::string kind_name(Sgu k) { return name_of(k); }

// ---- the spatial gating unit

struct SguCase {
  Sgu kind;
  bool causal;
  bool padded;
  int T, n;  // T > n: dense [T, T] weights (as the model materialises Toeplitz) and rows past n on bias[n - 1]
  ops::ZInput zin = {};  // given U, Z = GELU(U + b): the backward runs in place over U
  bool zbias = false;    // with a bias b added to U as it is read (GELU or not)
};

std::string case_name(const SguCase& c) {
  return std::string(kind_name(c.kind)) + (c.causal ? " causal" : " bidirectional") + (c.padded ? " padded" : "") +
         " T=" + std::to_string(c.T) + " n=" + std::to_string(c.n) +
         (c.zin.gelu ? (c.zin.form == Gelu::tanh ? " given U (tanh GELU)" : " given U (GELU)") : "") +
         (c.zbias ? " with a bias" : "");
}

void check_sgu(const SguCase& c) {
  SCOPED_TRACE(case_name(c));
  std::mt19937 rng(11 + int(c.kind) * 7 + c.causal * 3 + c.padded + c.T + 13 * c.zin.gelu);
  const int heads = 2, gh = 3, B = 2, T = c.T, n = c.n, M = T * B;
  const int g = heads * gh, f = c.kind == Sgu::split ? 2 * g : g;
  // The weights as the op reads them: [heads, ldw, ldw] with ldw = n (full W, T <= n)
  // or T (dense Toeplitz, T > n). Entries outside W[:T, :T] (and, causal, above the
  // diagonal) are NaN: the op must never read them.
  const int ldw = T > n ? T : n;
  const int64_t wstride = int64_t(ldw) * ldw;
  auto allowed = [&](int i, int j) { return i < T && j < T && (!c.causal || j <= i); };
  Vec W(size_t(heads) * wstride, kNaN);
  Idx w_at;
  for (int k = 0; k < heads; ++k)
    for (int i = 0; i < ldw; ++i)
      for (int j = 0; j < ldw; ++j)
        if (allowed(i, j)) {
          const size_t e = size_t(k * wstride + int64_t(i) * ldw + j);
          W[e] = uniform(1, -0.4f, 0.4f, rng)[0];
          w_at.push_back(e);
        }
  // Bias [heads, n]: rows t < min(T, n) are read; past T (when T < n) nothing is.
  Vec bias(size_t(heads) * n, kNaN);
  Idx b_at;
  for (int k = 0; k < heads; ++k)
    for (int i = 0; i < std::min(T, n); ++i) {
      bias[size_t(k) * n + i] = uniform(1, 0.5f, 1.5f, rng)[0];
      b_at.push_back(size_t(k) * n + i);
    }
  Vec Z = uniform(size_t(M) * f, -2, 2, rng), nw = uniform(g, 0.5f, 1.5f, rng), nb = uniform(g, -0.5f, 0.5f, rng);
  Vec extra = uniform(size_t(M) * g, -0.5f, 0.5f, rng);  // aMLP's attention output, added to F
  const std::vector<int32_t> lengths = {T, T - 2};
  const Vec R = uniform(size_t(M) * g, -1, 1, rng);

  ops::SguParams p;
  p.kind = c.kind;
  p.norm_w = nw.data();
  p.norm_b = nb.data();
  p.W = W.data();
  p.ldw = ldw;
  p.w_head_stride = wstride;
  p.bias = bias.data();
  p.n = n;
  p.heads = heads;
  p.causal = c.causal;
  p.lengths = c.padded ? lengths.data() : nullptr;
  p.z = c.zin;
  // Given U, with the projection's bias (added as the rows are read, never into U); its
  // gradient accumulates onto what is there.
  Vec zbias = uniform(size_t(f), -0.5f, 0.5f, rng), dzbias = uniform(size_t(f), -1, 1, rng);
  const Vec dzbias0 = dzbias;
  if (c.zbias) {
    p.z.bias = zbias.data();
    p.z.dbias = dzbias.data();
  }
  Vec S(size_t(M) * g), gmean(M), grstd(M), F(size_t(M) * g), G(size_t(M) * g);
  auto loss = [&] {
    ops::sgu_forward(p, Z.data(), T, B, f, S.data(), gmean.data(), grstd.data(), F.data(), G.data(), extra.data());
    return dot(S, R);
  };
  const Vec Z0 = Z;
  loss();
  ASSERT_TRUE(all_finite(S)) << "the forward read a masked or unused weight or bias";
  ASSERT_TRUE(all_finite(F));
  ASSERT_EQ(Z, Z0) << "the forward wrote into what it was given";

  // Accumulators start random where the op may add and zero where it must not write.
  Vec gW(W.size(), 0.f), gb(bias.size(), 0.f);
  for (size_t e : w_at) gW[e] = uniform(1, -1, 1, rng)[0];
  for (size_t e : b_at) gb[e] = uniform(1, -1, 1, rng)[0];
  const Vec gW0 = gW, gb0 = gb, gnw0 = uniform(g, -1, 1, rng), gnb0 = uniform(g, -1, 1, rng);
  Vec gnw = gnw0, gnb = gnb0;
  Vec dZ(Z.size(), kNaN), sG(size_t(M) * g, kNaN), sdF(size_t(M) * g, kNaN), sdG(size_t(M) * g, kNaN);
  // As the block runs it: dU over U, and dF over F but for the multiplicative form (the
  // other cases: dZ and dF apart from Z and F).
  const bool dF_over_F = c.zin.gelu && c.kind != Sgu::multiplicative;
  if (c.zin.gelu) dZ = Z;
  const ops::SguGrads grads{gnw.data(), gnb.data(), gW.data(), gb.data()};
  if (dF_over_F) {
    // In the block's two parts, S rebuilt by the gate pass before dF goes over F.
    const Vec S0 = S;
    Vec S1(S.size(), kNaN);
    ops::sgu_backward_gate(p, R.data(), dZ.data(), T, B, f, F.data(), S1.data(), F.data(), dZ.data());
    for (size_t i = 0; i < S.size(); ++i)
      ASSERT_NEAR(S1[i], S0[i], 1e-6f * (1.f + std::fabs(S0[i]))) << "S rebuilt at " << i;
    ops::sgu_backward_mix(p, grads, R.data(), dZ.data(), T, B, f, gmean.data(), grstd.data(), F.data(), dZ.data(),
                          S1.data(), F.data(), sdG.data());
    sdF = F;  // before the checks below run the forward again
  } else {
    ops::sgu_backward(p, grads, R.data(), c.zin.gelu ? dZ.data() : Z.data(), T, B, f, gmean.data(), grstd.data(),
                      F.data(), dZ.data(), sG.data(), sdF.data(), sdG.data());
  }
  EXPECT_TRUE(all_finite(dZ));
  EXPECT_TRUE(grad_check(Z, all(Z.size()), dZ, loss, "dZ"));
  if (c.zbias) {
    EXPECT_TRUE(grad_check(zbias, all(f), gather(dzbias, all(f), dzbias0), loss, "d bias of U"));
  }
  EXPECT_TRUE(grad_check(nw, all(g), gather(gnw, all(g), gnw0), loss, "gate norm dw"));
  EXPECT_TRUE(grad_check(nb, all(g), gather(gnb, all(g), gnb0), loss, "gate norm db"));
  EXPECT_TRUE(grad_check(W, w_at, gather(gW, w_at, gW0), loss, "spatial dW"));
  EXPECT_TRUE(grad_check(bias, b_at, gather(gb, b_at, gb0), loss, "spatial db"));
  // dF ends holding dL/dF: the gradient of what was added to F (aMLP's dA).
  EXPECT_TRUE(grad_check(extra, all(extra.size()), sdF, loss, "dF (= d extra)"));
  int stray = 0;
  for (size_t e = 0; e < gW.size(); ++e) stray += std::isnan(W[e]) && gW[e] != 0.f;
  for (size_t e = 0; e < gb.size(); ++e) stray += std::isnan(bias[e]) && gb[e] != 0.f;
  EXPECT_EQ(stray, 0) << "gradient written to weights or biases the forward never read";

  if (c.padded) {
    // A real row's output does not depend on the gate at padded rows: perturbing every
    // padded row of Z leaves S at real rows bit-identical.
    loss();
    const Vec S0 = S;
    Vec Zs = Z;
    for (int t = lengths[1]; t < T; ++t)
      for (int e = 0; e < f; ++e) Z[(size_t(t) * B + 1) * f + e] += 3.f;
    loss();
    Z = Zs;
    for (int t = 0; t < T; ++t)
      for (int b = 0; b < B; ++b) {
        if (t >= lengths[size_t(b)]) continue;
        for (int e = 0; e < g; ++e)
          ASSERT_EQ(S[(size_t(t) * B + b) * g + e], S0[(size_t(t) * B + b) * g + e]) << "row t=" << t << " b=" << b;
      }
  }
}

TEST(OpsVariantsGradCheck, SguEveryKindTwoHeads) {
  for (auto kind : {Sgu::split, Sgu::linear, Sgu::additive, Sgu::multiplicative})
    for (bool causal : {true, false})
      for (bool padded : {false, true}) check_sgu({kind, causal, padded, 5, 7, {}, padded});
}

// As the block calls it: given U and the projection's bias, Z = GELU(U + b) never stored
// (nor U + b), dU in place over U; and given U without a bias.
TEST(OpsVariantsGradCheck, SguEveryKindGivenTheProjection) {
  for (auto kind : {Sgu::split, Sgu::linear, Sgu::additive, Sgu::multiplicative})
    for (bool causal : {true, false})
      for (Gelu form : {Gelu::erf, Gelu::tanh})
        for (bool zbias : {true, false}) check_sgu({kind, causal, !causal, 5, 7, {true, form}, zbias});
}

// The backward rebuilds the gate transposed in tiles of 16 positions: T = 37 takes two
// whole tiles and a part, padded or not, given U or Z.
TEST(OpsVariantsGradCheck, SguAcrossTilesOfPositions) {
  for (auto kind : {Sgu::split, Sgu::additive})
    for (bool causal : {true, false}) {
      check_sgu({kind, causal, !causal, 37, 40});
      check_sgu({kind, causal, !causal, 37, 40, {true, Gelu::erf}, true});
    }
}

TEST(OpsVariantsGradCheck, SguPastNUsesTheLastBias) {
  // The Toeplitz model runs T > n on dense [T, T] weights; rows i >= n share bias[n - 1].
  for (auto kind : {Sgu::split, Sgu::multiplicative})
    for (bool causal : {true, false}) check_sgu({kind, causal, !causal, 6, 4});
}

// The heads are independent: head k's channels are mixed by W_k and b_k only.
TEST(OpsVariants, SguHeadsMixTheirOwnChannels) {
  std::mt19937 rng(21);
  const int heads = 2, gh = 2, g = heads * gh, B = 1, T = 3, n = 3, M = T * B;
  Vec W = uniform(size_t(heads) * n * n, -1, 1, rng), bias = uniform(size_t(heads) * n, -1, 1, rng);
  Vec Z = uniform(size_t(M) * g, -2, 2, rng), nw(g, 1.f), nb(g, 0.f);
  ops::SguParams p;
  p.kind = Sgu::linear;  // S = F: the mixing itself
  p.norm_w = nw.data();
  p.norm_b = nb.data();
  p.W = W.data();
  p.ldw = n;
  p.w_head_stride = n * n;
  p.bias = bias.data();
  p.n = n;
  p.heads = heads;
  p.causal = false;
  Vec S(size_t(M) * g), gm(M), gr(M), F(size_t(M) * g), G(size_t(M) * g);
  ops::sgu_forward(p, Z.data(), T, B, g, S.data(), gm.data(), gr.data(), F.data(), G.data());
  // G = LayerNorm over all g channels of each row (no affine), then per head k:
  // F[i, c] = sum_j W_k[i, j] G[j, c] + b_k[i] for c in head k's channels.
  std::vector<double> Gn(size_t(M) * g);
  for (int r = 0; r < M; ++r) {
    double mean = 0, var = 0;
    for (int c = 0; c < g; ++c) mean += Z[size_t(r) * g + c];
    mean /= g;
    for (int c = 0; c < g; ++c) var += (Z[size_t(r) * g + c] - mean) * (Z[size_t(r) * g + c] - mean);
    var /= g;
    for (int c = 0; c < g; ++c) Gn[size_t(r) * g + c] = (Z[size_t(r) * g + c] - mean) / std::sqrt(var + 1e-5);
  }
  for (int i = 0; i < T; ++i)
    for (int c = 0; c < g; ++c) {
      const int k = c / gh;
      double want = bias[size_t(k) * n + i];
      for (int j = 0; j < T; ++j) want += W[size_t(k) * n * n + size_t(i) * n + j] * Gn[size_t(j) * g + c];
      EXPECT_NEAR(S[size_t(i) * g + c], want, 1e-5) << "i=" << i << " c=" << c;
    }
}

// ---- aMLP's tiny attention

void check_attention(bool causal, bool padded) {
  SCOPED_TRACE(std::string(causal ? "causal" : "bidirectional") + (padded ? " padded" : ""));
  std::mt19937 rng(31 + causal * 2 + padded);
  const int d = 4, da = 3, dout = 5, B = 2, T = 5, M = T * B;
  Vec H = uniform(size_t(M) * d, -1.5f, 1.5f, rng);
  Vec qkv_w = uniform(size_t(3 * da) * d, -0.8f, 0.8f, rng), qkv_b = uniform(3 * da, -0.5f, 0.5f, rng);
  Vec out_w = uniform(size_t(dout) * da, -0.8f, 0.8f, rng), out_b = uniform(dout, -0.5f, 0.5f, rng);
  const std::vector<int32_t> lengths = {T, 3};
  const ops::AttnParams p{qkv_w.data(), qkv_b.data(), out_w.data(), out_b.data(), d, da, dout, causal,
                          padded ? lengths.data() : nullptr};
  Vec qkv(size_t(M) * 3 * da), P(size_t(B) * T * T), O(size_t(M) * da), A(size_t(M) * dout);
  const Vec R = uniform(A.size(), -1, 1, rng);
  auto loss = [&] {
    ops::tiny_attention_forward(p, H.data(), T, B, qkv.data(), P.data(), O.data(), A.data());
    return dot(A, R);
  };
  loss();
  ASSERT_TRUE(all_finite(A));
  // P: rows are distributions over the visible keys; masked keys get exactly 0.
  for (int b = 0; b < B; ++b)
    for (int i = 0; i < T; ++i) {
      const int len = padded ? lengths[size_t(b)] : T;
      double sum = 0.0;
      for (int j = 0; j < T; ++j) {
        const float pij = P[(size_t(b) * T + i) * T + j];
        if (j >= len || (causal && j > i)) {
          EXPECT_EQ(pij, 0.f) << "b=" << b << " i=" << i << " j=" << j;
        }
        sum += pij;
      }
      EXPECT_NEAR(sum, 1.0, 1e-6) << "b=" << b << " i=" << i;
    }

  const Vec dH0 = uniform(H.size(), -1, 1, rng), gqw0 = uniform(qkv_w.size(), -1, 1, rng),
            gqb0 = uniform(qkv_b.size(), -1, 1, rng), gow0 = uniform(out_w.size(), -1, 1, rng),
            gob0 = uniform(out_b.size(), -1, 1, rng);
  Vec dH = dH0, gqw = gqw0, gqb = gqb0, gow = gow0, gob = gob0;
  Vec dO(size_t(M) * da, kNaN), dP(size_t(T) * T, kNaN), dqkv(size_t(M) * 3 * da, kNaN);
  ops::tiny_attention_backward(p, {gqw.data(), gqb.data(), gow.data(), gob.data()}, R.data(), H.data(), T, B,
                               qkv.data(), P.data(), O.data(), dH.data(), dO.data(), dP.data(), dqkv.data());
  // dH accumulates: what was in it before is still there, plus the attention's share.
  EXPECT_TRUE(grad_check(H, all(H.size()), gather(dH, all(H.size()), dH0), loss, "dH (added to a pre-filled dH)"));
  EXPECT_TRUE(grad_check(qkv_w, all(qkv_w.size()), gather(gqw, all(qkv_w.size()), gqw0), loss, "qkv dW"));
  EXPECT_TRUE(grad_check(qkv_b, all(qkv_b.size()), gather(gqb, all(qkv_b.size()), gqb0), loss, "qkv db"));
  EXPECT_TRUE(grad_check(out_w, all(out_w.size()), gather(gow, all(out_w.size()), gow0), loss, "out dW"));
  EXPECT_TRUE(grad_check(out_b, all(out_b.size()), gather(gob, all(out_b.size()), gob0), loss, "out db"));
  if (padded) {
    // Padded keys do not reach real queries: changing H at row 1's padding leaves A at
    // row 1's real positions (and all of row 0) unchanged.
    loss();
    const Vec A0 = A, Hs = H;
    for (int t = lengths[1]; t < T; ++t)
      for (int e = 0; e < d; ++e) H[(size_t(t) * B + 1) * d + e] += 2.f;
    loss();
    for (int t = 0; t < T; ++t)
      for (int b = 0; b < B; ++b)
        for (int e = 0; e < dout && t < lengths[size_t(b)]; ++e) {
          ASSERT_EQ(A[(size_t(t) * B + b) * dout + e], A0[(size_t(t) * B + b) * dout + e]) << "t=" << t << " b=" << b;
        }
    H = Hs;
  }
}

TEST(OpsVariantsGradCheck, TinyAttention) {
  check_attention(true, false);
  check_attention(false, false);
  check_attention(false, true);
  check_attention(true, true);
}

// ---- Toeplitz weights

TEST(OpsVariants, ToeplitzMaterializeMatchesTheFormula) {
  std::mt19937 rng(41);
  for (bool causal : {true, false})
    for (int T : {3, 5, 9}) {
      const int n = 5, size = causal ? n : 2 * n - 1;
      SCOPED_TRACE(std::string(causal ? "causal" : "bidirectional") + " T=" + std::to_string(T));
      const Vec w = uniform(size_t(size), -1, 1, rng);
      Vec W(size_t(T) * T, kNaN);
      ops::toeplitz_materialize(w.data(), n, causal, T, W.data());
      for (int i = 0; i < T; ++i)
        for (int j = 0; j < T; ++j) {
          const int k = i - j;
          float want = 0.f;
          if (causal && k >= 0 && k < n) want = w[size_t(k)];
          if (!causal && std::abs(k) < n) want = w[size_t(k + n - 1)];
          ASSERT_EQ(W[size_t(i) * T + j], want) << "i=" << i << " j=" << j;
        }
    }
}

TEST(OpsVariants, ToeplitzFoldIsTheAdjointOfMaterialize) {
  std::mt19937 rng(42);
  const int n = 6;
  for (bool causal : {true, false})
    for (int T : {4, n, 11}) {  // T < n, T = n, T > n
      SCOPED_TRACE(std::string(causal ? "causal" : "bidirectional") + " T=" + std::to_string(T));
      const int size = causal ? n : 2 * n - 1;
      for (int trial = 0; trial < 3; ++trial) {
        const Vec w = uniform(size_t(size), -1, 1, rng), D = uniform(size_t(T) * T, -1, 1, rng);
        Vec W(size_t(T) * T);
        ops::toeplitz_materialize(w.data(), n, causal, T, W.data());
        // fold accumulates: start from a random dw (and a sentinel past its end).
        Vec dw0 = uniform(size_t(size) + 1, -1, 1, rng), dw = dw0;
        ops::toeplitz_fold(D.data(), T, n, causal, dw.data());
        EXPECT_EQ(dw[size_t(size)], dw0[size_t(size)]) << "fold wrote past the end of w";
        double lhs = 0.0, rhs = 0.0;
        for (size_t e = 0; e < W.size(); ++e) lhs += double(W[e]) * D[e];
        for (int e = 0; e < size; ++e) rhs += double(w[size_t(e)]) * (double(dw[size_t(e)]) - dw0[size_t(e)]);
        EXPECT_NEAR(lhs, rhs, 1e-5 * (1 + std::fabs(lhs)));
        // Entry by entry: materialising a one-hot w picks out exactly what fold sums.
        for (int e = 0; e < size; ++e) {
          Vec onehot(size_t(size), 0.f), Wk(size_t(T) * T), dk(size_t(size), 0.f);
          onehot[size_t(e)] = 1.f;
          ops::toeplitz_materialize(onehot.data(), n, causal, T, Wk.data());
          ops::toeplitz_fold(D.data(), T, n, causal, dk.data());
          double want = 0.0;
          for (size_t q = 0; q < Wk.size(); ++q) want += double(Wk[q]) * D[q];
          ASSERT_NEAR(dk[size_t(e)], want, 1e-5) << "entry " << e;
        }
      }
    }
}

// ---- token mixing on strided rows

TEST(OpsVariants, SpatialMixStridedMatchesNaiveLoops) {
  // 70 crosses the causal kernel's 64-row block boundary, 150 dW's 128-row one; 300
  // columns are enough for dW's product to be split over the threads' columns.
  struct Case { int T, cols, ld; };
  for (bool causal : {true, false})
    for (const Case k : {Case{5, 4, 11}, Case{70, 4, 11}, Case{150, 300, 307}}) {
      const int T = k.T, cols = k.cols, ld = k.ld;
      SCOPED_TRACE(std::string(causal ? "causal" : "bidirectional") + " T=" + std::to_string(T) +
                   " cols=" + std::to_string(cols));
      std::mt19937 rng(51 + T + causal);
      const int n = T + 3;
      Vec W(size_t(n) * n, kNaN);
      for (int i = 0; i < T; ++i)
        for (int j = 0; j < T; ++j)
          if (!causal || j <= i) W[size_t(i) * n + j] = uniform(1, -0.5f, 0.5f, rng)[0];
      // Rows ld apart; the columns past cols belong to someone else (NaN in the input,
      // a sentinel in the outputs that must survive).
      Vec G(size_t(T) * ld, kNaN), dF(size_t(T) * ld, kNaN);
      for (int t = 0; t < T; ++t)
        for (int c = 0; c < cols; ++c) {
          G[size_t(t) * ld + c] = uniform(1, -1, 1, rng)[0];
          dF[size_t(t) * ld + c] = uniform(1, -1, 1, rng)[0];
        }
      Vec F(size_t(T) * ld, -7.f), dG(size_t(T) * ld, -7.f);
      Vec dW(size_t(n) * n, 0.f);
      for (int i = 0; i < T; ++i)
        for (int j = 0; j < T; ++j)
          if (!causal || j <= i) dW[size_t(i) * n + j] = 0.25f;
      const Vec dW0 = dW;
      ops::spatial_mix_forward(W.data(), n, causal, T, cols, G.data(), ld, F.data());
      const Vec Gt = test::transposed(G.data(), T, cols, ld);
      ops::spatial_mix_backward(W.data(), n, causal, T, cols, Gt.data(), dF.data(), ld, dG.data(), dW.data());
      auto visible = [&](int i, int j) { return !causal || j <= i; };
      for (int t = 0; t < T; ++t)
        for (int c = 0; c < ld; ++c) {
          if (c >= cols) {
            ASSERT_EQ(F[size_t(t) * ld + c], -7.f) << "F written outside its columns";
            ASSERT_EQ(dG[size_t(t) * ld + c], -7.f) << "dG written outside its columns";
            continue;
          }
          double f = 0.0, g = 0.0;
          for (int j = 0; j < T; ++j)
            if (visible(t, j)) f += double(W[size_t(t) * n + j]) * G[size_t(j) * ld + c];
          for (int i = 0; i < T; ++i)
            if (visible(i, t)) g += double(W[size_t(i) * n + t]) * dF[size_t(i) * ld + c];
          ASSERT_NEAR(F[size_t(t) * ld + c], f, 1e-5 * (1 + std::abs(f))) << "F t=" << t << " c=" << c;
          ASSERT_NEAR(dG[size_t(t) * ld + c], g, 1e-5 * (1 + std::abs(g))) << "dG t=" << t << " c=" << c;
        }
      for (int i = 0; i < n; ++i)
        for (int j = 0; j < n; ++j) {
          double want = dW0[size_t(i) * n + j];
          if (i < T && j < T && visible(i, j))
            for (int c = 0; c < cols; ++c) want += double(dF[size_t(i) * ld + c]) * G[size_t(j) * ld + c];
          ASSERT_NEAR(dW[size_t(i) * n + j], want, 1e-5 * (1 + std::abs(want))) << "dW i=" << i << " j=" << j;
        }
    }
}

// ---- patches

TEST(OpsVariants, ExtractPatchesNonSquare) {
  const int B = 2, C = 2, Hi = 6, Wi = 8, ph = 3, pw = 2;
  const int gw = Wi / pw, n = (Hi / ph) * gw, P = C * ph * pw;
  // Every pixel a distinct value, so a misplaced one cannot go unnoticed.
  Vec img(size_t(B) * C * Hi * Wi);
  for (size_t i = 0; i < img.size(); ++i) img[i] = float(i) + 0.5f;
  Vec out(size_t(n) * B * P, kNaN);
  ops::extract_patches(ops::Pixels::floats(img.data()), B, C, Hi, Wi, ph, pw, out.data());
  for (int gy = 0; gy < Hi / ph; ++gy)
    for (int gx = 0; gx < gw; ++gx)
      for (int b = 0; b < B; ++b)
        for (int c = 0; c < C; ++c)
          for (int py = 0; py < ph; ++py)
            for (int px = 0; px < pw; ++px) {
              const int t = gy * gw + gx, feat = c * ph * pw + py * pw + px;
              const float want = img[((size_t(b) * C + c) * Hi + gy * ph + py) * Wi + gx * pw + px];
              ASSERT_EQ(out[(size_t(t) * B + b) * P + feat], want)
                  << "patch " << t << " row " << b << " channel " << c << " (" << py << ", " << px << ")";
            }
}

}  // namespace
}  // namespace gmlp
