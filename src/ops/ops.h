#pragma once
// The ops gMLP is built from, each a forward/backward pair over raw row-major float
// buffers with explicit dimensions. Rows are tokens in sequence-major order
// (row = t * B + b), so every channel projection is one GEMM with M = T * B.
// Backward functions ACCUMULATE into parameter gradients (dW, db, ...) and, where
// noted, into input gradients; they never allocate per call beyond thread scratch.
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "gmlp/kinds.h"
#include "ops/dropout_mask.h"

namespace gmlp::ops {

using gmlp::Sgu;

// ---- gemm.cpp: C[M,N] = alpha * op(A) * op(B) + beta * C (row-major, via OpenBLAS),
// in the process's product precision below.
void gemm(bool trans_a, bool trans_b, int M, int N, int K, float alpha, const float* A, int lda,
          const float* B, int ldb, float beta, float* C, int ldc);

// Wall time of products by shape, for `gmlp bench --products`: off until started. A
// product is timed where it is called outside a parallel region (a product split among
// the threads is timed whole: spatial.cpp times its weight gradient, "NN/k").
struct ProductTiming {
  std::string kind;  // "NN", "NT", "TN", "TT": the transposes of A and B
  int M = 0, N = 0, K = 0;
  std::vector<double> seconds;  // one per call
};
void product_timing_start();  // clears what was timed before
std::vector<ProductTiming> product_timing_stop();
// Times the enclosing scope as one product of this shape when timing is on.
class TimedProduct {
 public:
  TimedProduct(const char* kind, int M, int N, int K);
  ~TimedProduct();
  TimedProduct(const TimedProduct&) = delete;
  TimedProduct& operator=(const TimedProduct&) = delete;

