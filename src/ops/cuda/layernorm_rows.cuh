#pragma once
// LayerNorm's rows held in registers (layernorm.cuh has the ops and the rows too wide
// for this): a thread takes its slots of a row, channels first, first + stride, ... (a
// warp's lanes: stride 32; a block's threads: its size), all of the row's loads issued
// before any arithmetic, the row's sums those of the warp or the block. What x is and
// where dx goes are the caller's (XIn, Out: the generic op's or the SGU's gate).
#include <type_traits>

#include "ops/cuda/common.cuh"

namespace gmlp::cuda {

constexpr int kRowThreads = 128;  // a warp-per-row kernel's blocks: four rows
constexpr int kHeldThreads = 256;  // a block-per-row kernel's

// A thread's slots of a row: channel(j) = first + Stride j (Stride 32: a warp's lanes;
// kHeldThreads or kGateRowThreads: a block's threads). A slot past C loads channel
// C - 1 (any of the row would do) and drops it, so that no load is conditional. Full:
// the row fills every slot (C = N Stride, as every row of the bench's models does), so
// that no slot is clamped or tested, and each load's address is the row's plus a constant: otherwise a
// slot's clamp, test and 64-bit address took some twenty PTX instructions of the sixty
// to ninety a value of the SGU's gate LayerNorm (a row's GELU and GELU' included).
template <int Stride, bool Full>
struct RowSlots {
  int first;
  __device__ int channel(int j) const { return first + Stride * j; }
  __device__ bool in(int j, int C) const { return Full || channel(j) < C; }
  __device__ int loaded(int j, int C) const { return Full ? channel(j) : min(channel(j), C - 1); }
};

// Each input is taken in two steps, load_row (every memory read of a thread's slots,
// issued together) and value (the arithmetic on what was loaded): with the loads of a
// row behind the arithmetic of the channel before (the SGU's gate: GELU between them,
// and its branches), a warp waited on each load in turn, and the gate LayerNorm's
// backward took 790 µs of an H100's gMLP-S/16 step where its bytes take 50
// (docs/bench-gpu.md). operator() is the two at once. x as it is in memory, rows ld
// apart:
struct XPlain {
  const float* x;
  int ld;
  using Raw = float;
  template <int N, typename Slots>
  __device__ void load_row(int64_t r, Slots s, int C, Raw (&raw)[N]) const {
    const float* row = x + r * ld;
    GMLP_UNROLL
    for (int j = 0; j < N; ++j) raw[j] = row[s.loaded(j, C)];
  }
  __device__ float value(Raw v, int) const { return v; }
  __device__ float operator()(int64_t r, int c) const { return x[r * ld + c]; }
};

// Where the normalised rows go: floats, rows ld apart, row r to row rows[r] when rows is
// given (the decoder's gate cache);
struct YPlain {
  float* y;
  int ld;
  const int32_t* rows = nullptr;
  __device__ void operator()(int64_t r, int c, float v) const { y[(rows ? int64_t(rows[r]) : r) * ld + c] = v; }
};
// or bf16 bits, rows ld apart, and the floats as well where y is given: the block
// LayerNorm's output under bf16, read by bf16 products alone (and, as floats, by aMLP's
// attention).
struct YBf16 {
  uint16_t* y16;
  float* y;
  int ld;
  __device__ void operator()(int64_t r, int c, float v) const {
    const int64_t i = r * ld + c;
    hold(y16 + i, v);
    if (y) y[i] = v;
  }
};

// Rows ld apart as y holds them: floats, or bf16 bits.
inline YPlain rows_out(float* y, int ld) { return {y, ld}; }
inline YBf16 rows_out(uint16_t* y, int ld) { return {y, nullptr, ld}; }

// Whether x is formed as it is read and written back (XIn::settle(r, c, v): the
// residual stream of the block before, layernorm.cu's XKeepResidual).
template <typename XIn>
constexpr bool settles = requires(const XIn& x) { x.settle(int64_t(0), 0, 0.f); };

// Row r's forward over a thread's N slots of it, sum(v) the row's sum of v over every
// thread taking the row: mean and variance in two passes over registers, as the CPU op
// takes them. Gives back the mean and 1 / sigma.
template <int N, typename XIn, typename Slots, typename YOut, typename Sum>
__device__ inline float2 ln_forward_slots(XIn xin, int64_t r, int C, Slots s, const float* w, const float* b,
                                          float eps, const YOut& out, const Sum& sum) {
  typename XIn::Raw raw[N];
  xin.load_row(r, s, C, raw);
  float v[N];
  float t = 0.f;
  GMLP_UNROLL
  for (int j = 0; j < N; ++j) {
    v[j] = s.in(j, C) ? xin.value(raw[j], s.channel(j)) : 0.f;
    t += v[j];
  }
  if constexpr (settles<XIn>) {
    GMLP_UNROLL
    for (int j = 0; j < N; ++j)
      if (s.in(j, C)) xin.settle(r, s.channel(j), v[j]);
  }
  const float mu = sum(t) / float(C);
  float q = 0.f;
  GMLP_UNROLL
  for (int j = 0; j < N; ++j)
    if (s.in(j, C)) q += (v[j] - mu) * (v[j] - mu);
  const float rs = rsqrtf(sum(q) / float(C) + eps);
  float wj[N], bj[N];
  GMLP_UNROLL
  for (int j = 0; j < N; ++j) {
    wj[j] = w[s.loaded(j, C)];
    bj[j] = b[s.loaded(j, C)];
  }
  GMLP_UNROLL
  for (int j = 0; j < N; ++j)
    if (s.in(j, C)) out(r, s.channel(j), (v[j] - mu) * rs * wj[j] + bj[j]);
  return {mu, rs};
}

// Whether x is the SGU's gate (ZIn): GELU at every value, and in the backward GELU' too.
template <typename XIn>
constexpr bool gate_rows = requires(const XIn& x, typename XIn::Raw v) { x.value_and_grad(v, 0); };

// Row r's backward over a thread's N slots of it: xhat and dy w in registers, their two
// sums over the row by sum (a float2), dx to out (Out::load_row first: what out reads
// back, dx to add to or the SGU's U; then Out::store, which gives back what it holds).
// add(k, j, term) takes slot j's terms of dw (k = 0), db (1) and, K = 3, what out holds
// (2: the SGU's gate sums dU into the in-projection's bias). Each slot is read, then
// written, by its own thread: out may overwrite x.
template <int K, int N, typename XIn, typename Slots, typename Out, typename TY, typename Sum, typename Add>
__device__ inline void ln_backward_slots(const TY* dyr, XIn xin, int64_t r, float mu, float rs, const float* w, int C,
                                         Slots s, const Out& out, const Sum& sum, const Add& add) {
  // The SGU's gate (ZIn, DzGate): GELU' taken with GELU, from one erf, where a share of
  // up to 8 channels leaves registers for it; wider shares read U again for their store.
  constexpr bool with_grad = N <= 8 && gate_rows<XIn> && requires(const Out& o) {
    o.store_with_grad(0.f, int64_t(0), 0, 0.f);
  };
  float zg[with_grad ? N : 1];
  typename XIn::Raw xr[N];
  xin.load_row(r, s, C, xr);
  TY dr[N];
  float g[N];
  GMLP_UNROLL
  for (int j = 0; j < N; ++j) {
    dr[j] = dyr[s.loaded(j, C)];
    g[j] = w[s.loaded(j, C)];
  }
  float xh[N];
  float sg = 0.f, sgx = 0.f;
  GMLP_UNROLL
  for (int j = 0; j < N; ++j) {
    xh[j] = 0.f;
    if (s.in(j, C)) {
      if constexpr (with_grad) {
        const auto vg = xin.value_and_grad(xr[j], s.channel(j));
        xh[j] = (vg.z - mu) * rs;
        zg[j] = vg.dz;
      } else {
        xh[j] = (xin.value(xr[j], s.channel(j)) - mu) * rs;
      }
      const float d = value(dr[j]);
      g[j] *= d;  // dy w
      sg += g[j];
      sgx += g[j] * xh[j];
      add(0, j, d * xh[j]);
      add(1, j, d);
    }
  }
  const float2 t = sum(float2{sg, sgx});
  const float mg = t.x / float(C), mgx = t.y / float(C);
  if constexpr (with_grad) {
    GMLP_UNROLL
    for (int j = 0; j < N; ++j)
      if (s.in(j, C)) {
        const float held = out.store_with_grad(zg[j], r, s.channel(j), rs * (g[j] - mg - xh[j] * mgx));
        if constexpr (K == 3) add(2, j, held);
      }
  } else {
    typename Out::Pre pre[N];
    out.load_row(r, s, C, pre);
    GMLP_UNROLL
    for (int j = 0; j < N; ++j) {
      if (s.in(j, C)) {
        const float held = out.store(pre[j], r, s.channel(j), rs * (g[j] - mg - xh[j] * mgx));
        if constexpr (K == 3) add(2, j, held);
      }
    }
  }
}

// Rows of up to warp_columns() channels take a warp each (four rows to a block of
// kRowThreads, no barrier between rows), a lane's PerLane channels of 8, 16 or 24; wider
// rows, up to kHeldColumns, a block of kHeldThreads each, a thread's PerThread of 3, 4,
// 6 or 8 (the row's sums block reductions, two barriers each). The SGU gate's backward
// (gate_rows: GELU and GELU' at every value) takes a warp per row only up to a lane's 16
// (kGateWarpPerLane). Measured on an H100 (bf16 steps, ncu, docs/bench-gpu.md):
// - the LM's gate of 1,024 at a lane's 32 took 337 µs where its bytes take 17, BERT's
//   of 1,536 at 48 took 819, slower than a block per row looping over its channels: a
//   lane's share is unrolled, every channel's GELU and GELU' inlined (199 KB of code at
//   32 a lane), and the registers left a few warps a multiprocessor;
// - gMLP-S/16's gate backward of 768, at a lane's 24 (141 registers, 12 warps a
//   multiprocessor), took 203 µs, and a block per row at a thread's 3 (54 registers)
//   117: the same 80 M warp instructions both, the slots issued 43% of the time against
//   70%. That kernel is bound by what it issues, not by its bytes;
// - the plain LayerNorms (no GELU) go the other way: the backward at 256 channels
//   (S/16's blocks) 34 µs a warp per row against 127 a block, at 768 (BERT's) 66
//   against 76; the forwards, the gate's of 768 included, 60 against 69, 25 against 32.
// GMLP_CUDA_LN_WARP_COLUMNS (0 to 768) lowers the warp rows' bound, to time a block per
// row there too (a thread's 3 fill 768, as 4, 6 and 8 fill 1,024, 1,536 and 2,048; the
// gate's backward, below, a block of 128's 6).
//
// Above a lane's 16, the gate's backward takes rows of up to 768 channels a block of
// kGateRowThreads each, a thread's 6 (kGateRowShare), not kHeldThreads' 3: BERT's gate
// at a thread's 6 issued 103 warp instructions a value where S/16's at 3 issued 132
// (ncu, session 42), a row's two block reductions and its setup spread over twice the
// channels; at most 80 registers as BERT's kernel (six blocks, 24 warps a multiprocessor).
constexpr int kWarpColumnsMax = 768, kHeldColumns = 2048, kGateWarpPerLane = 16;
constexpr int kGateRowThreads = 128, kGateRowShare = 6;
static_assert(kWarpColumnsMax <= kHeldColumns, "a warp's rows are held rows");

// On the CUDA emulator a warp takes rows of up to 16 channels (the gate's backward 10)
// and a block up to 32, each share at narrower rows (lane_fits, thread_fits), so that
// the tests' rows take every kernel and every share; unless GMLP_CUDA_EMU_ROWS
// (layernorm.cu) is `gpu`, under which rows go as they do on a GPU (the tests of the
// GPU's widths, full rows among them), or `gpu-blocks`, as they do on a GPU under
// GMLP_CUDA_LN_WARP_COLUMNS=0 (no warp rows).
enum class EmuRows { emulator, gpu, gpu_blocks };
#if defined(GMLP_CUDA_EMULATED)
EmuRows emu_rows();
#else
constexpr EmuRows emu_rows() { return EmuRows::gpu; }
#endif

// The most channels a warp's row, or a block's held row, may take.
inline int warp_columns_max() {
  const EmuRows e = emu_rows();
  return e == EmuRows::gpu ? kWarpColumnsMax : e == EmuRows::gpu_blocks ? 0 : 16;
}
inline int held_columns() { return emu_rows() == EmuRows::emulator ? 32 : kHeldColumns; }

// The most channels a lane's PerLane take: 32 PerLane (on the emulator's own widths 8:
// 5, 16: 10, 24: 16). Lanes past C idle.
inline int lane_columns(int per_lane) {
  if (emu_rows() == EmuRows::emulator) return per_lane == 8 ? 5 : per_lane == 16 ? 10 : 16;
  return per_lane * 32;
}
inline bool lane_fits(int per_lane, int C) { return C <= lane_columns(per_lane); }
// Whether a thread's PerThread channels take rows of C: kHeldThreads PerThread (on the
// emulator's own widths 3: up to 17, 4: 20, 6: 26, 8: 32).
inline bool thread_fits(int per_thread, int C) {
  if (emu_rows() == EmuRows::emulator)
    return C <= (per_thread == 3 ? 17 : per_thread == 4 ? 20 : per_thread == 6 ? 26 : 32);
  return C <= per_thread * kHeldThreads;
}
// Whether the gate's backward takes rows of C a block of kGateRowThreads (on the
// emulator's own widths up to 17, where other rows take a thread's 3).
inline bool gate_row_fits(int C) {
  if (emu_rows() == EmuRows::emulator) return C <= 17;
  return C <= kGateRowShare * kGateRowThreads;
}

// f(share, full) for the smallest share of 8, 16, 24 (a lane's) or 3, 4, 6, 8 (a
// thread's) that takes C channels, share a std::integral_constant<int, N> and full a
// std::bool_constant, whether the row fills the share's slots (RowSlots' Full).
template <int Share, int Stride, typename F>
void with_share(int C, F&& f) {
  if (C == Share * Stride) return f(std::integral_constant<int, Share>{}, std::true_type{});
  f(std::integral_constant<int, Share>{}, std::false_type{});
}
// Widest: the widest share a caller's rows may take (its kernel compiled for no other);
// the caller keeps C within lane_columns(Widest), or a narrower share takes it.
template <int Widest = 24, typename F>
void with_per_lane(int C, F&& f) {
  if (lane_fits(8, C)) return with_share<8, 32>(C, f);
  if (Widest == 16 || lane_fits(16, C)) return with_share<16, 32>(C, f);
  if constexpr (Widest == 24) with_share<24, 32>(C, f);
}
// Smallest: the smallest share a caller's rows may take (the gate's backward: 4, its
// narrower rows a block of kGateRowThreads).
template <int Smallest = 3, typename F>
void with_per_thread(int C, F&& f) {
  if constexpr (Smallest <= 3)
    if (thread_fits(3, C)) return with_share<3, kHeldThreads>(C, f);
  if (thread_fits(4, C)) return with_share<4, kHeldThreads>(C, f);
  if (thread_fits(6, C)) return with_share<6, kHeldThreads>(C, f);
  with_share<8, kHeldThreads>(C, f);
}

// The forward, a warp per row;
template <int PerLane, bool Full, typename XIn, typename YOut>
__global__ void ln_forward_warp_k(XIn xin, int M, int C, const float* w, const float* b, float eps, YOut out,
                                  float* mean, float* rstd) {
  const int lane = int(threadIdx.x) & 31;
  const int64_t r = int64_t(blockIdx.x) * (blockDim.x >> 5) + (threadIdx.x >> 5);
  if (r >= M) return;  // the whole warp: no barrier follows
  const float2 st = ln_forward_slots<PerLane>(xin, r, C, RowSlots<32, Full>{lane}, w, b, eps, out,
                                              [](float v) { return warp_sum(v); });
  if (lane == 0) {
    if (mean) mean[r] = st.x;
    if (rstd) rstd[r] = st.y;
  }
}

// a block per row (of kHeldThreads).
template <int PerThread, bool Full, typename XIn, typename YOut>
__global__ void ln_forward_block_k(XIn xin, int C, const float* w, const float* b, float eps, YOut out, float* mean,
                                   float* rstd) {
  __shared__ float sh[32];
  const int64_t r = blockIdx.x;
  const float2 st = ln_forward_slots<PerThread>(xin, r, C, RowSlots<kHeldThreads, Full>{int(threadIdx.x)}, w, b,
                                                eps, out, [&](float v) { return block_sum(v, sh); });
  if (threadIdx.x == 0) {
    if (mean) mean[r] = st.x;
    if (rstd) rstd[r] = st.y;
  }
}

// The backward, a warp per row: a block of warp_block_warps(K, PerLane) warps takes a
// chunk of rows, its warps every Warps-th row each. Each lane adds its slots' terms over
// its warp's rows into its warp's own shared memory (in registers they left a PerLane of
// 24 a few warps per multiprocessor); then the block adds its warps' sums in warp order,
// and the chunk's go to part[(chunk * K + k) * C + c].
constexpr int warp_block_warps(int K, int per_lane) {
  const int fit = 10240 / (K * per_lane * 32);  // 40 KB of sums: under 48 KB of static shared memory
  return fit < 1 ? 1 : fit > 4 ? 4 : fit;
}
// Rows per chunk: about 4,096 warps in all (several waves over an H100's 132
// multiprocessors, so the last one's tail is short), at least 8 rows a block.
inline int warp_rows_per(int M, int warps) {
  const int chunks = 4096 / warps;
  return M > 8 * chunks ? (M + chunks - 1) / chunks : 8;
}
// Registers a lane may take (launch bounds): unbounded, nvcc gave the gate's kernel 168
// registers at a PerLane of 8 and 255, spilling, from 24 on (all of a row's GELUs
// interleaved).
constexpr int warp_backward_registers(int per_lane) { return per_lane <= 8 ? 96 : per_lane <= 16 ? 128 : 168; }
constexpr int warp_backward_blocks(int K, int per_lane) {
  return 65536 / (32 * warp_block_warps(K, per_lane) * warp_backward_registers(per_lane));
}

template <int K, int PerLane, bool Full, typename XIn, typename Out, typename TY>
__global__ void GMLP_BOUNDS(32 * warp_block_warps(K, PerLane), warp_backward_blocks(K, PerLane))
    ln_backward_warp_k(const TY* dy, int lddy, XIn xin, const float* mean, const float* rstd, const float* w, int M,
                       int C, int rows_per, Out out, float* part) {
  constexpr int Warps = warp_block_warps(K, PerLane), Row = PerLane * 32;
  __shared__ float sums[Warps][K][Row];
  const int lane = int(threadIdx.x) & 31, warp = int(threadIdx.x) >> 5;
  float(*acc)[Row] = sums[warp];  // acc[k][32 j + lane]: lane's slot j, whether or not it is < C
  GMLP_UNROLL
  for (int k = 0; k < K; ++k)
    GMLP_UNROLL
    for (int j = 0; j < PerLane; ++j) acc[k][32 * j + lane] = 0.f;
  const int64_t r0 = int64_t(blockIdx.x) * rows_per, r1 = r0 + rows_per < M ? r0 + rows_per : M;
  for (int64_t r = r0 + warp; r < r1; r += Warps)
    ln_backward_slots<K, PerLane>(
        dy + r * lddy, xin, r, mean[r], rstd[r], w, C, RowSlots<32, Full>{lane}, out,
        [](float2 v) { return warp_sum(v); }, [&](int k, int j, float v) { acc[k][32 * j + lane] += v; });
  __syncthreads();
  for (int c = int(threadIdx.x); c < C; c += int(blockDim.x))  // the warps' sums, in warp order
    for (int k = 0; k < K; ++k) {
      float t = sums[0][k][c];
      for (int v = 1; v < Warps; ++v) t += sums[v][k][c];
      part[(int64_t(blockIdx.x) * K + k) * C + c] = t;
    }
}

// The backward, a block per row: a block takes a chunk of rows one after another (every
// thread the same rows, so each reaches the barriers), each thread adding its slots'
// terms in registers; the chunk's sums go to part as the warp kernel's do. About 512
// chunks of kHeldThreads whatever M (1,024 of kGateRowThreads, half the warps each), at
// least 8 rows each. 24 warps a multiprocessor up to a thread's 6 (at most 80
// registers): the GPU's GELU (gelu.cuh) took BERT's gate of 1,536 from 76 registers to
// 87 unbounded, where 80 is the most for three blocks of kHeldThreads (ncu measured 76,
// three blocks, 37.5% occupancy); bounded, 78 and no spill.
inline int block_rows_per(int M, int chunks = 512) { return M > 8 * chunks ? (M + chunks - 1) / chunks : 8; }

template <int K, int PerThread, bool Full, int Threads, typename XIn, typename Out, typename TY>
__global__ void GMLP_BOUNDS(Threads, (PerThread <= 6 ? 3 : 2) * kHeldThreads / Threads)
    ln_backward_block_k(const TY* dy, int lddy, XIn xin, const float* mean, const float* rstd, const float* w, int M,
                        int C, int rows_per, Out out, float* part) {
  __shared__ float2 sh[32];
  float acc[K][PerThread];
  GMLP_UNROLL
  for (int k = 0; k < K; ++k)
    GMLP_UNROLL
    for (int j = 0; j < PerThread; ++j) acc[k][j] = 0.f;
  const RowSlots<Threads, Full> s{int(threadIdx.x)};
  const int64_t r0 = int64_t(blockIdx.x) * rows_per, r1 = r0 + rows_per < M ? r0 + rows_per : M;
  for (int64_t r = r0; r < r1; ++r)
    ln_backward_slots<K, PerThread>(
        dy + r * lddy, xin, r, mean[r], rstd[r], w, C, s, out, [&](float2 v) { return block_sum(v, sh); },
        [&](int k, int j, float v) { acc[k][j] += v; });
  GMLP_UNROLL
  for (int j = 0; j < PerThread; ++j)
    if (s.in(j, C))
      GMLP_UNROLL
      for (int k = 0; k < K; ++k) part[(int64_t(blockIdx.x) * K + k) * C + s.channel(j)] = acc[k][j];
}

// The forward over M rows of up to held_columns() channels: a warp or a block per row.
template <typename XIn, typename YOut>
void layernorm_forward_held(XIn xin, int M, int C, const float* w, const float* b, float eps, YOut out, float* mean,
                            float* rstd) {
  if (C <= warp_columns()) {
    with_per_lane(C, [&](auto per_lane, auto full) {
      constexpr int kRows = kRowThreads / 32;
      GMLP_LAUNCH((ln_forward_warp_k<decltype(per_lane)::value, decltype(full)::value>), blocks_for(M, kRows),
                  kRowThreads)(xin, M, C, w, b, eps, out, mean, rstd);
    });
  } else {
    with_per_thread(C, [&](auto per_thread, auto full) {
      GMLP_LAUNCH((ln_forward_block_k<decltype(per_thread)::value, decltype(full)::value>), unsigned(M),
                  kHeldThreads)(xin, C, w, b, eps, out, mean, rstd);
    });
  }
}

// The backward over M rows of up to held_columns() channels, dx and the column sums in
// one pass: dw and db (and, where dsum is given, the column sums of what out holds)
// added to.
template <typename XIn, typename Out, typename TY>
void layernorm_backward_held(const TY* dy, int lddy, XIn xin, const float* mean, const float* rstd, const float* w,
                             int M, int C, Out out, float* dw, float* db, float* dsum) {
  const auto run = [&](auto k) {
    using KT = decltype(k);  // a type, not a constexpr int: g++ 12 would have the lambdas below capture it
    constexpr int widest = gate_rows<XIn> ? kGateWarpPerLane : 24;
    if (C <= std::min(warp_columns(), lane_columns(widest))) {
      with_per_lane<widest>(C, [&](auto per_lane, auto full) {
        constexpr int K = KT::value, PL = decltype(per_lane)::value, warps = warp_block_warps(K, PL);
        using FT = decltype(full);
        const int rows_per = warp_rows_per(M, warps), chunks = (M + rows_per - 1) / rows_per;
        float* part = static_cast<float*>(scratch(sizeof(float) * size_t(K) * size_t(chunks) * C));
        GMLP_LAUNCH((ln_backward_warp_k<K, PL, FT::value>), unsigned(chunks), unsigned(32 * warps))(
            dy, lddy, xin, mean, rstd, w, M, C, rows_per, out, part);
        finish_column_sums(part, chunks, K, C, dw, db, dsum);
      });
    } else {
      const auto block_rows = [&](auto per_thread, auto full, auto threads) {
        constexpr int K = KT::value;
        using PT = decltype(per_thread);
        using FT = decltype(full);
        using TH = decltype(threads);
        const int rows_per = block_rows_per(M, 512 * kHeldThreads / TH::value),
                  chunks = (M + rows_per - 1) / rows_per;
        float* part = static_cast<float*>(scratch(sizeof(float) * size_t(K) * size_t(chunks) * C));
        GMLP_LAUNCH((ln_backward_block_k<K, PT::value, FT::value, TH::value>), unsigned(chunks), unsigned(TH::value))(
            dy, lddy, xin, mean, rstd, w, M, C, rows_per, out, part);
        finish_column_sums(part, chunks, K, C, dw, db, dsum);
      };
      using Held = std::integral_constant<int, kHeldThreads>;
      if constexpr (gate_rows<XIn>) {
        if (gate_row_fits(C))
          return with_share<kGateRowShare, kGateRowThreads>(C, [&](auto per_thread, auto full) {
            block_rows(per_thread, full, std::integral_constant<int, kGateRowThreads>{});
          });
        with_per_thread<4>(C, [&](auto per_thread, auto full) { block_rows(per_thread, full, Held{}); });
      } else {
        with_per_thread(C, [&](auto per_thread, auto full) { block_rows(per_thread, full, Held{}); });
      }
    }
  };
  if (dsum)
    run(std::integral_constant<int, 3>{});
  else
    run(std::integral_constant<int, 2>{});
}

}  // namespace gmlp::cuda
