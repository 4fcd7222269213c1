// The ops (src/ops): every backward against central differences of its forward, the
// blocked spatial op against its naive loops, gemm's transposes, cross-entropy, and the
// optimizer and schedule arithmetic. Tolerances are set so that a sign error, a dropped
// term, a transposed index or a factor of two fails (checked by mutating the ops).
#include <gtest/gtest.h>
#include <omp.h>

#include <array>
#include <cmath>
#include <cstring>
#include <functional>
#include <limits>
#include <random>
#include <sstream>
#include <vector>

#include "backend/backend.h"
#include "gmlp/comm.h"
#include "gmlp/config.h"
#include "gmlp/files.h"
#include "gmlp/optimizer.h"
#include "grad_check.h"
#include "ops/fast_div.h"
#include "ops/fast_math.h"
#include "ops/ops.h"  // internal to gmlp_core: src/ is not on the public include path
#include "oracles.h"
#include "test_util.h"

namespace gmlp {
namespace {

using namespace test;  // Vec, Idx, kNaN, uniform, gather, all_finite, Tol, grad_check

// Element indices of a [rows, cols] block with rows ld apart.
Idx block(int rows, int cols, int ld) {
  Idx at;
  for (int r = 0; r < rows; ++r)
    for (int c = 0; c < cols; ++c) at.push_back(size_t(r) * ld + c);
  return at;
}
Idx all(size_t n) { return block(1, int(n), int(n)); }

// Sequence positions: all T, or (sampled) for a long sequence only those at both ends
// and on both sides of the 64-row block boundary, to keep the forward passes few.
// `chunks` are the elements of those rows (len each), `lower` their part of the lower
// triangle (j <= i) of a matrix with row stride ld.
std::vector<int> rows_of(int T, bool sampled = false) {
  std::vector<int> rows;
  for (int t = 0; t < T; ++t)
    if (!sampled || T <= 8 || t < 3 || t == T / 2 || (t >= 62 && t <= 65) || t >= T - 2) rows.push_back(t);
  return rows;
}
Idx chunks(const std::vector<int>& rows, int len) {
  Idx at;
  for (int t : rows)
    for (int e = 0; e < len; ++e) at.push_back(size_t(t) * len + e);
  return at;
}
Idx lower(const std::vector<int>& rows, int ld) {
  Idx at;
  for (int i : rows)
    for (int j = 0; j <= i; ++j) at.push_back(size_t(i) * ld + j);
  return at;
}


// The objective sum(out * R) in double; out's rows are ld apart, R is compact [rows, cols].
double dot(const float* out, const Vec& R, int rows, int cols, int ld) {
  double s = 0.0;
  for (int r = 0; r < rows; ++r)
    for (int c = 0; c < cols; ++c) s += double(out[size_t(r) * ld + c]) * R[size_t(r) * cols + c];
  return s;
}
double dot(const Vec& out, const Vec& R) { return dot(out.data(), R, 1, int(R.size()), int(R.size())); }


TEST(OpsGradCheck, Linear) {
  std::mt19937 rng(1);
  const int M = 7, in = 5, out = 3;
  Vec x = uniform(M * in, -1, 1, rng), W = uniform(out * in, -1, 1, rng), b = uniform(out, -1, 1, rng);
  const Vec R = uniform(M * out, -1, 1, rng), dW0 = uniform(W.size(), -1, 1, rng), db0 = uniform(out, -1, 1, rng);
  Vec y(M * out);
  auto loss = [&] {
    ops::linear_forward(x.data(), M, in, W.data(), b.data(), out, y.data());
    return dot(y, R);
  };
  Vec dx(M * in, kNaN), dW = dW0, db = db0;
  ops::linear_backward(R.data(), x.data(), M, in, W.data(), out, dx.data(), false, dW.data(), db.data());
  EXPECT_TRUE(grad_check(x, all(x.size()), dx, loss, "dx"));
  EXPECT_TRUE(grad_check(W, all(W.size()), gather(dW, all(W.size()), dW0), loss, "dW"));
  EXPECT_TRUE(grad_check(b, all(out), gather(db, all(out), db0), loss, "db"));
  // accumulate_dx adds onto what is there.
  const Vec dx0 = uniform(dx.size(), -1, 1, rng);
  Vec dx2 = dx0;
  ops::linear_backward(R.data(), x.data(), M, in, W.data(), out, dx2.data(), true, dW.data(), db.data());
  EXPECT_TRUE(test::all_close(gather(dx2, all(dx.size()), dx0).data(), dx.data(), dx.size(), 1e-6f, 1e-5f,
                              "accumulated dx"));
}

TEST(OpsGradCheck, LayerNormStridedAndAccumulating) {
  std::mt19937 rng(2);
  const int M = 6, C = 7, ldx = 10, ldy = 9, lddy = 11, lddx = 8;
  const float eps = 1e-5f;
  Vec x(M * ldx, kNaN);  // the padding is NaN: reading it would poison the output
  for (int r = 0; r < M; ++r)
    for (int c = 0; c < C; ++c) x[r * ldx + c] = 3.f * r - 5.f + uniform(1, -2, 2, rng)[0];
  Vec w = uniform(C, 0.5f, 1.5f, rng), b = uniform(C, -0.5f, 0.5f, rng);
  const Vec R = uniform(M * C, -1, 1, rng);
  Vec dy(M * lddy, kNaN);
  for (int r = 0; r < M; ++r)
    for (int c = 0; c < C; ++c) dy[r * lddy + c] = R[r * C + c];
  Vec y(M * ldy), mean(M), rstd(M);
  auto loss = [&] {
    ops::layernorm_forward(x.data(), ldx, M, C, w.data(), b.data(), eps, y.data(), ldy, mean.data(), rstd.data());
    return dot(y.data(), R, M, C, ldy);
  };
  loss();
  for (bool acc : {false, true}) {
    SCOPED_TRACE(acc ? "accumulate_dx" : "overwrite dx");
    const Vec dx0 = uniform(M * lddx, -1, 1, rng), dw0 = uniform(C, -1, 1, rng), db0 = uniform(C, -1, 1, rng);
    Vec dx = dx0, dw = dw0, db = db0;
    ops::layernorm_backward(dy.data(), lddy, x.data(), ldx, mean.data(), rstd.data(), w.data(), M, C, dx.data(),
                            lddx, acc, dw.data(), db.data());
    const Idx rows = block(M, C, lddx);
    EXPECT_TRUE(grad_check(x, block(M, C, ldx), gather(dx, rows, acc ? dx0 : Vec{}), loss, "dx"));
    EXPECT_TRUE(grad_check(w, all(C), gather(dw, all(C), dw0), loss, "dw"));
    EXPECT_TRUE(grad_check(b, all(C), gather(db, all(C), db0), loss, "db"));
    for (int r = 0; r < M; ++r)
      for (int c = C; c < lddx; ++c) EXPECT_EQ(dx[r * lddx + c], dx0[r * lddx + c]) << "dx padding written";
  }
}

TEST(OpsGradCheck, Gelu) {
  for (bool tanh_approx : {false, true}) {
    SCOPED_TRACE(tanh_approx ? "tanh" : "erf");
    std::mt19937 rng(3);
    const int n = 41;
    Vec x = uniform(n, -4, 4, rng), y(n);
    const Vec R = uniform(n, -1, 1, rng);
    auto loss = [&] {
      ops::gelu_forward(x.data(), y.data(), n, tanh_approx);
      return dot(y, R);
    };
    Vec dx = R;  // dx may alias dy
    ops::gelu_backward(x.data(), dx.data(), dx.data(), n, tanh_approx);
    EXPECT_TRUE(grad_check(x, all(n), dx, loss, "dx", {1e-4, 2e-3}));
  }
}

// An [n, n] matrix (n > T), uniform in its lower triangle [:T, :T], `rest` elsewhere:
// NaN for weights (the masked half must never be read), 0 for gradient accumulators.
Vec causal(int T, int n, float scale, float rest, std::mt19937& rng) {
  Vec W(size_t(n) * n, rest);
  for (size_t i : lower(rows_of(T), n)) W[i] = uniform(1, -scale, scale, rng)[0];
  return W;
}

// Every dW entry outside the lower triangle [:T, :T] is still exactly zero.
void expect_zero_outside_lower(const Vec& dW, int T, int n) {
  int nonzero = 0;
  for (int i = 0; i < n; ++i)
    for (int j = 0; j < n; ++j) nonzero += !(j <= i && i < T) && dW[size_t(i) * n + j] != 0.f;
  EXPECT_EQ(nonzero, 0) << "dW entries outside tril(W[:T, :T]) written";
}

TEST(OpsGradCheck, SpatialCausal) {
  for (int T : {5, 70}) {  // 70 crosses the 64-row block boundary
    SCOPED_TRACE("T=" + std::to_string(T));
    std::mt19937 rng(4);
    const int n = T + 3, cols = 6;
    Vec W = causal(T, n, 0.5f, kNaN, rng), b = uniform(n, -1, 1, rng), G = uniform(T * cols, -1, 1, rng);
    for (int i = T; i < n; ++i) b[i] = kNaN;
    const Vec R = uniform(T * cols, -1, 1, rng);
    const Vec dW0 = causal(T, n, 1.f, 0.f, rng);
    const Vec db0 = uniform(n, -1, 1, rng);
    Vec F(T * cols);
    auto loss = [&] {
      test::spatial_causal_forward(W.data(), n, b.data(), T, cols, G.data(), F.data());
      return dot(F, R);
    };
    loss();
    EXPECT_TRUE(all_finite(F)) << "forward read the masked half of W";
    Vec dG(G.size(), kNaN), dW = dW0, db = db0;
    test::spatial_causal_backward(W.data(), n, T, cols, G.data(), R.data(), dG.data(), dW.data(), db.data());
    EXPECT_TRUE(all_finite(dG)) << "backward read the masked half of W";
    const std::vector<int> rows = rows_of(T, true);
    EXPECT_TRUE(grad_check(G, chunks(rows, cols), gather(dG, chunks(rows, cols)), loss, "dG"));
    EXPECT_TRUE(grad_check(W, lower(rows, n), gather(dW, lower(rows, n), dW0), loss, "dW"));
    EXPECT_TRUE(grad_check(b, all(T), gather(db, all(T), db0), loss, "db"));
    expect_zero_outside_lower(dW, T, n);
  }
}

TEST(OpsGradCheck, SpatialGatingUnit) {
  for (int T : {6, 70}) {
    SCOPED_TRACE("T=" + std::to_string(T));
    std::mt19937 rng(5);
    const int B = 2, dh = 5, n = T + 2, M = T * B;
    Vec Z = uniform(M * 2 * dh, -2, 2, rng), nw = uniform(dh, 0.5f, 1.5f, rng), nb = uniform(dh, -0.5f, 0.5f, rng);
    Vec W = causal(T, n, 0.3f, kNaN, rng), sb = uniform(n, 0.5f, 1.5f, rng);
    const Vec R = uniform(M * dh, -1, 1, rng);
    ops::SguParams p;
    p.norm_w = nw.data();
    p.norm_b = nb.data();
    p.W = W.data();
    p.ldw = n;
    p.bias = sb.data();
    p.n = n;
    Vec S(M * dh), gmean(M), grstd(M), F(M * dh), G(M * dh);
    auto loss = [&] {
      ops::sgu_forward(p, Z.data(), T, B, 2 * dh, S.data(), gmean.data(), grstd.data(), F.data(), G.data());
      return dot(S, R);
    };
    loss();
    EXPECT_TRUE(all_finite(S));
    const Vec nw0 = uniform(dh, -1, 1, rng), nb0 = uniform(dh, -1, 1, rng), sb0 = uniform(n, -1, 1, rng);
    const Vec dW0 = causal(T, n, 1.f, 0.f, rng);
    Vec gnw = nw0, gnb = nb0, gW = dW0, gsb = sb0;
    Vec dZ(Z.size(), kNaN), sG(M * dh, kNaN), sdF(M * dh, kNaN), sdG(M * dh, kNaN);  // dZ is overwritten
    ops::sgu_backward(p, {gnw.data(), gnb.data(), gW.data(), gsb.data()}, R.data(), Z.data(), T, B, 2 * dh,
                      gmean.data(), grstd.data(), F.data(), dZ.data(), sG.data(), sdF.data(), sdG.data());
    const std::vector<int> rows = rows_of(T, true);
    EXPECT_TRUE(grad_check(Z, chunks(rows, B * 2 * dh), gather(dZ, chunks(rows, B * 2 * dh)), loss, "dZ"));
    EXPECT_TRUE(grad_check(nw, all(dh), gather(gnw, all(dh), nw0), loss, "norm dw"));
    EXPECT_TRUE(grad_check(nb, all(dh), gather(gnb, all(dh), nb0), loss, "norm db"));
    EXPECT_TRUE(grad_check(W, lower(rows, n), gather(gW, lower(rows, n), dW0), loss, "spatial dW"));
    EXPECT_TRUE(grad_check(sb, all(T), gather(gsb, all(T), sb0), loss, "spatial db"));
    expect_zero_outside_lower(gW, T, n);
  }
}

TEST(OpsGradCheck, EmbeddingRepeatedTokens) {
  std::mt19937 rng(6);
  const int V = 6, d = 5, T = 4, B = 3, M = T * B;
  const std::vector<int32_t> tokens = {2, 0, 2, 5, 2, 0, 3, 5, 5, 2, 0, 3};  // token 1, 4 unused
  Vec E = uniform(V * d, -1, 1, rng), x(M * d);
  const Vec pe = uniform(T * d, -1, 1, rng), R = uniform(M * d, -1, 1, rng), dE0 = uniform(E.size(), -1, 1, rng);
  auto loss = [&] {
    ops::embedding_forward(E.data(), d, tokens.data(), M, B, pe.data(), x.data());
    return dot(x, R);
  };
  loss();
  for (int r = 0; r < M; ++r)
    for (int c = 0; c < d; ++c) ASSERT_EQ(x[r * d + c], E[tokens[r] * d + c] + pe[(r / B) * d + c]);
  Vec dE = dE0;
  ops::embedding_backward(R.data(), d, tokens.data(), M, dE.data());
  EXPECT_TRUE(grad_check(E, all(E.size()), gather(dE, all(E.size()), dE0), loss, "dE"));
}

TEST(OpsGradCheck, CrossEntropyWithIgnoredTargets) {
  std::mt19937 rng(7);
  const int M = 9, V = 7;
  const std::vector<int32_t> targets = {3, -1, 0, 6, -1, 2, 2, -1, 5};
  Vec logits = uniform(M * V, -3, 3, rng), dlogits(logits.size(), kNaN);
  int64_t count = 0;
  ops::cross_entropy(logits.data(), M, V, targets.data(), dlogits.data(), &count);
  EXPECT_EQ(count, 6);
  auto loss = [&] { return ops::cross_entropy(logits.data(), M, V, targets.data(), nullptr, nullptr); };
  EXPECT_TRUE(grad_check(logits, all(logits.size()), dlogits, loss, "dlogits", {1e-5, 1e-3}));
}

TEST(OpsSpatial, FastMatchesNaive) {
  for (int T : {1, 7, 64, 65, 130}) {
    SCOPED_TRACE("T=" + std::to_string(T));
    std::mt19937 rng(8);
    const int n = T + 5, cols = 7;
    const Vec W = causal(T, n, 0.3f, kNaN, rng), b = uniform(n, -1, 1, rng), G = uniform(T * cols, -1, 1, rng);
    const Vec dF = uniform(T * cols, -1, 1, rng), db0 = uniform(n, -1, 1, rng);
    const Vec dW0 = causal(T, n, 1.f, 0.f, rng);
    Vec F(G.size()), Fn(G.size()), dG(G.size()), dGn(G.size()), dW = dW0, dWn = dW0, db = db0, dbn = db0;
    test::spatial_causal_forward(W.data(), n, b.data(), T, cols, G.data(), F.data());
    test::spatial_causal_forward_naive(W.data(), n, b.data(), T, cols, G.data(), Fn.data());
    test::spatial_causal_backward(W.data(), n, T, cols, G.data(), dF.data(), dG.data(), dW.data(), db.data());
    test::spatial_causal_backward_naive(W.data(), n, T, cols, G.data(), dF.data(), dGn.data(), dWn.data(),
                                       dbn.data());
    EXPECT_TRUE(test::all_close(F.data(), Fn.data(), F.size(), 1e-5f, 1e-5f, "F"));
    EXPECT_TRUE(test::all_close(dG.data(), dGn.data(), dG.size(), 1e-5f, 1e-5f, "dG"));
    EXPECT_TRUE(test::all_close(dW.data(), dWn.data(), dW.size(), 1e-5f, 1e-5f, "dW"));
    EXPECT_TRUE(test::all_close(db.data(), dbn.data(), db.size(), 1e-5f, 1e-5f, "db"));
  }
}

// ops::gemm on random operands against naive loops in double; op(A) is [M, K], op(B)
// is [K, N], each stored transposed when flagged, every leading dimension padded, and
// C compared padding included.
float as_is(float x) { return x; }

// C = alpha op(A) op(B) + beta C by ops::gemm, padded leading dimensions, against naive
// double loops over the inputs as `input` makes them (bf16 products: rounded). Returns
// how far gemm's C is from the loops over the inputs as they are.
double gemm_against_naive_loops(bool ta, bool tb, int M, int N, int K, float alpha, float beta, std::mt19937& rng,
                                float (*input)(float) = as_is, float atol = 1e-6f, float rtol = 1e-5f) {
  const int lda = (ta ? M : K) + 2, ldb = (tb ? K : N) + 1, ldc = N + 3;
  const Vec A = uniform(size_t(ta ? K : M) * lda + 1, -1, 1, rng);
  const Vec Bm = uniform(size_t(tb ? N : K) * ldb + 1, -1, 1, rng);
  const Vec C0 = uniform(size_t(M) * ldc, -1, 1, rng);
  Vec C = C0, want = C0, exact = C0;
  for (int i = 0; i < M; ++i)
    for (int j = 0; j < N; ++j) {
      double s = 0.0, e = 0.0;
      for (int k = 0; k < K; ++k) {
        const float a = ta ? A[k * lda + i] : A[i * lda + k], b = tb ? Bm[j * ldb + k] : Bm[k * ldb + j];
        s += double(input(a)) * input(b);
        e += double(a) * b;
      }
      want[i * ldc + j] = float(alpha * s + beta * C0[i * ldc + j]);
      exact[i * ldc + j] = float(alpha * e + beta * C0[i * ldc + j]);
    }
  ops::gemm(ta, tb, M, N, K, alpha, A.data(), lda, Bm.data(), ldb, beta, C.data(), ldc);
  EXPECT_TRUE(test::all_close(C.data(), want.data(), C.size(), atol, rtol, "C (padding included)"));
  double moved = 0.0;
  for (size_t i = 0; i < C.size(); ++i) moved = std::max(moved, std::fabs(double(C[i]) - exact[i]));
  return moved;
}

// Runs body with gemm's fp32 products on the given library (products.cpp), then gives
// the process its own choice back, pass or fail.
template <typename Body>
void on_library(ops::Fp32Engine e, Body body) {
  struct Restore {
    ops::Fp32Engine saved = ops::fp32_engine();
    ~Restore() { ops::set_fp32_engine(saved); }
  } restore;
  ops::set_fp32_engine(e);
  body();
}

void all_transposes_against_naive_loops() {
  std::mt19937 rng(9);
  for (int K : {3, 0})
    for (bool ta : {false, true})
      for (bool tb : {false, true})
        for (float beta : {0.f, 1.f, 0.5f}) {
          SCOPED_TRACE(::testing::Message() << "K=" << K << " ta=" << ta << " tb=" << tb << " beta=" << beta);
          gemm_against_naive_loops(ta, tb, 5, 4, K, 0.7f, beta, rng);
        }
}

void slabs_per_thread_cover_every_row_and_column() {
  // With several threads gemm gives each a slab of C (gemm.cpp); lengths just past a
  // slab boundary, both split directions, every transpose.
  const int saved = omp_get_max_threads();
  std::mt19937 rng(10);
  for (int threads : {2, 3})
    for (auto [M, N] : {std::pair{65, 7}, std::pair{97, 96}, std::pair{5, 131}, std::pair{200, 33}})
      for (bool ta : {false, true})
        for (bool tb : {false, true}) {
          omp_set_num_threads(threads);
          SCOPED_TRACE(::testing::Message() << threads << " threads, M=" << M << " N=" << N << " ta=" << ta
                                            << " tb=" << tb);
          gemm_against_naive_loops(ta, tb, M, N, 19, 0.5f, 0.25f, rng);
        }
  omp_set_num_threads(saved);
}

// On oneDNN, A^T B with M > N (from 1024 rows) is multiplied as B^T A and added
// transposed (gemm.cpp): tall and square-ish shapes, every beta, a padded C.
void flipped_products_against_naive_loops() {
  std::mt19937 rng(11);
  for (auto [M, N] : {std::pair{1030, 17}, std::pair{1024, 1023}})
    for (float beta : {0.f, 1.f, 0.25f}) {
      SCOPED_TRACE(::testing::Message() << "M=" << M << " N=" << N << " beta=" << beta);
      gemm_against_naive_loops(true, false, M, N, 21, 0.5f, beta, rng);
    }
}

// A·B with a long K in pieces of rows (gemm.cpp's rows_per_call): every row, the last
// piece short, beta applied once, against the product in one call: the same bits where
// the pieces are whole (a short piece may take another of oneDNN's kernels), and the
// same bits every time on a given thread count.
void pieced_products_match_one_call() {
  std::mt19937 rng(13);
  const int M = 1601, N = 512, K = 1030;  // slabs of 1601, 816 and 544 rows (the last shorter), over 1 MB of C
  const Vec A = uniform(size_t(M) * K, -1, 1, rng), Bm = uniform(size_t(K) * N, -1, 1, rng),
            C0 = uniform(size_t(M) * N, -1, 1, rng);
  Vec whole = C0;
  ops::sgemm_onednn(false, false, M, N, K, 0.5f, A.data(), K, Bm.data(), N, 0.25f, whole.data(), N);
  for (int threads : {1, 2, 3}) {
    SCOPED_TRACE(::testing::Message() << threads << " threads");
    const int saved = omp_get_max_threads();
    omp_set_num_threads(threads);
    Vec pieced = C0, again = C0;
    ops::gemm(false, false, M, N, K, 0.5f, A.data(), K, Bm.data(), N, 0.25f, pieced.data(), N);
    ops::gemm(false, false, M, N, K, 0.5f, A.data(), K, Bm.data(), N, 0.25f, again.data(), N);
    omp_set_num_threads(saved);
    EXPECT_TRUE(test::all_close(pieced.data(), whole.data(), whole.size(), 1e-5f, 1e-5f, "pieced C"));
    EXPECT_EQ(std::memcmp(pieced.data(), again.data(), sizeof(float) * pieced.size()), 0) << "not reproducible";
    if (threads < 3) {  // the first 1536 rows: whole pieces on one thread; on two, all but 48 of them
      int differ = 0;
      for (int r = 0; r < 1536; ++r)
        differ += std::memcmp(&whole[size_t(r) * N], &pieced[size_t(r) * N], sizeof(float) * N) != 0;
      EXPECT_EQ(differ, 0) << "rows of the first 1536 differ from one call's";
    }
  }
}

// Timing by shape (gmlp bench --products): a call per entry, and a product inside a timed
// one is part of its time, not an entry of its own.
TEST(OpsGemm, ProductTimingCountsTheOutermostProduct) {
  std::mt19937 rng(12);
  const Vec A = uniform(6 * 4, -1, 1, rng), Bm = uniform(4 * 5, -1, 1, rng);
  Vec C(6 * 5);
  ops::product_timing_start();
  for (int i = 0; i < 3; ++i) ops::gemm(false, false, 6, 5, 4, 1.f, A.data(), 4, Bm.data(), 5, 0.f, C.data(), 5);
  {
    const ops::TimedProduct outer("NN/k", 7, 8, 9);
    ops::gemm(true, true, 5, 6, 4, 1.f, Bm.data(), 5, A.data(), 4, 0.f, C.data(), 6);
  }
  const auto t = ops::product_timing_stop();
  ASSERT_EQ(t.size(), 2u);
  EXPECT_EQ(t[0].kind, "NN");
  EXPECT_EQ(std::tie(t[0].M, t[0].N, t[0].K), std::make_tuple(6, 5, 4));
  EXPECT_EQ(t[0].seconds.size(), 3u);
  EXPECT_EQ(t[1].kind, "NN/k");
  EXPECT_EQ(std::tie(t[1].M, t[1].N, t[1].K), std::make_tuple(7, 8, 9));
  EXPECT_EQ(t[1].seconds.size(), 1u);
  // Stopped: nothing more is timed, and a new start begins empty.
  ops::gemm(false, false, 6, 5, 4, 1.f, A.data(), 4, Bm.data(), 5, 0.f, C.data(), 5);
  ops::product_timing_start();
  EXPECT_TRUE(ops::product_timing_stop().empty());
}

TEST(OpsGemm, AllTransposesAgainstNaiveLoops) {
  on_library(ops::Fp32Engine::openblas, all_transposes_against_naive_loops);
}

TEST(OpsGemm, SlabsPerThreadCoverEveryRowAndColumn) {
  on_library(ops::Fp32Engine::openblas, slabs_per_thread_cover_every_row_and_column);
}

// oneDNN's SGEMM runs on any x86 CPU (its widest vectors there), so the checks above
// run on it wherever the build has oneDNN, whichever library the machine chose.
TEST(OpsGemm, OneDnnSgemmAgainstNaiveLoops) {
  if (!ops::have_onednn()) GTEST_SKIP() << "this build has no oneDNN 2.x";
  on_library(ops::Fp32Engine::onednn, [] {
    all_transposes_against_naive_loops();
    slabs_per_thread_cover_every_row_and_column();
    flipped_products_against_naive_loops();
    pieced_products_match_one_call();
  });
}

// ---- bf16 products (products.cpp)

// Rounding to bf16 by arithmetic, to check the bit trick: the two bf16 neighbours of x
// (the truncation and one unit further out, 2^128 standing for infinity), the nearer
// one, ties to the one with an even last bit.
float bf16_by_arithmetic(float x) {
  if (!std::isfinite(x)) return x;
  uint32_t u;
  std::memcpy(&u, &x, 4);
  const uint32_t lo = u & 0xffff0000u;
  float down;
  std::memcpy(&down, &lo, 4);
  const int biased = int((u >> 23) & 0xffu);
  const double unit = std::ldexp(1.0, std::max(biased, 1) - 127 - 7);
  const double up = double(down) + std::copysign(unit, double(x));
  const double d_down = std::fabs(double(x) - down), d_up = std::fabs(up - double(x));
  const bool take_up = d_up < d_down || (d_up == d_down && ((lo >> 16) & 1u));
  if (!take_up) return down;
  return std::fabs(up) >= std::ldexp(1.0, 128) ? std::copysign(std::numeric_limits<float>::infinity(), x) : float(up);
}

TEST(OpsBf16, RoundingIsToNearestTiesToEven) {
  const float inf = std::numeric_limits<float>::infinity();
  const float one_ulp = std::ldexp(1.f, -7);  // bf16's unit at 1
  // 1 + half a unit is a tie: to 1 (even); 1 + 3 halves ties between 1 + 1 unit (odd)
  // and 1 + 2 units: up; anything past the half goes up; the largest floats overflow.
  EXPECT_EQ(ops::round_to_bf16(1.f + one_ulp / 2), 1.f);
  EXPECT_EQ(ops::round_to_bf16(1.f + 3 * one_ulp / 2), 1.f + 2 * one_ulp);
  EXPECT_EQ(ops::round_to_bf16(1.f + one_ulp / 2 + std::ldexp(1.f, -20)), 1.f + one_ulp);
  EXPECT_EQ(ops::round_to_bf16(-(1.f + one_ulp / 2 + std::ldexp(1.f, -20))), -(1.f + one_ulp));
  EXPECT_EQ(ops::round_to_bf16(std::numeric_limits<float>::max()), inf);
  EXPECT_EQ(ops::round_to_bf16(-inf), -inf);
  EXPECT_TRUE(std::isnan(ops::round_to_bf16(kNaN)));
  EXPECT_EQ(ops::bf16_bits(1.f), 0x3f80);
  EXPECT_EQ(ops::bf16_bits(-2.f), 0xc000);
  // Against the arithmetic on every kind of finite float: random bit patterns (normal
  // and subnormal), and the ties of each binade.
  std::mt19937 rng(21);
  std::vector<float> xs;
  for (int i = 0; i < 200000; ++i) {
    const uint32_t u = rng() & (i % 10 == 0 ? 0x807fffffu : 0xffffffffu);  // every tenth subnormal
    float x;
    std::memcpy(&x, &u, 4);
    if (std::isfinite(x)) xs.push_back(x);
  }
  for (int e = -133; e < 128; ++e) xs.push_back(std::ldexp(1.f + one_ulp / 2, e));
  Vec rounded(xs.size());
  ops::round_to_bf16(xs.data(), 1, int(xs.size()), int(xs.size()), rounded.data());
  int wrong = 0;
  for (size_t i = 0; i < xs.size(); ++i) {
    const float want = bf16_by_arithmetic(xs[i]);
    wrong += rounded[i] != want || ops::round_to_bf16(xs[i]) != want;
    if (wrong == 1 && rounded[i] != want) ADD_FAILURE() << xs[i] << " rounded to " << rounded[i] << ", not " << want;
  }
  EXPECT_EQ(wrong, 0);
}

TEST(OpsBf16, EmulatedProductsAreExactProductsOfRoundedInputs) {
  Fp32ProductsAgain restore;
  ops::set_products(ops::Products::bf16_emulated);
  std::mt19937 rng(22);
  for (bool ta : {false, true})
    for (bool tb : {false, true})
      for (float beta : {0.f, 0.5f}) {
        SCOPED_TRACE(::testing::Message() << "ta=" << ta << " tb=" << tb << " beta=" << beta);
        // Rounding moves a 40-term product of [-1, 1] values by ~1e-2: the inputs were rounded.
        EXPECT_GT(gemm_against_naive_loops(ta, tb, 37, 21, 40, 0.7f, beta, rng, ops::round_to_bf16), 1e-4);
      }
}

// The bf16 path's use of oneDNN (dense copies, transposes as strides, alpha as output
// scales, beta as a sum post-op, the primitive cache, a scratchpad per thread) with fp32
// inputs, which oneDNN runs on any CPU: the same code as bf16's but the element type.
TEST(OpsBf16, OneDnnProductsInFp32AgainstNaiveLoops) {
  if (!ops::have_onednn()) GTEST_SKIP() << "gmlp built without oneDNN";
  std::mt19937 rng(24);
  for (int round = 0; round < 2; ++round)  // the second round's primitives come from the cache
    for (auto [M, N, K] : {std::array{5, 4, 3}, std::array{37, 21, 40}})
      for (bool ta : {false, true})
        for (bool tb : {false, true})
          for (float alpha : {1.f, 0.7f})
            for (float beta : {0.f, 1.f, 0.5f}) {
              SCOPED_TRACE(::testing::Message() << M << "x" << N << "x" << K << " ta=" << ta << " tb=" << tb
                                                << " alpha=" << alpha << " beta=" << beta);
              const int lda = (ta ? M : K) + 2, ldb = (tb ? K : N) + 1, ldc = N + 3;
              const Vec A = uniform(size_t(ta ? K : M) * lda, -1, 1, rng);
              const Vec Bm = uniform(size_t(tb ? N : K) * ldb, -1, 1, rng);
              Vec C = uniform(size_t(M) * ldc, -1, 1, rng), want = C;
              ops::gemm(ta, tb, M, N, K, alpha, A.data(), lda, Bm.data(), ldb, beta, want.data(), ldc);
              ops::gemm_onednn(false, ta, tb, M, N, K, alpha, A.data(), lda, Bm.data(), ldb, beta, C.data(), ldc);
              EXPECT_TRUE(test::all_close(C.data(), want.data(), C.size(), 1e-5f, 1e-5f, "C (padding included)"));
            }
  // Products on several threads at once, each of its own shape.
  std::vector<Vec> out(4);
#pragma omp parallel for num_threads(2)
  for (int t = 0; t < 4; ++t) {
    const int M = 8 + t, N = 6, K = 5;
    const Vec A(size_t(M) * K, 1.f), Bm(size_t(K) * N, 0.5f);
    out[size_t(t)].assign(size_t(M) * N, 0.f);
    ops::gemm_onednn(false, false, false, M, N, K, 1.f, A.data(), K, Bm.data(), N, 0.f, out[size_t(t)].data(), N);
  }
  for (const Vec& o : out)
    for (float x : o) EXPECT_EQ(x, 2.5f);
}

TEST(OpsBf16, ProductsOnTheInstructionsAgreeWithTheEmulation) {
  if (!ops::cpu_has_bf16()) {
    EXPECT_NE(error_of([] { ops::set_products(ops::Products::bf16); }).find("no bf16 matrix instructions"),
              std::string::npos);
    GTEST_SKIP() << "this CPU has neither AVX512-BF16 nor AMX-BF16";
  }
  ASSERT_TRUE(ops::have_onednn()) << "a CPU with bf16 instructions, and gmlp built without oneDNN";
  Fp32ProductsAgain restore;
  ops::set_products(ops::Products::bf16);
  std::mt19937 rng(23);
  const int saved = omp_get_max_threads();
  for (int threads : {1, 2})
    for (auto [M, N, K] : {std::array{5, 4, 3}, std::array{37, 21, 40}, std::array{130, 66, 257}})
      for (bool ta : {false, true})
        for (bool tb : {false, true})
          for (float beta : {0.f, 1.f, 0.5f}) {
            omp_set_num_threads(threads);
            SCOPED_TRACE(::testing::Message() << threads << " threads, " << M << "x" << N << "x" << K
                                              << " ta=" << ta << " tb=" << tb << " beta=" << beta);
            // Sums in another order than the loops', and the instructions may flush subnormals.
            EXPECT_GT(gemm_against_naive_loops(ta, tb, M, N, K, 0.7f, beta, rng, ops::round_to_bf16, 1e-5f, 1e-4f),
                      1e-4);
          }
  omp_set_num_threads(saved);
}

TEST(OpsCrossEntropy, HandComputedValues) {
  // Uniform logits: every counted row costs log V; ignored rows add nothing and get zero gradient.
  const int V = 5;
  const Vec uniform_logits(4 * V, 0.3f);
  const std::vector<int32_t> targets = {1, -1, 4, -1};
  Vec d(uniform_logits.size(), kNaN);
  int64_t count = 0;
  EXPECT_NEAR(ops::cross_entropy(uniform_logits.data(), 4, V, targets.data(), d.data(), &count), std::log(5.0), 1e-6);
  EXPECT_EQ(count, 2);
  for (int r = 0; r < 4; ++r)
    for (int v = 0; v < V; ++v)
      EXPECT_NEAR(d[r * V + v], targets[r] < 0 ? 0.0 : (0.2 - (v == targets[r])) / 2, 1e-7) << r << "," << v;
  // Logits (0, ln 3): p = (1/4, 3/4); rows with targets 0 and 1 cost ln 4 and ln 4/3.
  const Vec two = {0.f, float(std::log(3.0)), 0.f, float(std::log(3.0))};
  const std::vector<int32_t> t01 = {0, 1};
  EXPECT_NEAR(ops::cross_entropy(two.data(), 2, 2, t01.data(), nullptr, nullptr),
              (std::log(4.0) + std::log(4.0 / 3.0)) / 2, 1e-6);
  // Nothing counted: zero loss, zero count, zero gradient.
  const std::vector<int32_t> none = {-1, -1};
  Vec d2(4, kNaN);
  EXPECT_EQ(ops::cross_entropy(two.data(), 2, 2, none.data(), d2.data(), &count), 0.0);
  EXPECT_EQ(count, 0);
  EXPECT_EQ(d2, Vec(4, 0.f));
}

// A batch taken in pieces (gradient accumulation): each piece's mean over the whole
// batch's targets gives each row the gradient it has in the whole, to the bit, and the
// pieces' losses add up to the whole's.
TEST(OpsCrossEntropy, PiecesMeanOverTheWholeBatchAreTheWholeBatch) {
  std::mt19937 rng(5);
  const int M = 11, V = 9, first = 4;
  const std::vector<int32_t> targets = {3, -1, 0, 8, -1, 2, 2, -1, 5, 1, -1};
  const Vec logits = uniform(M * V, -3, 3, rng);
  Vec whole(logits.size(), kNaN), pieces(logits.size(), kNaN);
  int64_t count = 0, own = 0;
  const double mean = ops::cross_entropy(logits.data(), M, V, targets.data(), whole.data(), &count);
  ASSERT_EQ(count, 7);
  const double a = ops::cross_entropy(logits.data(), first, V, targets.data(), pieces.data(), &own, count);
  EXPECT_EQ(own, 3);  // the count returned is the piece's own
  const double b = ops::cross_entropy(logits.data() + first * V, M - first, V, targets.data() + first,
                                      pieces.data() + first * V, nullptr, count);
  EXPECT_NEAR(a + b, mean, 1e-14);
  EXPECT_EQ(std::memcmp(pieces.data(), whole.data(), sizeof(float) * whole.size()), 0);
  // The backend's form adds the second piece's mean to the first's.
  double loss = -1.0;
  cpu_backend().cross_entropy(logits.data(), first, V, targets.data(), nullptr, &loss, count, false, {});
  cpu_backend().cross_entropy(logits.data() + first * V, M - first, V, targets.data() + first, nullptr, &loss, count,
                              true, {});
  EXPECT_NEAR(loss, mean, 1e-14);
}

// Targets as distributions (ops::SoftTargets): label smoothing, mixed rows (mixup,
// CutMix), and both are the losses PyTorch computes (F.cross_entropy's label_smoothing;
// a mixed row as timm's mixup criterion takes it, weight * loss(a) + (1 - weight) *
// loss(b); in double), an ignored row still ignored; each gradient is its loss's own (a
// finite-difference check), and the CPU backend's form is the op's.
TEST(OpsCrossEntropy, SoftTargetsArePyTorchsLosses) {
  std::mt19937 rng(12);
  const int M = 7, V = 11;
  const std::vector<int32_t> targets = {3, -1, 0, 10, 2, 2, 5};
  const std::vector<int32_t> second = {4, 4, 0, 1, 9, 2, 7};
  const std::vector<float> weight = {0.7f, 0.5f, 0.25f, 1.f, 0.f, 0.6f, 0.9f};
  Vec logits = uniform(M * V, -3, 3, rng);
  TempDir dir("soft_targets");
  struct Case {
    const char* name;
    float smoothing;
    bool mixed;
  };
  for (const Case c : {Case{"smoothing", 0.1f, false}, Case{"mixed", 0.f, true}, Case{"both", 0.2f, true}}) {
    SCOPED_TRACE(c.name);
    ops::SoftTargets soft;
    soft.smoothing = c.smoothing;
    nlohmann::json spec = {{"targets", targets}, {"smoothing", c.smoothing}};
    for (int r = 0; r < M; ++r) spec["logits"].push_back(Vec(logits.begin() + r * V, logits.begin() + (r + 1) * V));
    if (c.mixed) {
      soft.second = second.data();
      soft.weight = weight.data();
      spec["second"] = second;
      spec["weight"] = weight;
    }
    write_file_atomic(dir.file("in.json"), spec.dump());
    const auto r = run_command("/usr/bin/python3 " + source_dir() + "/tests/reference/soft_targets_reference.py " +
                               dir.file("in.json") + " " + dir.file("out.json") + " 2>&1");
    ASSERT_EQ(r.exit_code, 0) << r.output;
    const auto want = nlohmann::json::parse(read_file(dir.file("out.json")));
    Vec dlogits(logits.size(), kNaN);
    int64_t count = 0;
    const double loss = ops::cross_entropy(logits.data(), M, V, targets.data(), dlogits.data(), &count, 0, soft);
    EXPECT_EQ(count, 6);
    EXPECT_NEAR(loss, want["loss"].get<double>(), 1e-6 * want["loss"].get<double>());
    for (int r = 0; r < M; ++r)
      for (int v = 0; v < V; ++v)
        EXPECT_NEAR(dlogits[size_t(r * V + v)], want["dlogits"][r][v].get<double>(), 1e-7) << r << "," << v;
    auto plain = [&] { return ops::cross_entropy(logits.data(), M, V, targets.data(), nullptr, nullptr, 0, soft); };
    EXPECT_TRUE(grad_check(logits, all(logits.size()), dlogits, plain, "dlogits", {1e-5, 1e-3}));
    double be_loss = -1.0;
    cpu_backend().cross_entropy(logits.data(), M, V, targets.data(), nullptr, &be_loss, 0, false, soft);
    EXPECT_EQ(be_loss, loss);
  }
  // Weight 1 of the first target, no smoothing: the one-hot loss and gradient.
  const std::vector<float> ones(M, 1.f);
  ops::SoftTargets first_only;
  first_only.second = second.data();
  first_only.weight = ones.data();
  Vec hard(logits.size()), soft(logits.size());
  const double h = ops::cross_entropy(logits.data(), M, V, targets.data(), hard.data(), nullptr);
  const double s = ops::cross_entropy(logits.data(), M, V, targets.data(), soft.data(), nullptr, 0, first_only);
  EXPECT_NEAR(s, h, 1e-12);
  EXPECT_TRUE(test::all_close(soft.data(), hard.data(), hard.size(), 1e-9f, 0.f, "one-hot"));
}

TEST(OpsEmbedding, SinusoidalPositions) {
  Vec pe(3 * 6);
  ops::sinusoidal_positions(3, 6, pe.data());
  // Frequencies 1, 10000^(-1/3), 10000^(-2/3).
  const Vec want = {0, 1, 0, 1, 0, 1,  //
                    0.84147098f, 0.54030231f, 0.04639922f, 0.99892298f, 0.00215443f, 0.99999768f,
                    0.90929743f, -0.41614684f, 0.09269850f, 0.99569422f, 0.00430886f, 0.99999072f};
  EXPECT_TRUE(test::all_close(pe.data(), want.data(), pe.size(), 2e-7f, 0.f, "pe d=6"));
  Vec odd(2 * 5 + 1, -7.f);  // odd d: the last column is a sine; nothing past T*d is written
  ops::sinusoidal_positions(2, 5, odd.data());
  EXPECT_NEAR(odd[5 + 4], std::sin(std::pow(10000.0, -0.8)), 1e-7);
  EXPECT_NEAR(odd[5 + 3], std::cos(std::pow(10000.0, -0.4)), 1e-7);
  EXPECT_EQ(odd[10], -7.f);
}

TEST(OpsOptimizer, AdamWMatchesPyTorchFormula) {
  // "w" (3 values) decays, "b" (2 values) does not.
  std::vector<ParamInfo> layout(2);
  layout[0].name = "w", layout[0].offset = 0, layout[0].size = 3, layout[0].decay = true;
  layout[1].name = "b", layout[1].offset = 3, layout[1].size = 2, layout[1].decay = false;
  TrainConfig cfg;
  cfg.beta1 = 0.9f, cfg.beta2 = 0.95f, cfg.eps = 1e-8f, cfg.weight_decay = 0.1f;
  AdamW opt(layout, 5, cfg);
  const double lr = 0.01;
  Vec p = {0.5f, -1.0f, 2.0f, 0.25f, -0.75f};
  const Vec g1 = {0.2f, -0.4f, 0.0f, 1.5f, -0.01f}, g2 = {-0.1f, -0.3f, 0.6f, 1.0f, 0.02f};
  // Step 1 in closed form: m-hat = g, v-hat = g^2, so p -= lr * g / (|g| + eps) after decay.
  std::vector<double> want(5), m(5, 0.0), v(5, 0.0);
  for (int i = 0; i < 5; ++i)
    want[i] = p[i] * (i < 3 ? 1 - lr * 0.1 : 1.0) - lr * g1[i] / (std::fabs(g1[i]) + 1e-8);
  opt.step(p.data(), g1.data(), float(lr));
  for (int i = 0; i < 5; ++i) EXPECT_NEAR(p[i], want[i], 1e-6) << "step 1, element " << i;
  // Step 2 by torch.optim.AdamW's formula, with bias corrections 1 - b^2.
  for (int i = 0; i < 5; ++i) {
    m[i] = 0.1 * g1[i], v[i] = 0.05 * double(g1[i]) * g1[i];
    m[i] = 0.9 * m[i] + 0.1 * g2[i], v[i] = 0.95 * v[i] + 0.05 * double(g2[i]) * g2[i];
    const double mhat = m[i] / (1 - 0.81), vhat = v[i] / (1 - 0.9025);
    want[i] = p[i] * (i < 3 ? 1 - lr * 0.1 : 1.0) - lr * mhat / (std::sqrt(vhat) + 1e-8);
  }
  opt.step(p.data(), g2.data(), float(lr));
  for (int i = 0; i < 5; ++i) EXPECT_NEAR(p[i], want[i], 1e-6) << "step 2, element " << i;
  EXPECT_EQ(opt.steps_taken(), 2);
}

// ZeRO-1's pieces: the ranks' blocks tile the buffer in order, and optimizers sharded
// on those blocks (blocks cutting through tensors) update exactly what one whole
// optimizer does, each its own block and nothing else.
TEST(OpsOptimizer, ShardedAdamWUpdatesItsBlockExactlyAsTheWholeOne) {
  for (size_t n : {0u, 1u, 5u, 7u, 10784u})
    for (int P : {1, 2, 3, 4}) {
      size_t next = 0;
      for (int r = 0; r < P; ++r) {
        const Block b = block_of(n, r, P);
        EXPECT_EQ(b.begin, next) << n << " " << P;
        EXPECT_LE(b.size(), n / size_t(P) + 1);
        next = b.end;
      }
      EXPECT_EQ(next, n);
    }
  std::vector<ParamInfo> layout(2);
  layout[0].name = "w", layout[0].offset = 0, layout[0].size = 4, layout[0].decay = true;
  layout[1].name = "b", layout[1].offset = 4, layout[1].size = 3, layout[1].decay = false;
  TrainConfig cfg;
  cfg.weight_decay = 0.1f;
  const Vec p0 = {0.5f, -1.f, 2.f, 0.25f, -0.75f, 1.f, 3.f};
  const Vec g1 = {0.2f, -0.4f, 0.f, 1.5f, -0.01f, 0.3f, -2.f}, g2 = {-0.1f, 0.3f, 0.6f, 1.f, 0.02f, -0.5f, 1.f};
  AdamW whole(layout, 7, cfg);
  Vec want = p0;
  whole.step(want.data(), g1.data(), 0.01f);
  whole.step(want.data(), g2.data(), 0.01f);
  Vec got = p0;
  for (int r = 0; r < 3; ++r) {
    const Block b = block_of(7, r, 3);  // 3, 2, 2: the first block cuts "w"
    AdamW part(layout, 7, cfg);
    part.shard(b.begin, b.end);
    EXPECT_EQ(part.m().size(), b.size());
    Vec p = p0;
    part.step(p.data(), g1.data(), 0.01f);
    part.step(p.data(), g2.data(), 0.01f);
    for (size_t i = 0; i < 7; ++i) {
      if (i >= b.begin && i < b.end)
        got[i] = p[i];
      else
        EXPECT_EQ(p[i], p0[i]) << "rank " << r << " touched element " << i;
    }
    for (size_t i = b.begin; i < b.end; ++i) EXPECT_EQ(part.m()[i - b.begin], whole.m()[i]) << i;
  }
  EXPECT_EQ(got, want);
}

// One call over a buffer with decay bounds is the calls over its spans, decaying and
// not in turn, bit for bit (the optimizer's single launch; a bound past n is n).
TEST(OpsOptimizer, AdamWDecayBoundsAreTheSpansUpdatedApart) {
  const size_t n = 1000;
  std::mt19937 rng(3);
  const Vec p0 = uniform(n, -1, 1, rng), g = uniform(n, -1, 1, rng), m0 = uniform(n, -0.1f, 0.1f, rng);
  const Vec v0 = uniform(n, 0.f, 0.1f, rng);
  const std::vector<uint64_t> bounds = {0, 7, 300, 300, 301, 640, 999, 5000};
  const ops::AdamWStep s{0.9f, 0.95f, 1e-8f, 1e-3f, 0.3f, 0.99f, nullptr, 0, bounds.data(), int(bounds.size())};
  Vec p = p0, m = m0, v = v0;
  ops::adamw_update(p.data(), g.data(), m.data(), v.data(), n, s);
  Vec pw = p0, mw = m0, vw = v0;
  size_t at = 0;
  for (size_t k = 0; k <= bounds.size(); ++k) {
    const size_t end = k < bounds.size() ? std::min<size_t>(n, bounds[k]) : n;
    ops::AdamWStep span = s;
    span.decay_bounds = nullptr;
    span.decay = k % 2 ? s.decay : 1.f;
    if (at < end) ops::adamw_update(pw.data() + at, g.data() + at, mw.data() + at, vw.data() + at, end - at, span);
    at = std::max(at, end);
  }
  EXPECT_EQ(p, pw);
  EXPECT_EQ(m, mw);
  EXPECT_EQ(v, vw);
  // And the bounds matter: element 5 decays, element 100 does not.
  ops::AdamWStep all = s;
  all.decay_bounds = nullptr;
  Vec pa = p0, ma = m0, va = v0;
  ops::adamw_update(pa.data(), g.data(), ma.data(), va.data(), n, all);
  EXPECT_EQ(pa[5], p[5]);
  EXPECT_NE(pa[100], p[100]);
}

TEST(OpsOptimizer, ClipGradNorm) {
  Vec g = {3.f, -4.f, 0.f};
  EXPECT_NEAR(clip_grad_norm(g.data(), 3, 1.f), 5.0, 1e-9);
  EXPECT_NEAR(grad_norm(g.data(), 3), 1.0, 1e-6);
  EXPECT_NEAR(g[0], 0.6, 1e-6);
  EXPECT_NEAR(g[1], -0.8, 1e-6);
  Vec small = {0.3f, 0.4f}, keep = small;
  EXPECT_NEAR(clip_grad_norm(small.data(), 2, 1.f), 0.5, 1e-7);
  EXPECT_EQ(small, keep);
  Vec big = {30.f, 40.f}, kept = big;
  EXPECT_NEAR(clip_grad_norm(big.data(), 2, 0.f), 50.0, 1e-5);  // max_norm 0 disables clipping
  EXPECT_EQ(big, kept);
}

// The update takes global-norm clipping as it reads each gradient (AdamWStep's
// clip_sum_squares): the weights and moments of clipping first and updating after, bit
// for bit, and the gradients left as they were. Clipping that scales (half the norm),
// that does not (twice it), and none (max_norm 0); with decay bounds, which split the
// update into spans.
TEST(OpsOptimizer, AnUpdateThatClipsIsTheUpdateOfTheClippedGradientsBitForBit) {
  const size_t n = 10007;
  std::mt19937 rng(21);
  std::normal_distribution<float> normal(0.f, 1.f);
  auto randn = [&](float scale) {
    Vec x(n);
    for (float& e : x) e = scale * normal(rng);
    return x;
  };
  const Vec p0 = randn(1.f), g = randn(1.f), m0 = randn(0.1f);
  Vec v0 = randn(0.1f);
  for (float& x : v0) x = std::fabs(x);
  const double ss = ops::sum_squares(g.data(), n), norm = std::sqrt(ss);
  const std::vector<uint64_t> bounds = {0, 5000, 7000, 10007};
  for (const float max_norm : {float(norm / 2), float(2 * norm), 0.f})
    for (const bool bounded : {false, true}) {
      ops::AdamWStep s{0.9f, 0.95f, 1e-8f, 1e-3f, 0.3f, 0.99f};
      if (bounded) {
        s.decay_bounds = bounds.data();
        s.n_decay_bounds = int(bounds.size());
      }
      Vec pw = p0, mw = m0, vw = v0, clipped = g;
      ops::clip_scale(clipped.data(), n, ss, max_norm);
      ops::adamw_update(pw.data(), clipped.data(), mw.data(), vw.data(), n, s);
      Vec p = p0, m = m0, v = v0, grads = g;
      s.clip_sum_squares = &ss;
      s.max_norm = max_norm;
      ops::adamw_update(p.data(), grads.data(), m.data(), v.data(), n, s);
      const std::string at = "max_norm " + std::to_string(max_norm) + (bounded ? ", bounds" : "");
      EXPECT_EQ(std::memcmp(p.data(), pw.data(), sizeof(float) * n), 0) << at;
      EXPECT_EQ(std::memcmp(m.data(), mw.data(), sizeof(float) * n), 0) << at;
      EXPECT_EQ(std::memcmp(v.data(), vw.data(), sizeof(float) * n), 0) << at;
      EXPECT_EQ(grads, g) << at << ": the gradients are read, not scaled";
      if (max_norm == float(norm / 2)) {
        EXPECT_NE(clipped, g) << "this case must clip";
      }
    }
}

TEST(OpsSchedule, LearningRate) {
  TrainConfig t;
  t.schedule = Schedule::cosine, t.lr = 1e-3f, t.min_lr = 1e-4f, t.warmup = 10, t.steps = 110;
  EXPECT_NEAR(learning_rate(t, 64, 1), 1e-4, 1e-9);  // warmup ramp s / warmup
  EXPECT_NEAR(learning_rate(t, 64, 5), 5e-4, 1e-9);
  EXPECT_NEAR(learning_rate(t, 64, 10), 1e-3, 1e-9);  // peak
  EXPECT_NEAR(learning_rate(t, 64, 60), 5.5e-4, 1e-9);  // half way down the cosine
  EXPECT_NEAR(learning_rate(t, 64, 35), 1e-4 + 9e-4 * 0.5 * (1 + std::cos(M_PI / 4)), 1e-9);
  EXPECT_NEAR(learning_rate(t, 64, 110), 1e-4, 1e-9);  // ends at min_lr and stays
  EXPECT_NEAR(learning_rate(t, 64, 500), 1e-4, 1e-9);
  t.schedule = Schedule::noam, t.noam_factor = 2.f, t.warmup = 16;  // 2 * 64^-0.5 * min(s^-0.5, s * 16^-1.5)
  EXPECT_NEAR(learning_rate(t, 64, 4), 0.015625, 1e-8);
  EXPECT_NEAR(learning_rate(t, 64, 16), 0.0625, 1e-8);
  EXPECT_NEAR(learning_rate(t, 64, 64), 0.03125, 1e-8);
  EXPECT_LT(learning_rate(t, 64, 15), learning_rate(t, 64, 16));
  EXPECT_LT(learning_rate(t, 64, 17), learning_rate(t, 64, 16));
  t.schedule = Schedule::constant;
  EXPECT_EQ(learning_rate(t, 64, 1), 1e-3f);
  EXPECT_EQ(learning_rate(t, 64, 100000), 1e-3f);
}

}  // namespace
}  // namespace gmlp