 private:
  const char* kind_;
  int M_, N_, K_;
  bool counted_ = false;  // timing was on: this product is counted in the nesting depth
  double start_ = -1;     // < 0: not timed (timing off, or inside a timed product)
};

// ---- products.cpp: how gemm multiplies. First, which library runs fp32 products:
// OpenBLAS, unless it runs narrower kernels than the CPU has. OpenBLAS picks its kernels
// once, when it loads, from CPUID or OPENBLAS_CORETYPE; where that leaves an AVX-512 CPU
// on AVX2 kernels (these machines' environment sets OPENBLAS_CORETYPE=Haswell), oneDNN's
// JIT SGEMM, which uses AVX-512, multiplies instead: 1.6-1.9x faster steps on a Zen 5,
// and as fast as OpenBLAS's own AVX-512 kernels there (docs/bench.md, "Which library
// multiplies"). GMLP_CPU_GEMM=openblas|onednn overrides the choice; another value is an
// error at the first product (the gmlp program checks it at start).
enum class Fp32Engine { openblas, onednn };
Fp32Engine fp32_engine();
// The library, its kernels and why, for reports ("OpenBLAS, Haswell kernels").
const std::string& fp32_engine_description();
// For tests: both engines against the same oracle on any CPU (oneDNN's needs the build's oneDNN).
void set_fp32_engine(Fp32Engine e);
// The fp32 product on oneDNN's SGEMM (cblas_sgemm's arguments, row-major).
void sgemm_onednn(bool trans_a, bool trans_b, int M, int N, int K, float alpha, const float* A, int lda,
                  const float* B, int ldb, float beta, float* C, int ldc);

// Then the precision: fp32; or mixed precision, bf16 inputs and fp32
// accumulation, on the CPU's bf16 instructions (through oneDNN), or emulated: the same
// rounding of the inputs, then fp32 SGEMM (a product of two bf16 values is exact in
// fp32, so only the order of the sums differs from the instructions). Matrices stay
// fp32 in memory either way. Every product is rounded, the causal spatial product's
// diagonal blocks too (the GPU keeps those in fp32: cuBLAS's TRMM has no bf16).
enum class Products { fp32, bf16, bf16_emulated };
void set_products(Products p);
Products products();
// AVX512-BF16 or AMX-BF16, from CPUID; and whether this build has oneDNN to use them.
bool cpu_has_bf16();
bool have_onednn();
// Why Products::bf16 cannot run here (no instructions, or no oneDNN), or null when it can.
const char* bf16_unavailable();
// The nearest bf16 (ties to even), as a float; NaN stays NaN, infinities stay.
float round_to_bf16(float x);
uint16_t bf16_bits(float x);
// rows x cols of x (rows ld apart) rounded so, into the dense out.
void round_to_bf16(const float* x, int rows, int cols, int ld, float* out);
// gemm on oneDNN, with the inputs rounded to bf16 (Products::bf16; throws where the
// CPU or the build lacks it) or as they are (fp32: the same shapes, strides and
// scalars, which the tests check on any CPU).
void gemm_onednn(bool bf16, bool trans_a, bool trans_b, int M, int N, int K, float alpha, const float* A, int lda,
                 const float* B, int ldb, float beta, float* C, int ldc);

// ---- linear.cpp: y[M,out] = x[M,in] W[out,in]^T + b.
void linear_forward(const float* x, int M, int in, const float* W, const float* b, int out, float* y);
// dx (overwritten, unless accumulate_dx) = dy W;  dW += dy^T x;  db += colsum(dy).
void linear_backward(const float* dy, const float* x, int M, int in, const float* W, int out, float* dx,
                     bool accumulate_dx, float* dW, float* db);

// ---- layernorm.cpp: over the C channels of each of M rows; x rows are ldx apart.
// y = (x - mean) * rstd * w + b; saves mean and rstd per row for the backward.
void layernorm_forward(const float* x, int ldx, int M, int C, const float* w, const float* b, float eps, float* y,
                       int ldy, float* mean, float* rstd);
// One row of it (the cached decoder normalises single rows with the same arithmetic);
// mean and rstd may be null.
void layernorm_row(const float* x, int C, const float* w, const float* b, float eps, float* y, float* mean = nullptr,
                   float* rstd = nullptr);
// y = (x - mean) * rstd * w + b with the statistics a forward saved: one pass, and the
// same values layernorm_forward produced (the backward uses it to rebuild outputs).
void layernorm_apply(const float* x, int ldx, int M, int C, const float* w, const float* b, const float* mean,
                     const float* rstd, float* y, int ldy);
// One row of it.
void layernorm_apply_row(const float* x, int C, const float* w, const float* b, float mean, float rstd, float* y);
// Recomputes x-hat from x, mean, rstd. dx (rows lddx apart) is overwritten, or added
// to when accumulate_dx; dw += sum dy * xhat; db += sum dy. dx may alias x (same
// stride): each element of x is read before the same element of dx is written.
void layernorm_backward(const float* dy, int lddy, const float* x, int ldx, const float* mean, const float* rstd,
                        const float* w, int M, int C, float* dx, int lddx, bool accumulate_dx, float* dw,
                        float* db);

// ---- gelu.cpp: exact (erf) or tanh-approximated GELU, elementwise over n values.
void gelu_forward(const float* x, float* y, int64_t n, bool tanh_approx);
// u[r, :] += b, then y = GELU(u), in one pass over the M rows of n values: the bias
// of the projection before a GELU, so the GEMM need not be seeded with it. y may be u
// (a forward that no backward follows keeps GELU's output only).
void bias_gelu_forward(float* u, const float* b, int M, int n, float* y, bool tanh_approx);
// dx = dy * gelu'(x) (dx may alias dy).
void gelu_backward(const float* x, const float* dy, float* dx, int64_t n, bool tanh_approx);

// ---- spatial.cpp: the SGU's token mixing (no bias): G, F, dF, dG are [T, cols] with rows ld
// apart. Causal uses tril(W) only (one GEMM per row block over a masked copy of W's
// block rows: docs/backward.md); otherwise W[:T,:T]
// is one GEMM. The backward takes G transposed, Gt [cols, T] (rows T apart: its weight
// gradient's products are then A·B), overwrites dG and accumulates dW.
void spatial_mix_forward(const float* W, int ldw, bool causal, int T, int cols, const float* G, int ld, float* F);
void spatial_mix_backward(const float* W, int ldw, bool causal, int T, int cols, const float* Gt, const float* dF,
                          int ld, float* dG, float* dW);
// Toeplitz weights: W[T, T] (row stride T) from w, W[i, j] = w[i - j + n - 1] (2n-1
// entries) or, causal, w[i - j] (n entries); offsets of n or more weigh 0. The fold
// adds each diagonal of a dense dW [T, T] into dw.
void toeplitz_materialize(const float* w, int n, bool causal, int T, float* W);
// Row i of that matrix, its first T entries (the decoder's one new row).
void toeplitz_row(const float* w, int n, bool causal, int i, int T, float* row);
void toeplitz_fold(const float* dW, int T, int n, bool causal, float* dw);

// ---- sgu.cpp: the spatial gating unit on Z[M = T*B, f = d_ffn], docs/variants.md.
// gate = Z2 (split) or Z (the other forms), g channels; G = LayerNorm(gate), zeroed at
// padded rows; F = W_k G + b_k (+ extra) per head k; S = Z1*F, F, Z+F or Z*F.
// Saves gate mean/rstd [M] and F [M, g]. G is scratch [M, g] and may be S's buffer.
// kind: any Sgu but none (which has no SGU).
//
// What the ops are given as Z: U, with Z = U + bias, or GELU(U + bias) when `gelu`,
// taken row by row as the ops read U (no bias: Z = U or GELU(U)). The block passes U (the
// input projection's output, its bias not added) with GELU and the bias: neither Z nor
// U + bias is ever stored, and the backward's dZ leaves as dU, GELU's derivative folded
// in (docs/backward.md).
struct ZInput {
  bool gelu = false;
  Gelu form = Gelu::erf;
  const float* bias = nullptr;  // [f] or null, added to every row of U as it is read
  float* dbias = nullptr;       // [f] or null: the backward adds dL/d(bias), dU's column sums
};
// n floats at x rounded into bf16 bits at y: one of several roundings a backend that
// holds bf16 makes in one pass (Backend::to_bf16_many: a step's projection weights).
struct Bf16Copy {
  const float* x;
  size_t n;
  uint16_t* y;
};
// U and F kept for the backward as bf16 bit patterns ([M, f] and [M, g]) instead of
// floats: the CUDA backend's path under --precision bf16 (docs/gpu.md "Precision"); the
// CPU ops refuse it. The forward reads U from u (the in-projection's product wrote it
// in bf16; the Z argument is unused), writes the normalised gate into G (its G
// argument unused) for the spatial products, which read it and a bf16 copy of W, and
// writes F into F, the products' sums rounded and then, with bias and extra added,
// rounded again (F_unbiased: the sums rounded alone), and S, from that F (plus the
// bias), rounded into S ([M, g], for the out-projection's
// bf16 products; the S and float F arguments unused). G may be S (G is dead before S
// is written). The backward reads U and F from here (its Z and F arguments unused),
// rebuilds S into S (when its S argument is not null), writes dL/dF into dF (and into
// its float dF argument as well where that is not null: aMLP's attention reads it),
// rebuilds G into G (unless G_kept: G is a layer's own, as the forward left it), and
// writes dU over u, in bf16, as the float path writes dZ over U
// (its dZ argument unused; the bias gradients are sums of the rounded dU and dF). It
// reads dL/dS from dS and writes dL/dG into dG, both bf16 (its dS and dG arguments
// unused; dG may be dS for the split form, as in the float path).
struct Bf16Store {
  uint16_t* u = nullptr;
  uint16_t* F = nullptr;
  uint16_t* S = nullptr;
  uint16_t* G = nullptr;   // [M, g]
  uint16_t* dF = nullptr;  // [M, g]
  uint16_t* dS = nullptr;  // [M, g]
  uint16_t* dG = nullptr;  // [M, g]
  bool G_kept = false;
  // F holds the spatial products alone, rounded once, and the bias is added (in float)
  // wherever F is read: S's combine and the backward's. Not with aMLP's attention,
  // which adds to F and is not kept.
  bool F_unbiased = false;
  bool on() const { return u != nullptr; }
};
// One row's S from its Z row (Z1 for split, all of Z otherwise) and F row, g channels:
// Z*F, F or Z+F. s may be f (in place).
inline void sgu_combine_row(Sgu kind, const float* z, const float* f, float* s, int g) {
  switch (kind) {
    case Sgu::split:
    case Sgu::multiplicative:
      for (int c = 0; c < g; ++c) s[c] = z[c] * f[c];
      break;
    case Sgu::linear:
      for (int c = 0; c < g; ++c) s[c] = f[c];
      break;
    case Sgu::additive:
      for (int c = 0; c < g; ++c) s[c] = z[c] + f[c];
      break;
    case Sgu::none:  // no SGU: never called
      break;
  }
}
// The same over M rows: Z rows ldz apart, F and S [M, g] (the cached decoder's step).
void sgu_combine(Sgu kind, const float* Z, int ldz, const float* F, int M, int g, float* S);
// The spatial products' bf16 copies of a layer's W (each head's W[:T, :T]) where U and F
// are held in bf16: made once a step for every layer (Backend::spatial_w_bf16_many),
// where each product rounded a copy of its own, two launches a layer. Head k's copies
// start k * spatial_w16_head(T) values in: the forward product's form, then, a slot
// later, dG's where the two differ (src/ops/cuda/spatial.cu: W^T for the forward where a
// row of T bf16 values is not 16 bytes). Rows padded to 8 values, slots to 128.
inline int64_t spatial_w16_slot(int T) { return (int64_t(T) * ((T + 7) / 8 * 8) + 127) / 128 * 128; }
inline int64_t spatial_w16_head(int T) { return 2 * spatial_w16_slot(T); }

struct SguParams {
  Sgu kind = Sgu::split;
  const float* norm_w = nullptr;
  const float* norm_b = nullptr;
  const float* W = nullptr;      // dense [T', T'] per head, rows ldw apart, heads w_head_stride apart
  int ldw = 0;
  int64_t w_head_stride = 0;
  const float* bias = nullptr;   // head k's at bias + k * n; rows i >= n use bias[n - 1]
  int n = 0;
  int heads = 1;
  bool causal = true;
  const int32_t* lengths = nullptr;  // [B] real rows per sequence, or null (no padding)
  float eps = 1e-5f;
  ZInput z;                          // Z itself, or U with Z = GELU(U + bias)
  Bf16Store store;                   // U and F kept as bf16 (a GPU's path), or not
  const uint16_t* w16 = nullptr;     // with store: this layer's copies of W for T (above), or null:
                                     //   each product makes its own
};
struct SguGrads {
  float* norm_w;
  float* norm_b;
  float* W;     // same layout as SguParams::W
  float* bias;  // same layout as SguParams::bias
};
// extra [M, g] (or null) is added to F before the gating: aMLP's attention.
void sgu_forward(const SguParams& p, const float* Z, int T, int B, int f, float* S, float* gmean, float* grstd,
                 float* F, float* G, const float* extra = nullptr);
// dZ [M, f] is overwritten (dL/dU when p.z.gelu); dF ends holding dL/dF (the attention's
// dA for aMLP). G, dF and dG are scratch [M, g]. dZ may alias Z; G may be any dead
// buffer; dG may alias dS only for the split form (the others read dS again at the end);
// dF may alias F except for the multiplicative form (whose direct path dS * F, added in
// the gate LayerNorm's backward pass, reads F again).
void sgu_backward(const SguParams& p, const SguGrads& g, const float* dS, const float* Z, int T, int B, int f,
                  const float* gmean, const float* grstd, const float* F, float* dZ, float* G, float* dF,
                  float* dG);
// The same in its two parts, for a caller that wants S between them (the block: proj_out's
// weight gradient dYᵀ·S, with S rebuilt here in the pass that reads Z and F anyway rather
// than in a pass of its own). The gate part is one pass over the rows: S = combine(Z, F)
// again (S may be null), dF's direct part and, for the split form, dZ1. The mix part is
// the rest: G rebuilt, the spatial backward, the bias, the gate LayerNorm's backward into
// dZ's gate channels; G may be S's buffer once S is used.
void sgu_backward_gate(const SguParams& p, const float* dS, const float* Z, int T, int B, int f, const float* F,
                       float* S, float* dF, float* dZ);
void sgu_backward_mix(const SguParams& p, const SguGrads& g, const float* dS, const float* Z, int T, int B, int f,
                      const float* gmean, const float* grstd, const float* F, float* dZ, float* G, float* dF,
                      float* dG);

// ---- tiny_attention.cpp: aMLP's single-head attention of size da over H [M, d].
struct AttnParams {
  const float *qkv_w, *qkv_b;  // [3 da, d], [3 da]
  const float *out_w, *out_b;  // [dout, da], [dout]
  int d, da, dout;
  bool causal;
  const int32_t* lengths;      // [B] or null: keys at t >= lengths[b] are masked
};
struct AttnGrads {
  float *qkv_w, *qkv_b, *out_w, *out_b;
};
// Softmax of row[0, keys) in place, the exponentials summed in double: the scores of
// the forward's rows and of the cached decoder's step (decode_attention) alike.
void softmax_row(float* row, int keys);
// Saves qkv [M, 3 da], P [B, T, T] and O [M, da]; writes A [M, dout].
void tiny_attention_forward(const AttnParams& p, const float* H, int T, int B, float* qkv, float* P, float* O,
                            float* A);
// dH += dA's contribution. Scratch: dO [M, da], dP [T, T], dqkv [M, 3 da].
void tiny_attention_backward(const AttnParams& p, const AttnGrads& g, const float* dA, const float* H, int T, int B,
                             const float* qkv, const float* P, const float* O, float* dH, float* dO, float* dP,
                             float* dqkv);

// ---- patch.cpp: images [B, C, Hi, Wi] to patch rows [n, B, C*ph*pw] (sequence-major,
// patch t = gy * (Wi/pw) + gx, feature c*ph*pw + py*pw + px: a Conv2d weight's order).
// The images are floats, taken as they are, or bytes (pixel values as an IDX file holds
// them), each mapped through its channel's row of `lut` [C, 256] as it is read: a
// quarter of the bytes to hold, draw and send to a device, and the normalisation done by
// the cut itself (the table is the normalisation of byte / 255, so the floats the bytes
// stand for, to the bit: Model's image table).
struct Pixels {
  const float* values = nullptr;
  const uint8_t* bytes = nullptr;
  const float* lut = nullptr;  // with bytes

