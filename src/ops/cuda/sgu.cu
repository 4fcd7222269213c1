// The spatial gating unit on the device (sgu.cpp's steps, the same order and aliasing
// rules): LayerNorm of the gate, padded rows zeroed, the per-head spatial products,
// then bias, aMLP's attention and the combine in one elementwise pass. Given U
// (ops.h's ZInput), every kernel takes Z = GELU(U + bias) as it reads U, and the
// backward writes dU, GELU's derivative folded in, and sums its columns into the bias's
// gradient as it writes them (the gate's columns in the LayerNorm's backward, the split
// form's others in the pass that writes them), as the CPU does.
//
// Under --precision bf16 the block hands the ops a Bf16Store (ops.h): U and F saved
// for the backward as bf16, half the bytes of the two largest per-layer tensors. Every
// kernel below is a template over how U and F are held, float or bf16 bits; the
// values are widened to float as they are read, and all arithmetic stays float.
#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <type_traits>

#include "gmlp/error.h"
#include "ops/bf16.h"
#include "ops/fast_div.h"
#include "ops/cuda/common.cuh"
#include "ops/cuda/gelu.cuh"
#include "ops/cuda/layernorm.cuh"
#include "ops/cuda/mix_tiles.cuh"

namespace gmlp::cuda {
namespace {

struct Dims {
  int g, goff, gh;
};
Dims dims(const ops::SguParams& p, int f) {
  const int g = p.kind == Sgu::split ? f / 2 : f;
  return {g, p.kind == Sgu::split ? f / 2 : 0, g / p.heads};
}

__device__ inline float combine(Sgu kind, float z, float f) {
  switch (kind) {
    case Sgu::split:
    case Sgu::multiplicative:
      return z * f;
    case Sgu::additive:
      return z + f;
    default:
      return f;
  }
}

// U + bias at channel ch of what the op was given, from U's value there as held: the
// argument of GELU, or Z itself (ops.h's ZInput).
template <typename TU>
__device__ inline float plus_bias(const ops::ZInput& zin, TU held, int ch) {
  const float v = value(held);
  return zin.bias ? v + zin.bias[ch] : v;
}

// Z's values from what the op was given, rows ld apart, from channel off on.
// The warp LayerNorms load a row's U first, then add the bias (a load that hits the
// cache: every row reads the same) and take GELU (layernorm.cuh's XPlain).
template <typename TU>
struct ZIn {
  const TU* u;
  int ld, off;
  ops::ZInput zin;
  using Raw = TU;
  template <int N, typename Slots>
  __device__ void load_row(int64_t r, Slots s, int C, Raw (&raw)[N]) const {
    const TU* row = u + r * ld + off;
    GMLP_UNROLL
    for (int j = 0; j < N; ++j) raw[j] = row[s.loaded(j, C)];
  }
  __device__ float value(Raw v, int c) const { return z_from(zin, plus_bias(zin, v, off + c)); }
  // Z and dZ/dU at once (dZ/dU 1 where Z is U): for the gate LayerNorm's backward, whose
  // store (DzGate) takes dZ/dU from here rather than from its own read of U.
  __device__ GeluGrad value_and_grad(Raw v, int c) const {
    const float x = plus_bias(zin, v, off + c);
    return zin.gelu ? gelu_and_grad(x, zin.form == Gelu::tanh) : GeluGrad{x, 1.f};
  }
  __device__ float operator()(int64_t r, int c) const { return value(u[r * ld + off + c], c); }
};

// F's value at element i (row r, channel c): as held, plus the spatial bias of r's
// position where F is held without it (ops.h's Bf16Store::F_unbiased; bias null
// otherwise). The bias's position and head by multiplies (ops/fast_div.h), not per
// value divisions.
template <typename TF>
struct FIn {
  const TF* F;
  const float* bias;
  ops::FastDiv B, gh;  // r / B, r's position; c / gh, c's head
  int n;
  __device__ float operator()(int64_t i, int r, int c) const { return with(F[i], r, c); }
  __device__ float with(TF held, int r, int c) const {  // F[i] as loaded
    const float v = value(held);
    return bias ? v + bias[int(gh.div(uint32_t(c))) * n + min(int(B.div(uint32_t(r))), n - 1)] : v;
  }
};

// The gate's dL/dZ into dZ (over U when they alias, and held as U is): the LayerNorm's,
// plus the direct path of S = Z + F or Z * F, times GELU'(U) when given U.
template <typename TU, typename TF>
struct DzGate {
  TU* dz;
  const TU* u;
  int ld, off, g;
  ops::ZInput zin;
  int direct;  // 0: none, 1: + dS (additive), 2: + dS * F (multiplicative)
  const TU* dS;
  FIn<TF> F;
  // U, which the store reads, loaded first by the warp LayerNorm (the direct path's
  // terms, the ablations' alone, are read as the store takes them).
  using Pre = TU;
  template <int N, typename Slots>
  __device__ void load_row(int64_t r, Slots s, int C, Pre (&pre)[N]) const {
    const TU* row = u + r * ld + off;
    GMLP_UNROLL
    for (int j = 0; j < N; ++j) pre[j] = row[s.loaded(j, C)];
  }
  __device__ float store(Pre uraw, int64_t r, int c, float d) const {
    return store_with_grad(zin.gelu ? gelu_grad(plus_bias(zin, uraw, off + c), zin.form == Gelu::tanh) : 1.f, r, c,
                           d);
  }
  // The same with dZ/dU given: the row routine's read of U through the gate's ZIn (the
  // same U, ld, off and zin: backward_mix_as builds both) took it with Z (ZIn::value_and_grad).
  __device__ float store_with_grad(float zgrad, int64_t r, int c, float d) const {
    const int64_t i = r * g + c;
    if (direct) d += direct == 2 ? value(dS[i]) * F(i, int(r), c) : value(dS[i]);
    return hold(dz + r * ld + off + c, zin.gelu ? d * zgrad : d);
  }
  __device__ float operator()(int64_t r, int c, float d) const { return store(u[r * ld + off + c], r, c, d); }
  void column_sums(int M, int C, float* sum) const { colsum_add(dz + off, M, C, ld, sum); }
};

// F += bias (+ extra), in place, held as F holds it (unless keep is false: F stays the
// products, Bf16Store::F_unbiased); S = combine(Z, F + bias (+ extra)), held as U is. S
// may be the gate buffer (dead by now). A thread per channel c of R rows apart by the
// grid's rows of threads (channels_by_rows), from its own row (then every R-th of
// those): no 64-bit index divided per value (a thread per value and its row and
// channel divided out of a 64-bit index took 151 µs of an H200's gMLP-S/16 step where
// the bytes take 27, docs/bench-gpu.md). fin adds the bias to F. V adjacent channels a
// thread, each row's V values in one access (common.cuh's load_vec), where the rows
// allow (vec_fits<2>).
template <int V, typename TU, typename TF>
__global__ void k_bias_combine(Sgu kind, ZIn<TU> z, TF* F, FIn<TF> fin, int M, int g, const float* extra, bool keep,
                               TU* S) {
  const int c = column() * V;
  if (c >= g) return;
  const int step = int(row_stride());
  constexpr int R = kRowBatch / V;
  for (int r0 = int(first_row()); r0 < M; r0 += R * step) {
    TF fr[R][V];
    TU ur[R][V];
    float ex[R][V];
    GMLP_UNROLL
    for (int k = 0; k < R; ++k) {  // rows past M load row M - 1, and drop it
      const int64_t i = int64_t(min(r0 + k * step, M - 1)) * g + c;
      load_vec<V>(F + i, fr[k]);
      load_vec<V>(z.u + int64_t(min(r0 + k * step, M - 1)) * z.ld + z.off + c, ur[k]);
      if (extra) {
        load_vec<V>(extra + i, ex[k]);
      } else {
        GMLP_UNROLL
        for (int v = 0; v < V; ++v) ex[k][v] = 0.f;
      }
    }
    GMLP_UNROLL
    for (int k = 0; k < R; ++k) {
      const int r = r0 + k * step;
      if (r >= M) break;
      const int64_t i = int64_t(r) * g + c;
      TF fo[V];
      TU so[V];
      GMLP_UNROLL
      for (int v = 0; v < V; ++v) {
        const float sum = fin.with(fr[k][v], r, c + v) + ex[k][v];
        round_as(combine(kind, z.value(ur[k][v], c + v), keep ? round_as(sum, fo[v]) : sum), so[v]);
      }
      if (keep) store_vec<V>(F + i, fo);
      store_vec<V>(S + i, so);
    }
  }
}

// The bias + combine pass in the spatial product's epilogue (mix_tiles.cuh), for the
// bf16 forward whose F is held without its bias and takes no attention: F[t, col] as
// the product rounds it, and S = combine(Z, F + bias) from it, k_bias_combine's
// arithmetic over the values it would have read back, 8 channels a thread. Rows are
// time-major: F's column col of position t is channel col % g of row t B + col / g.
struct CombineEpilogue {
  Sgu kind;
  ZIn<uint16_t> z;
  FIn<uint16_t> fin;
  uint16_t *F, *S;
  int64_t ld;  // F's and S's rows, B g
  int B, g;
  ops::FastDiv by_g;
  struct Loaded {
    uint16_t u[8];  // U at F's 8 values
  };
  __device__ Loaded load(int t, int64_t col) const {
    const int b = int(by_g.div(uint32_t(col))), c = int(col) - b * g;
    Loaded l;
    load_vec<8>(z.u + int64_t(t * B + b) * z.ld + z.off + c, l.u);
    return l;
  }
  __device__ void operator()(int t, int64_t col, const float (&x)[8], const Loaded& l) const {
    const int b = int(by_g.div(uint32_t(col))), c = int(col) - b * g, r = t * B + b;
    uint16_t fo[8], so[8];
    GMLP_UNROLL
    for (int e = 0; e < 8; ++e) {
      round_as(x[e], fo[e]);
      const float sum = fin.with(fo[e], r, c + e) + 0.f;  // k_bias_combine's, with no attention to add
      round_as(combine(kind, z.value(l.u[e], c + e), sum), so[e]);
    }
    const int64_t i = int64_t(t) * ld + col;
    store_vec<8>(F + i, fo);
    store_vec<8>(S + i, so);
  }
};

// Whether a pass over rows of g channels may take them V at a time (in pairs, or 16
// bytes): g a multiple of V, and each of its row pointers (their rows' lengths ld too: g,
// or U's f) aligned for V values.
template <int V, typename... P>
bool vec_fits(int g, int ld, const P*... p) {
  return g % V == 0 && ld % V == 0 && (... && (!p || vec_aligned<V>(p)));
}

// The launch of a kernel taking a thread per V channels of kRowBatch / V rows at once
// (given its channel groups, g / V; common.cuh's columns_by_rows).
inline Launch channels_by_rows(int groups, int M, int V = 1) { return columns_by_rows(groups, M, kRowBatch / V); }

__global__ void k_combine(Sgu kind, ZIn<float> z, const float* F, int M, int g, float* S) {
  const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= int64_t(M) * g) return;
  S[i] = combine(kind, z(i / g, int(i % g)), F[i]);
}

// S = combine(Z, F) again (when S is given); dF = dS * Z1 (split, multiplicative) or dS,
// into dF32 as floats too when given (aMLP's attention under bf16); split: dZ1 = dS * F
// (times GELU'(U1) when given U), added to s[0] as held (the in-projection's bias
// gradient: a column sum over the pass, column_chunk_sums); dS, S, dF and dZ held as U
// is. Each element is read, then written, by one thread: dZ may be U, and dF may be F
// (when they are floats). V adjacent channels a thread (column_sums_in_lanes' width),
// each row's V values in one access, where the rows allow (vec_fits<2>).
template <typename TU, typename TF, int V>
struct BackGate {
  static constexpr int kWidth = V;
  Sgu kind;
  const TU* dS;
  ZIn<TU> z;
  FIn<TF> F;
  int g;
  TU *S, *dZ, *dF;
  float* dF32;
  // Row r's loads at channels c to c + V - 1, which column_sums_in_lanes issues for
  // kRowBatch / V rows before it applies them: dS, F and U as held.
  struct Pre {
    TU ds[V];
    TF f[V];
    TU u[V];
  };
  __device__ Pre load(int r, int c) const {
    const int64_t i = int64_t(r) * g + c;
    Pre p;
    load_vec<V>(dS + i, p.ds);
    load_vec<V>(F.F + i, p.f);
    load_vec<V>(z.u + int64_t(r) * z.ld + c, p.u);
    return p;
  }
  __device__ void apply(const Pre& p, int r, int c, float* s) const {
    const int64_t i = int64_t(r) * g + c;
    TU so[V], dfo[V], dzo[V];
    float df32[V];
    GMLP_UNROLL
    for (int v = 0; v < V; ++v) {
      const float u = plus_bias(z.zin, p.u[v], c + v);
      const float ds = value(p.ds[v]), fv = F.with(p.f[v], r, c + v);
      // The split form needs GELU'(U) too: GELU and GELU' from one erf.
      const GeluGrad zg = kind == Sgu::split && z.zin.gelu ? gelu_and_grad(u, z.zin.form == Gelu::tanh)
                                                           : GeluGrad{z_from(z.zin, u), 1.f};
      // Every output rounded, stored only where wanted (the rounding is a few instructions).
      round_as(combine(kind, zg.z, fv), so[v]);
      const float df = (kind == Sgu::split || kind == Sgu::multiplicative) ? ds * zg.z : ds;
      round_as(df, dfo[v]);
      df32[v] = df;
      const float dz = round_as(z.zin.gelu ? ds * fv * zg.dz : ds * fv, dzo[v]);
      if (kind == Sgu::split) s[v] += dz;
    }
    if (S) store_vec<V>(S + i, so);
    store_vec<V>(dF + i, dfo);
    if (dF32) store_vec<V>(dF32 + i, df32);
    if (kind == Sgu::split) store_vec<V>(dZ + int64_t(r) * z.ld + c, dzo);
  }
};

template <typename TU, typename TF, int V>
__global__ void k_back_gate(BackGate<TU, TF, V> pass, int M, int rows_per, float* part, ColumnFinish dbias) {
  column_sums_finished<1>(M, pass.g, rows_per, pass, part, dbias);
}

// Bias gradient, in two fixed-order stages in double. First a block per (position t,
// head k, piece z): the sum of dF over the piece's rows of t (b = z, z + pieces, ...
// of the B) and the head's gh columns. Then, in the launch's last block to arrive (an
// atomic count, as column_sums_finished's), a thread per (head k, entry i): the sums of
// its positions, t = i, or t >= n - 1 for the last entry (a Toeplitz model run past its
// window), each position's pieces in order (a launch of its own until session 45: 3.3
// µs and a launch's gap a layer on an H100, for about a thousand doubles).
// A block per position alone (196 blocks for gMLP-S/16, each thread a long chain of
// loads) took 170 µs of an H200's step where the bytes take 9 (docs/bench-gpu.md). Each
// thread taking its channels in turn, a value a load, and each channel's rows four at a
// time, took 42 µs of an H100's gMLP-S/16 step, then 24.8 (session 42), where the bytes
// take 11.5: a warp's load was 64 bytes of bf16, and a multiprocessor had about 16 KB of
// loads in flight. Now the block's threads take the piece's (row, V channels) items in
// turn, V channels a 16-byte load where the head's columns allow (eight bf16 or four
// floats, Vec), kBiasRows items a thread at once, so that a row's 96 loads of 16 bytes
// (S/16's head of 768 bf16) spread over the block rather than a row's 768 values over
// its 256 threads. On the CUDA emulator two items at once and two pieces a position
// (below), so that the tests' small batches take the batched loads and one left over.
#if defined(GMLP_CUDA_EMULATED)
constexpr int kBiasRows = 2;
#else
constexpr int kBiasRows = 4;
#endif
__device__ inline void bias_grad_finish(const double* part, int T, int heads, int n, int pieces, float* db) {
  for (int idx = int(threadIdx.x); idx < heads * n; idx += int(blockDim.x)) {
    const int k = idx / n, i = idx % n;
    const int t1 = i == n - 1 ? T : min(T, i + 1);
    double s = 0.0;
    for (int t = i; t < t1; ++t)
      for (int z = 0; z < pieces; ++z) s += __ldcg(part + (int64_t(k) * T + t) * pieces + z);
    db[k * n + i] += float(s);
  }
}

template <typename E, int V>
__global__ void k_bias_grad_rows(const E* dF, int B, int g, ops::FastDiv groups, double* part, unsigned* arrived,
                                 int n, float* db) {
  __shared__ double sh[32];
  const int t = int(blockIdx.x), k = int(blockIdx.y), z = int(blockIdx.z), pieces = int(gridDim.z);
  const int n_groups = int(groups.d);  // a head's gh / V loads a row
  const E* head = dF + int64_t(t) * B * g + int64_t(k) * n_groups * V;  // row (t, 0)'s head k
  const int items = (B - z + pieces - 1) / pieces * n_groups;           // rows b = z + j pieces
  double s = 0.0;
  for (int i0 = int(threadIdx.x); i0 < items; i0 += kBiasRows * int(blockDim.x)) {
    E v[kBiasRows][V];
    GMLP_UNROLL
    for (int j = 0; j < kBiasRows; ++j) {  // items past the end load the last, and drop it
      const uint32_t i = uint32_t(min(i0 + j * int(blockDim.x), items - 1)), row = groups.div(i);
      load_vec<V>(head + int64_t(z + int(row) * pieces) * g + int64_t(i - row * uint32_t(n_groups)) * V, v[j]);
    }
    GMLP_UNROLL
    for (int j = 0; j < kBiasRows; ++j) {
      if (i0 + j * int(blockDim.x) >= items) break;
      GMLP_UNROLL
      for (int e = 0; e < V; ++e) s += value(v[j][e]);
    }
  }
  s = block_sum(s, sh);
  __shared__ unsigned before;  // blocks that arrived before this one
  if (threadIdx.x == 0) {
    part[(int64_t(k) * gridDim.x + t) * pieces + z] = s;
    __threadfence();
    before = atomicAdd(arrived, 1u);
  }
  __syncthreads();
  if (before + 1 != gridDim.x * gridDim.y * gridDim.z) return;
  __threadfence();
  bias_grad_finish(part, int(gridDim.x), int(gridDim.y), n, pieces, db);
  if (threadIdx.x == 0) *arrived = 0;  // for the next launch
}

// Pieces per position of the bias gradient's first stage: about 1,024 blocks in all
// (eight per multiprocessor of an H100 or H200), at most one per row of the batch; on
// the CUDA emulator two (above).
inline int bias_grad_pieces(int T, int heads, int B) {
#if defined(GMLP_CUDA_EMULATED)
  (void)T, (void)heads;
  return std::min(B, 2);
#else
  return std::max(1, std::min(B, (1024 + T * heads - 1) / (T * heads)));
#endif
}

// How the backward reads F (FIn): with the bias added where F is held without it.
template <typename TF>
FIn<TF> f_in(const ops::SguParams& p, int B, const Dims& d, const TF* F) {
  return {F, p.store.F_unbiased ? p.bias : nullptr, ops::FastDiv(uint32_t(B)), ops::FastDiv(uint32_t(d.gh)), p.n};
}

// The spatial products: one over every row's gate channels, or per head one batched
// over the B rows (the head's gh columns of each, g apart), with that head's W.
// fn(W, dW, off, cols, count, w16): w16 the head's bf16 copies of W where made
// (ops.h's spatial_w16_head), or null.
template <typename Fn>
void for_each_head(const ops::SguParams& p, float* dW, int T, int B, const Dims& d, Fn fn) {
  auto copies = [&](int k) { return p.w16 ? p.w16 + k * ops::spatial_w16_head(T) : nullptr; };
  if (p.heads == 1) {
    fn(p.W, dW, 0, B * d.g, 1, copies(0));
    return;
  }
  for (int k = 0; k < p.heads; ++k)
    fn(p.W + k * p.w_head_stride, dW ? dW + k * p.w_head_stride : nullptr, k * d.gh, d.gh, B, copies(k));
}

// Whether the bf16 forward takes the spatial product and the combine together, on its
// own tiles (CombineEpilogue): where it applies (one head, F held without its bias, no
// attention, every row 16-byte aligned, S apart from G: the gate may live in S's buffer,
// block.h, and a block writes its tile of S while the blocks of the other positions
// still read those rows of G) and GMLP_CUDA_SPATIAL_COMBINE is "on". Off by default: on
// an H200 (session 55) the fused kernel took 233 us a call in gMLP-S/16's step, and the
// step ran 27.1 ms with it against 23.7 without, 115 us a layer: cuBLAS's product and the
// bias + combine pass took about 118 together (docs/bench-gpu.md).
bool combine_in_product(const ops::SguParams& p, int T, int f, const Dims& d, const uint16_t* U, const uint16_t* F,
                        const uint16_t* S, const float* extra, const MixOperands& o) {
  const uintptr_t bytes = uintptr_t(T) * uintptr_t(o.N) * sizeof(uint16_t);  // S's and G's, [T, B g]
  const uintptr_t s = reinterpret_cast<uintptr_t>(S), g = reinterpret_cast<uintptr_t>(o.G);
  const bool apart = s + bytes <= g || g + bytes <= s;
  return spatial_combine_on() && p.heads == 1 && !extra && p.store.F_unbiased && d.g % 8 == 0 && f % 8 == 0 &&
         vec_aligned<8>(U) && vec_aligned<8>(F) && vec_aligned<8>(S) && apart && o.N < (int64_t(1) << 31) &&
         mix_then_fits(o);
}

// The ops' bodies, over how U and F are held (TU, TF: float, or uint16_t for bf16); S,
// G, dS, dF, dG and dU are held as U is. The spatial products write F as it is held
// (under bf16 their float sums rounded once), and the bias pass adds the bias (and aMLP's
// attention) to it in place, holding the sum as F is held (under bf16 F is then rounded
// twice), or, where F is held without its bias (Bf16Store::F_unbiased), leaves F as the
// products and every reader adds the bias in float (FIn), as autocast's sum would be.
template <typename TU, typename TF>
void forward_as(const ops::SguParams& p, const TU* U, int T, int B, int f, TU* S, float* gmean, float* grstd,
                TF* F, TU* G, const float* extra) {
  const Dims d = dims(p, f);
  const int M = T * B, ld = B * d.g;
  layernorm_forward_with(ZIn<TU>{U, f, d.goff, p.z}, M, d.g, p.norm_w, p.norm_b, p.eps, rows_out(G, d.g), gmean,
                         grstd);
  zero_padding(p.lengths, T, B, d.g, G);
  if constexpr (std::is_same_v<TU, uint16_t> && std::is_same_v<TF, uint16_t>) {
    const MixOperands o{nullptr, padded_row<uint16_t>(T), G, ld, T, int64_t(B) * d.g, p.causal};
    if (combine_in_product(p, T, f, d, U, F, S, extra, o)) {
      MixOperands on = o;
      on.W = spatial_w_bf16_plain(p.W, p.ldw, T, p.causal, p.w16);
      if (!vec_aligned<8>(on.W)) throw Error("sgu_forward: the bf16 copy of W is not 16-byte aligned");
      // F held without its bias (combine_in_product): f_in adds it as F is read.
      mix_then(on, CombineEpilogue{p.kind, ZIn<TU>{U, f, 0, p.z}, f_in(p, B, d, static_cast<const TF*>(F)), F, S, ld, B,
                                   d.g, ops::FastDiv(uint32_t(d.g))});
      check_launch("sgu spatial product + bias + combine");
      return;
    }
  }
  for_each_head(p, nullptr, T, B, d, [&](const float* W, float*, int off, int cols, int count, const uint16_t* w16) {
    spatial_mix_forward(W, p.ldw, p.causal, T, cols, G + off, ld, F + off, count, d.g, w16);
  });
  if (p.store.F_unbiased && extra) throw Error("sgu_forward: F held without its bias takes no attention");
  FIn<TF> fin = f_in(p, B, d, static_cast<const TF*>(F));
  fin.bias = p.bias;  // the combine adds it whether or not F keeps it
  const ZIn<TU> z{U, f, 0, p.z};
  const bool keep = !p.store.F_unbiased;
  if (vec_fits<2>(d.g, f, U, F, extra, S)) {
    const Launch l = channels_by_rows(d.g / 2, M, 2);
    GMLP_LAUNCH(k_bias_combine<2>, l.grid, l.block)(p.kind, z, F, fin, M, d.g, extra, keep, S);
  } else {
    const Launch l = channels_by_rows(d.g, M);
    GMLP_LAUNCH(k_bias_combine<1>, l.grid, l.block)(p.kind, z, F, fin, M, d.g, extra, keep, S);
  }
  check_launch("sgu bias + combine");
}

template <typename TU, typename TF>
void backward_gate_as(const ops::SguParams& p, const TU* dS, const TU* U, int T, int B, int f, const TF* F,
                      TU* S, TU* dF, float* dF32, TU* dZ) {
  const Dims d = dims(p, f);
  const int M = T * B;
  const int rows_per = rows_per_chunk(M), chunks = (M + rows_per - 1) / rows_per;
  const bool dbias = p.kind == Sgu::split && p.z.dbias;  // dZ1's columns
  float* part = dbias ? static_cast<float*>(scratch(sizeof(float) * size_t(chunks) * d.g)) : nullptr;
  const ZIn<TU> z{U, f, 0, p.z};
  const FIn<TF> fin = f_in(p, B, d, F);
  // dZ1's column sums finished in the same launch (column_sums_finished).
  auto finish = [&](const dim3& grid) { return dbias ? column_finish(int(grid.x), p.z.dbias) : ColumnFinish{}; };
  if (vec_fits<2>(d.g, f, dS, U, F, S, dZ, dF, dF32)) {
    const dim3 grid = column_sum_grid(d.g, chunks, 2);
    GMLP_LAUNCH(k_back_gate, grid, column_sum_block())(BackGate<TU, TF, 2>{p.kind, dS, z, fin, d.g, S, dZ, dF, dF32},
                                                       M, rows_per, part, finish(grid));
  } else {
    const dim3 grid = column_sum_grid(d.g, chunks);
    GMLP_LAUNCH(k_back_gate, grid, column_sum_block())(BackGate<TU, TF, 1>{p.kind, dS, z, fin, d.g, S, dZ, dF, dF32},
                                                       M, rows_per, part, finish(grid));
  }
  check_launch("sgu backward (gate)");
}

template <typename TU, typename TF>
void backward_mix_as(const ops::SguParams& p, const ops::SguGrads& g, const TU* dS, const TU* U, int T, int B,
                     int f, const float* gmean, const float* grstd, const TF* F, TU* dZ, TU* G, TU* dF, TU* dG) {
  const Dims d = dims(p, f);
  const int M = T * B, ld = B * d.g;
  const ZIn<TU> gate{U, f, d.goff, p.z};
  if (!p.store.G_kept) {
    layernorm_apply_with(gate, M, d.g, p.norm_w, p.norm_b, gmean, grstd, rows_out(G, d.g));
    check_launch("sgu gate recomputed");
    zero_padding(p.lengths, T, B, d.g, G);
  }
  for_each_head(p, g.W, T, B, d, [&](const float* W, float* dW, int off, int cols, int count, const uint16_t* w16) {
    spatial_mix_backward(W, p.ldw, p.causal, T, cols, G + off, dF + off, ld, dG + off, dW, count, d.g, w16);
  });
  zero_padding(p.lengths, T, B, d.g, dG);
  const int pieces = bias_grad_pieces(T, p.heads, B);
  double* part = static_cast<double*>(scratch(sizeof(double) * size_t(T) * p.heads * pieces));
  const dim3 grid(unsigned(T), unsigned(p.heads), unsigned(pieces));
  constexpr int kVec = int(16 / sizeof(TU));  // dF is held as U is
  unsigned* arrived = zeroed_counters(1);
  if (vec_fits<kVec>(d.gh, d.g, dF))
    GMLP_LAUNCH((k_bias_grad_rows<TU, kVec>), grid, kThreads)(dF, B, d.g, ops::FastDiv(uint32_t(d.gh / kVec)), part,
                                                              arrived, p.n, g.bias);
  else
    GMLP_LAUNCH((k_bias_grad_rows<TU, 1>), grid, kThreads)(dF, B, d.g, ops::FastDiv(uint32_t(d.gh)), part, arrived,
                                                           p.n, g.bias);
  check_launch("sgu bias gradient");
  const int direct = p.kind == Sgu::multiplicative ? 2 : p.kind == Sgu::additive ? 1 : 0;
  // The gate's columns of dU summed into the in-projection's bias as they are written.
  layernorm_backward_with(dG, d.g, gate, gmean, grstd, p.norm_w, M, d.g,
                          DzGate<TU, TF>{dZ, U, f, d.goff, d.g, p.z, direct, dS, f_in(p, B, d, F)}, g.norm_w,
                          g.norm_b,
                          p.z.dbias ? p.z.dbias + d.goff : nullptr);
}

}  // namespace