namespace gmlp::ops {
namespace {

// The vectorised GELU (fast_math.h) against libm's erf/exp/tanh over the whole range
// activations take, tails included.
TEST(OpsGelu, FastMatchesLibmReference) {
  std::vector<float> x;
  for (float v = -12.f; v <= 12.f; v += 0.001f) x.push_back(v);
  for (float v : {-100.f, -40.f, -9.5f, 0.f, 1e-8f, 9.5f, 40.f, 100.f}) x.push_back(v);
  const int64_t n = int64_t(x.size());
  std::vector<float> dy(x.size());
  for (size_t i = 0; i < dy.size(); ++i) dy[i] = 0.5f + float(i % 7) * 0.25f;
  for (bool tanh_approx : {false, true}) {
    std::vector<float> fast(x.size()), ref(x.size()), dfast(x.size()), dref(x.size());
    gelu_forward(x.data(), fast.data(), n, tanh_approx);
    test::gelu_forward_reference(x.data(), ref.data(), n, tanh_approx);
    gelu_backward(x.data(), dy.data(), dfast.data(), n, tanh_approx);
    test::gelu_backward_reference(x.data(), dy.data(), dref.data(), n, tanh_approx);
    const std::string tag = tanh_approx ? "tanh" : "erf";
    EXPECT_TRUE(test::all_close(fast.data(), ref.data(), x.size(), 1e-6f, 2e-6f, "gelu " + tag));
    EXPECT_TRUE(test::all_close(dfast.data(), dref.data(), x.size(), 2e-6f, 2e-6f, "gelu' " + tag));
  }
}

// GELU and its derivative from one exponential (the SGU's backward) give the bits of the
// two separate forms (the forward's GELU, gelu_backward with dy = 1): the backward
// rebuilds the forward's values exactly.
TEST(OpsGelu, ValueAndDerivativeAtOnceMatchTheSeparateForms) {
  std::vector<float> x;
  for (float v = -12.f; v <= 12.f; v += 0.0037f) x.push_back(v);
  for (float v : {-100.f, -0.f, 0.f, 1e-8f, 100.f}) x.push_back(v);
  const int64_t n = int64_t(x.size());
  const std::vector<float> ones(x.size(), 1.f);
  for (bool tanh_approx : {false, true}) {
    std::vector<float> y(x.size()), dy(x.size()), y1(x.size()), dy1(x.size());
    gelu_forward(x.data(), y.data(), n, tanh_approx);
    gelu_backward(x.data(), ones.data(), dy.data(), n, tanh_approx);
#pragma omp simd
    for (int64_t i = 0; i < n; ++i) {
      const auto [v, d] = tanh_approx ? fast::gelu_tanh_and_grad(x[size_t(i)]) : fast::gelu_erf_and_grad(x[size_t(i)]);
      y1[size_t(i)] = v;
      dy1[size_t(i)] = d;
    }
    EXPECT_EQ(y1, y) << (tanh_approx ? "tanh" : "erf");
    EXPECT_EQ(dy1, dy) << (tanh_approx ? "tanh" : "erf");
  }
}

// The bias + GELU pass in place (y = u, as a forward without gradients runs it) gives
// the bits of the pass into a separate y, whose u holds the biased projection.
TEST(OpsGelu, BiasGeluInPlaceEqualsOutOfPlace) {
  std::mt19937 rng(21);
  const int M = 300, n = 257;  // past kParallelValues: threaded, and an odd row length
  const Vec u0 = uniform(size_t(M) * n, -4, 4, rng), b = uniform(size_t(n), -1, 1, rng);
  for (bool tanh_approx : {false, true}) {
    Vec u = u0, y(u0.size(), kNaN), in_place = u0;
    bias_gelu_forward(u.data(), b.data(), M, n, y.data(), tanh_approx);
    bias_gelu_forward(in_place.data(), b.data(), M, n, in_place.data(), tanh_approx);
    EXPECT_EQ(in_place, y) << (tanh_approx ? "tanh" : "erf");
    for (int r = 0; r < M; ++r)
      for (int c = 0; c < n; ++c) ASSERT_EQ(u[size_t(r) * n + c], u0[size_t(r) * n + c] + b[size_t(c)]);
    float g;
    gelu_forward(&u[5], &g, 1, tanh_approx);
    EXPECT_EQ(y[5], g);
  }
}

// The kernels' divisions by a multiply and a shift (ops/fast_div.h) against the
// division: every divisor to 3,000 and powers of two and their neighbours up to 2^31
// (the largest it takes), each over numerators from 0 up, around multiples of the
// divisor, and near 2^31.
TEST(FastDiv, IsTheQuotientForEveryNumeratorBelow2To31) {
  std::vector<uint32_t> divisors;
  for (uint32_t d = 1; d <= 3000; ++d) divisors.push_back(d);
  for (int k = 12; k <= 31; ++k)
    for (int64_t e : {-1, 0, 1})
      if ((int64_t(1) << k) + e <= (int64_t(1) << 31)) divisors.push_back(uint32_t((int64_t(1) << k) + e));
  divisors.push_back(196 * 128);  // gMLP-S/16's rows
  std::mt19937 rng(5);
  const uint32_t top = (uint32_t(1) << 31) - 1;
  for (const uint32_t d : divisors) {
    const ops::FastDiv f(d);
    std::vector<uint32_t> ns;
    for (uint32_t n = 0; n < 2000; ++n) ns.push_back(n);
    for (uint32_t q : {uint32_t(1), uint32_t(7), top / d}) {
      const uint64_t base = uint64_t(q) * d;
      for (int64_t e = -2; e <= 2; ++e)
        if (int64_t(base) + e >= 0 && uint64_t(int64_t(base) + e) <= top) ns.push_back(uint32_t(int64_t(base) + e));
    }
    for (uint32_t k = 0; k < 200; ++k) ns.push_back(top - k);
    for (int k = 0; k < 200; ++k) ns.push_back(std::uniform_int_distribution<uint32_t>(0, top)(rng));
    for (const uint32_t n : ns) {
      ASSERT_EQ(f.div(n), n / d) << n << " / " << d;
      ASSERT_EQ(f.mod(n), n % d) << n << " % " << d;
    }
  }
}

}  // namespace
}  // namespace gmlp::ops