  static Pixels floats(const float* v) { return {v, nullptr, nullptr}; }
  static Pixels of_bytes(const uint8_t* b, const float* table) { return {nullptr, b, table}; }
};
void extract_patches(Pixels images, int B, int C, int Hi, int Wi, int ph, int pw, float* out);

// ---- embedding.cpp: x[r, :] = E[tokens[r], :] (+ pe[r / B, :] when pe), for the
// M = T * B rows of sequence-major token ids.
void embedding_forward(const float* E, int d, const int32_t* tokens, int M, int B, const float* pe, float* x);
void embedding_backward(const float* dx, int d, const int32_t* tokens, int M, float* dE);
// Sinusoidal table pe[T, d]: pe[t, 2i] = sin(t / 10000^(2i/d)), pe[t, 2i+1] = cos(...).
void sinusoidal_positions(int T, int d, float* pe);

// ---- dropout.cpp: the masks are drawn by counter where they are read (dropout_mask.h).
// y = x * mask over rows [B, d] at position 0 (a classifier's pooled input; the backward
// is the same product: dx = dy * mask; y may be x).
void dropout_apply(const float* x, const DropMask& mask, int B, int d, float* y);
// The block's residual: out[r, c] = x[r, c] + keep[r % B] * mask(r % B, r / B, c) * y[r, c]
// over M = T * B sequence-major rows of d, keep [B] (stochastic depth; null = 1) and the
// mask (inactive = 1) each optional.
void residual_add(const float* x, const float* y, const float* keep, const DropMask& mask, int M, int B, int d,
                  float* out);
// Its backward into the branch: dy = keep[r % B] * mask(r % B, r / B, c) * dout (the
// residual's own path passes dout unchanged).
void residual_branch_backward(const float* dout, const float* keep, const DropMask& mask, int M, int B, int d,
                              float* dy);

// ---- cross_entropy.cpp: mean softmax cross-entropy over M rows of V logits.
// targets[r] < 0 are ignored (not counted in the mean). Returns the mean loss (nats);
// when dlogits is non-null writes d(mean loss)/d logits. Also returns the count of targets.
// mean_over > 0: the mean is over that many targets instead of this call's own, as for one
// piece of a larger batch (gradient accumulation: each row's gradient is then the one it
// has in the whole batch, to the bit).
//
// soft: a training batch's targets as distributions (SoftTargets); without it each row's
// target is its class alone, and the loss and gradient are those of one-hot targets.
struct SoftTargets {
  // Label smoothing: this share of every target's mass is spread evenly over the V
  // classes (PyTorch's cross_entropy(label_smoothing=), timm's).
  float smoothing = 0.f;
  // Mixed rows (mixup, CutMix): row r's target is weight[r] of targets[r] and the rest of
  // second[r] (both >= 0 where targets[r] is; weight in [0, 1]). Both [M], or both null.
  const int32_t* second = nullptr;
  const float* weight = nullptr;
  bool active() const { return smoothing > 0.f || second != nullptr; }
};
// With soft, row r's loss is lse - sum_v q_v logit_v for q = (1 - smoothing) *
// (w e_a + (1 - w) e_b) + smoothing / V, and its gradient softmax - q (over the mean).
double cross_entropy(const float* logits, int M, int V, const int32_t* targets, float* dlogits, int64_t* count,
                     int64_t mean_over = 0, const SoftTargets& soft = {});

// ---- rows.cpp: the block's and heads' row-wise glue, M = T * B rows of d.
// out = x + b (b broadcast over rows): the residual a GEMM then adds onto.
void residual_bias(const float* x, const float* b, int M, int d, float* out);
// out[r] = x[r] + keep[r % B] * h[r]: the stochastic-depth residual.
void residual_keep(const float* x, const float* keep, const float* h, int M, int B, int d, float* out);
// out[r] = keep[r % B] * dx[r].
void scale_rows(const float* keep, const float* dx, int M, int B, int d, float* out);
// pooled[b] = mean over t < lengths[b] (or T) of h[t * B + b]; the backward overwrites
// dh [M, d], zero at padded rows.
void mean_pool_forward(const float* h, int T, int B, int d, const int32_t* lengths, float* pooled);
void mean_pool_backward(const float* dpooled, int T, int B, int d, const int32_t* lengths, float* dh);
// dst[k] = src[rows[k]] for k < K; scatter: dst [M, d] zeroed, then dst[rows[k]] = src[k].
void gather_rows(const float* src, const int32_t* rows, int K, int d, float* dst);
void scatter_rows(const float* src, const int32_t* rows, int K, int M, int d, float* dst);

// ---- decode.cpp: the cached decoder's work for one new token in each of R streams
// (gmlp/decoder.h). Row r is the token at position pos[r] of stream stream[r]; a cache
// holds [streams, n, C], stream s's position i at row s * n + i. On the CPU each row is
// computed in the same order whatever R is and whichever rows are beside it, so a
// stream's results do not depend on the others (a device's products may round
// differently with R).
// x[r] = E[tokens[r]] (+ pe[pos[r]] when pe).
void decode_embed(const float* E, int d, const int32_t* tokens, const int32_t* pos, int R, const float* pe, float* x);
// Y[r, :out] = W[out, in] X[r, :in] + b (+ Y[r] when accumulate); b is required.
void decode_linear(const float* W, int out, int in, const float* X, int R, const float* b, float* Y, bool accumulate);
// LayerNorm of R rows of C channels (rows ldx apart) into row rows[r] of y (row r when
// rows is null), y's rows ldy apart.
void decode_layernorm(const float* x, int ldx, int R, int C, const float* w, const float* b, float eps, float* y,
                      int ldy, const int32_t* rows);
// The causal spatial mix at each row's position over its stream's cached gates
// G [streams, n, g]: with i = pos[r], s = stream[r] and gh = g / heads channels per head,
// F[r, k gh + c] = bias_k[i] + sum_{j <= i} W_k[i, j] G[s, j, k gh + c]. W_k is dense
// [n, n] or Toeplitz [n] (causal), heads wsz floats apart; bias_k [n], heads n apart.
void decode_mix(const float* G, int n, int g, int heads, const float* W, int64_t wsz, bool toeplitz,
                const float* bias, const int32_t* stream, const int32_t* pos, int R, float* F);
// aMLP's tiny attention (p.causal) for each row: writes q|k|v of h[r] (rows of p.d) into
// the cache qkv [streams, n, 3 da] at (s, i), then adds softmax(q K^T / sqrt(da)) V
// Wo^T + bo over the keys j <= i to F[r] (p.dout channels). Scratch: P [R, n],
// O [R, da], A [R, dout].
void decode_attention(const AttnParams& p, const float* h, const int32_t* stream, const int32_t* pos, int R, int n,
                      float* qkv, float* P, float* O, float* A, float* F);

// ---- adamw.cpp: one AdamW update over n values (PyTorch's formulation): p *= decay,
// m = b1 m + (1-b1) g, v = b2 v + (1-b2) g^2, p -= step_size * m / (sqrt(v)/bc2_sqrt + eps).
// The update changes nothing unless guard[0, guards) are finite (step_guard.h: the
// step's loss and its gradients' sum of squares, where the update runs).
struct AdamWStep {
  float b1, b2, eps, step_size, bc2_sqrt, decay;
  const double* guard = nullptr;
  int guards = 0;
  // Where only some of the n values decay (the weight matrices, not the norms and
  // biases): those in [decay_bounds[2k], decay_bounds[2k + 1]) take `decay`, the others
  // none; offsets from params, ascending, n_decay_bounds even, in the backend's memory.
  // Null: every value takes `decay`. One call (on a GPU, one launch) for the whole
  // buffer, not one per run of tensors.
  const uint64_t* decay_bounds = nullptr;
  int n_decay_bounds = 0;
  // Global-norm clipping taken in the update: each gradient scaled by
  // clip_factor(*clip_sum_squares, max_norm) (step_guard.h) as it is read, the gradient
  // buffer left as the backward wrote it. A pass over the gradients less than clipping
  // them first (clip_scale), with the same bits. Null: no clipping.
  const double* clip_sum_squares = nullptr;
  float max_norm = 0.f;
};
void adamw_update(float* params, const float* grads, float* m, float* v, size_t n, const AdamWStep& s);
// Sum of x[i]^2 in double, in an order fixed by the thread count; x *= c; x scaled as
// global-norm clipping to max_norm scales it, given x's sum of squares (step_guard.h).
double sum_squares(const float* x, size_t n);
void scale(float* x, size_t n, float c);
void clip_scale(float* x, size_t n, double sum_squares, float max_norm);
// avg = fma(rest, x, avg * decay), elementwise: one rounding for the product and sum, so
// every backend gives the same bits whatever its compiler fuses (timm's ModelEma computes
// avg * decay + (1 - decay) * x).
void ema_update(float* avg, const float* x, size_t n, float decay, float rest);

}  // namespace gmlp::ops