void sgu_forward(const ops::SguParams& p, const float* Z, int T, int B, int f, float* S, float* gmean, float* grstd,
                 float* F, float* G, const float* extra) {
  if (int64_t(T) * B <= 0) return;  // no launch of an empty grid
  if (!p.store.on()) return forward_as(p, Z, T, B, f, S, gmean, grstd, F, G, extra);
  // U as the in-projection's bf16 product wrote it (ops.h): the forward computes from
  // what the backward will read.
  forward_as(p, static_cast<const uint16_t*>(p.store.u), T, B, f, p.store.S, gmean, grstd, p.store.F, p.store.G,
             extra);
}

void sgu_combine(Sgu kind, const float* Z, int ldz, const float* F, int M, int g, float* S) {
  GMLP_LAUNCH(k_combine, blocks_for(int64_t(M) * g), kThreads)(kind, ZIn<float>{Z, ldz, 0, {}}, F, M, g, S);
  check_launch("sgu combine");
}

void sgu_backward_gate(const ops::SguParams& p, const float* dS, const float* Z, int T, int B, int f, const float* F,
                       float* S, float* dF, float* dZ) {
  if (int64_t(T) * B <= 0) return;  // no launch of an empty grid
  if (p.store.on())  // S, dF (and floats into dF where given) and dU over U, in bf16 (ops.h)
    backward_gate_as(p, static_cast<const uint16_t*>(p.store.dS), static_cast<const uint16_t*>(p.store.u), T, B, f,
                     static_cast<const uint16_t*>(p.store.F), S ? p.store.S : nullptr, p.store.dF, dF, p.store.u);
  else
    backward_gate_as(p, dS, Z, T, B, f, F, S, dF, static_cast<float*>(nullptr), dZ);
}

void sgu_backward_mix(const ops::SguParams& p, const ops::SguGrads& g, const float* dS, const float* Z, int T, int B,
                      int f, const float* gmean, const float* grstd, const float* F, float* dZ, float* G, float* dF,
                      float* dG) {
  if (int64_t(T) * B <= 0) return;  // no launch of an empty grid
  if (p.store.on())
    backward_mix_as(p, g, static_cast<const uint16_t*>(p.store.dS), static_cast<const uint16_t*>(p.store.u), T, B,
                    f, gmean, grstd, static_cast<const uint16_t*>(p.store.F), p.store.u, p.store.G, p.store.dF,
                    p.store.dG);
  else
    backward_mix_as(p, g, dS, Z, T, B, f, gmean, grstd, F, dZ, G, dF, dG);
}

bool spatial_combine_on() {
  const char* v = std::getenv("GMLP_CUDA_SPATIAL_COMBINE");
  if (!v || !*v || std::strcmp(v, "off") == 0) return false;
  if (std::strcmp(v, "on") == 0) return true;
  throw Error("GMLP_CUDA_SPATIAL_COMBINE: '" + std::string(v) + "' is not on or off");
}

}  // namespace gmlp::cuda
