#pragma once
// What every .cu file of the CUDA backend shares: launch shapes and block reductions.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <type_traits>

#include "ops/bf16.h"
#include "ops/cuda/cuda_ops.h"

namespace gmlp::cuda {

// Every kernel launch: kernel<<<grid, block>>> under nvcc; compiled by g++ against the
// CUDA emulator (tests/cuda_emu, GMLP_CUDA_EMULATED), the emulator's launch, which runs
// the kernel's threads on the CPU so that the CUDA tests run without a GPU.
#if defined(GMLP_CUDA_EMULATED)
#define GMLP_LAUNCH(kernel, grid, block) GMLP_EMU_LAUNCH(kernel, grid, block)
#else
#define GMLP_LAUNCH(kernel, grid, block) kernel<<<grid, block>>>
#endif

// A loop the compiler should unroll (nvcc), so that arrays indexed by its counter stay
// in registers; nothing to g++ under the emulator.
#if defined(GMLP_CUDA_EMULATED)
#define GMLP_UNROLL
#else
#define GMLP_UNROLL _Pragma("unroll")
#endif

// A kernel's most threads a block and fewest blocks a multiprocessor (nvcc's
// __launch_bounds__), so that the compiler keeps its registers within what that
// occupancy allows; nothing under the emulator.
#if defined(GMLP_CUDA_EMULATED)
#define GMLP_BOUNDS(threads, blocks)
#else
#define GMLP_BOUNDS(threads, blocks) __launch_bounds__(threads, blocks)
#endif

constexpr int kThreads = 256;

// Values of a tensor a thread of an elementwise pass takes at once, their loads first
// (the SGU's bias + combine and gate pass): kRowBatch rows, or kRowBatch / V rows of V
// adjacent channels (the code unrolled over as many values either way). One bf16 value a
// thread in flight left an H100 at a third of its bandwidth (k_bias_combine 131 µs of a
// gMLP-S/16 step where its bytes take 50, docs/bench-gpu.md).
constexpr int kRowBatch = 4;

// A value held as a float or as bf16 bits (ops/bf16.h), widened to a float; and v
// stored at p as p holds it, giving back the float then held (v, or v rounded). The
// kernels over activations held in bf16 are templates over the element type.
__device__ inline float value(float v) { return v; }
__device__ inline float value(uint16_t h) { return ops::from_bf16(h); }
// round_as: v rounded as T holds it into bits, giving back the float then held (hold
// without the store: a value that goes out with its neighbours, store_vec).
__device__ inline float round_as(float v, float& bits) { return bits = v; }
__device__ inline float round_as(float v, uint16_t& bits) {
  bits = ops::to_bf16(v);
  return ops::from_bf16(bits);
}
template <typename T>
__device__ inline float hold(T* p, float v) {
  T bits;
  const float held = round_as(v, bits);
  *p = bits;
  return held;
}

// V adjacent values at p (p aligned to V of them) in one access: two bf16 values a
// 4-byte load, two floats an 8-byte one, eight bf16 or four floats a 16-byte one. A pass
// that moves bf16 a value a thread issues 2-byte accesses, a warp's 64 bytes of a row;
// by pairs, a warp reads 128. Through memcpy under the emulator (g++ would take the wider
// type's access for aliasing).
struct alignas(16) Bits16 {
  uint64_t lo, hi;
};
template <int V, typename T>
using VecBits = std::conditional_t<
    V * sizeof(T) == 4, uint32_t,
    std::conditional_t<V * sizeof(T) == 8, uint64_t, std::conditional_t<V * sizeof(T) == 16, Bits16, T>>>;
template <int V, typename T>
__device__ inline void load_vec(const T* p, T (&out)[V]) {
  if constexpr (V == 1) {
    out[0] = *p;
  } else {
    static_assert(sizeof(VecBits<V, T>) == V * sizeof(T), "4, 8 or 16 bytes");
#if defined(GMLP_CUDA_EMULATED)
    std::memcpy(out, p, sizeof(out));
#else
    const VecBits<V, T> w = *reinterpret_cast<const VecBits<V, T>*>(p);
    std::memcpy(out, &w, sizeof(out));
#endif
  }
}
template <int V, typename T>
__device__ inline void store_vec(T* p, const T (&in)[V]) {
  if constexpr (V == 1) {
    *p = in[0];
  } else {
#if defined(GMLP_CUDA_EMULATED)
    std::memcpy(p, in, sizeof(in));
#else
    VecBits<V, T> w;
    std::memcpy(&w, in, sizeof(in));
    *reinterpret_cast<VecBits<V, T>*>(p) = w;
#endif
  }
}
// n values of E padded to 16 bytes: the rows of the copies made for cuBLAS (gemm.cu's
// bf16 operands, spatial.cu's W), whose fastest kernels read rows of 16-byte multiples.
template <typename E>
inline int padded_row(int n) {
  constexpr int per = int(16 / sizeof(E));
  return (n + per - 1) / per * per;
}

// Whether p is aligned for V of its values at once.
template <int V, typename T>
inline bool vec_aligned(const T* p) {
  return reinterpret_cast<uintptr_t>(p) % (V * sizeof(T)) == 0;
}

// At least one: a grid of none is a launch error, and every kernel sized this way checks
// its index against n (so an empty batch, an MLM batch with no masked rows, is a no-op).
inline unsigned blocks_for(int64_t n, int threads = kThreads) {
  return n > 0 ? unsigned((n + threads - 1) / threads) : 1u;
}

// The launch of a kernel taking a thread per column (of `columns`: channels, or groups
// of them) and its rows in turn, `batch` rows at once: blocks of kThreads, as many warps
// across as divide the columns' warps (up to 8), the rest rows, so that no thread idles
// where columns is a multiple of 32 (gMLP-S/16's 384 pairs of gate channels took a
// block and a half of 256 across, a quarter of the threads idle); the columns' blocks by
// as many rows of blocks as take the rows in batches, gridDim.y at most (the kernel
// strides over the rest: first_row(), then every row_stride()-th). A thread per value
// instead, with its row and column divided out of a 64-bit index, spent a 64-bit
// division or two a value, where a pass's arithmetic is a few instructions. On the CUDA
// emulator three rows of blocks at most, so that the tests' rows take the stride.
#if defined(GMLP_CUDA_EMULATED)
constexpr int kRowBlocks = 3;
#else
constexpr int kRowBlocks = 65535;
#endif
struct Launch {
  dim3 grid, block;
};
inline Launch columns_by_rows(int columns, int64_t rows, int batch) {
  const int warps = (columns + 31) / 32;
  int across = kThreads / 32;
  while (warps % across) across /= 2;
  const dim3 block(unsigned(32 * across), unsigned(kThreads / (32 * across)));
  const int64_t per = int64_t(batch) * block.y;
  return {dim3(blocks_for(columns, int(block.x)), unsigned(std::clamp<int64_t>((rows + per - 1) / per, 1, kRowBlocks))),
          block};
}
// The launch, its batch chosen, of a pass of a few instructions a value (the residuals,
// the roundings, the rebuilt gate, the patches): a thread's setup (its column,
// RowWalk's divisions, a bias's load) spent on one row took k_residual_keep to 46 µs of
// an H100's gMLP-S/16 step where its bytes take 26 (docs/bench-gpu.md). So up to
// kWalkRows rows a thread where the threads still fill about two waves of an H100
// (kFillThreads: 132 multiprocessors of 2,048), a row where they would not (a layer's
// weights).
constexpr int kWalkRows = 8;
constexpr int64_t kFillThreads = int64_t(1) << 19;
inline Launch columns_by_rows_batched(int columns, int64_t rows) {
  return columns_by_rows(columns, rows, int(std::clamp<int64_t>(int64_t(columns) * rows / kFillThreads, 1, kWalkRows)));
}
__device__ inline int column() { return int(blockIdx.x * blockDim.x + threadIdx.x); }
__device__ inline int64_t first_row() { return int64_t(blockIdx.y) * blockDim.y + threadIdx.y; }
__device__ inline int64_t row_stride() { return int64_t(gridDim.y) * blockDim.y; }
// The rows a thread of such a launch takes, first_row() then every row_stride()-th, each
// with its quotient and remainder by d (d > 0: the batch's B, a matrix's rows), kept by
// additions: a division a thread, where one a row would be one at every value it takes.
struct RowWalk {
  int64_t row, quot, rem;
  int64_t step, step_quot, step_rem, d;
  __device__ explicit RowWalk(int64_t by)
      : row(first_row()), quot(row / by), rem(row % by), step(row_stride()), step_quot(step / by),
        step_rem(step % by), d(by) {}
  __device__ void next() {
    row += step;
    quot += step_quot;
    rem += step_rem;
    if (rem >= d) {
      rem -= d;
      ++quot;
    }
  }
};

// Rows per chunk of a column sum taken as partial sums over chunks of rows, one chunk
// per blockIdx.y: 256, or more where M would need over 65535 chunks (gridDim.y's limit).
inline int rows_per_chunk(int M) { return M > 256 * 65535 ? (M + 65534) / 65535 : 256; }

// The first stage of column sums (bias and LayerNorm gradients): a block of kColTile x
// kRowLanes threads per (kColTile columns, chunk of rows). Each row lane takes every
// kRowLanes-th row of the chunk, so that a warp reads 32 adjacent columns of one row and
// each thread a few dozen rows, not the whole chunk (a thread per column over 256-row
// chunks left 64 blocks at d 512, 8,192 rows: a few per SM, each thread a long chain of
// loads); then the lanes' sums are added in lane order. Fixed order throughout.
constexpr int kColTile = 32, kRowLanes = 8;
// The second stage's row lanes (finish_column_sums): its blocks are few (one per 32 of
// K x N columns: 72 for a LayerNorm of 768 channels), so each takes 32 lanes, four times
// the loads in flight of the first stage's 8: with 8, gMLP-S/16's 123 finishes took 6.7
// µs a launch on an H100, the gate's (then 512 chunks of 2,304 columns) the most.
constexpr int kFinishLanes = 32;
// width: the columns a thread takes (a term's kWidth, below).
inline dim3 column_sum_grid(int N, int chunks, int width = 1) {
  return dim3(blocks_for(N, kColTile * width), unsigned(chunks));
}
inline dim3 column_sum_block(int lanes = kRowLanes) { return dim3(kColTile, unsigned(lanes)); }

// How many adjacent columns a term takes a thread: its kWidth (the SGU's gate pass, by
// pairs where the rows allow), or one.
template <typename Term>
constexpr int width_of() {
  if constexpr (requires { Term::kWidth; }) return Term::kWidth;
  else return 1;
}

// K sums per column over the block's chunk of rows [blockIdx.y * rows_per, + rows_per)
// of M: term(r, c, s) adds row r's terms of column c to s[0, K); each lane's sums are
// added in lane order and handed to sink(k, c, sum). Every (r, c) is one thread's,
// once. Every thread reaches the barrier. A term of width V takes columns c to c + V - 1
// (N a multiple of V), its sums s[k * V + v].
// The chunk is blockIdx.y's unless given.
template <int K, int Lanes = kRowLanes, typename Term, typename Sink>
__device__ inline void column_sums_in_lanes(int M, int N, int rows_per, const Term& term, const Sink& sink,
                                            int chunk = -1) {
  constexpr int V = width_of<Term>();
  __shared__ float lanes[K][Lanes][kColTile * V];
  const int c = (int(blockIdx.x) * kColTile + int(threadIdx.x)) * V;
  const int r0 = (chunk < 0 ? int(blockIdx.y) : chunk) * rows_per, r1 = min(M, r0 + rows_per);
  float s[K * V];
  for (int k = 0; k < K * V; ++k) s[k] = 0.f;
  if (c < N) {
    int r = r0 + int(threadIdx.y);
    if constexpr (requires(const Term& t, int i) { t.apply(t.load(i, i), i, i, s); }) {
      // A term that loads, then applies (the SGU's gate pass): R rows' loads in flight
      // at once, then those rows applied in order.
      constexpr int R = kRowBatch / V;
      for (; r + (R - 1) * Lanes < r1; r += R * Lanes) {
        decltype(term.load(r, c)) pre[R];
        GMLP_UNROLL
        for (int b = 0; b < R; ++b) pre[b] = term.load(r + b * Lanes, c);
        GMLP_UNROLL
        for (int b = 0; b < R; ++b) term.apply(pre[b], r + b * Lanes, c, s);
      }
      for (; r < r1; r += Lanes) term.apply(term.load(r, c), r, c, s);
    } else {
      for (; r < r1; r += Lanes) term(r, c, s);
    }
  }
  for (int k = 0; k < K; ++k)
    for (int v = 0; v < V; ++v) lanes[k][threadIdx.y][threadIdx.x * V + v] = s[k * V + v];
  __syncthreads();
  if (threadIdx.y != 0) return;
  for (int v = 0; v < V && c + v < N; ++v)
    for (int k = 0; k < K; ++k) {
      float t = 0.f;
      for (int j = 0; j < Lanes; ++j) t += lanes[k][j][threadIdx.x * V + v];
      sink(k, c + v, t);
    }
}

// The first stage: the chunk's sums go to part[(blockIdx.y * K + k) * N + c], where
// part is given (a pass that needs the sums only sometimes: the SGU's gate).
template <int K, typename Term>
__device__ inline void column_chunk_sums(int M, int N, int rows_per, const Term& term, float* part) {
  column_sums_in_lanes<K>(M, N, rows_per, term, [&](int k, int c, float t) {
    if (part) part[(int64_t(blockIdx.y) * K + k) * N + c] = t;
  });
}

// Both stages in one launch: the first stage's chunks, then, in whichever block of a
// column tile (blockIdx.x) arrives last, that tile's chunks summed in chunk order into
// o_k[c] (+=), the order fixed whichever block it is. finish_column_sums' launch saved:
// on an H100, 6.7 µs and a launch's gap each, 123 a gMLP-S/16 step (docs/bench-gpu.md).
// A block counts its arrival in arrived[blockIdx.x] (zeroed_counters: zero when the
// launch starts, left at zero by the last block) after its partials are fenced; the
// last block reads the others' past the L1 cache (__ldcg), which may hold none of them.
struct ColumnFinish {
  unsigned* arrived = nullptr;  // null: the first stage alone (part may then be null too)
  float *o0 = nullptr, *o1 = nullptr, *o2 = nullptr;
};
// For a launch of `tiles` column tiles (column_sum_grid's x).
inline ColumnFinish column_finish(int tiles, float* o0, float* o1 = nullptr, float* o2 = nullptr) {
  return {zeroed_counters(tiles), o0, o1, o2};
}
// part's K sums of V adjacent columns of chunk j: the finishing block's term.
template <int K, int V>
struct PartTile {
  static constexpr int kWidth = V;
  const float* part;
  int N;
  struct Held {
    float x[K * V];
  };
  __device__ Held load(int j, int c) const {
    Held h;
    GMLP_UNROLL
    for (int k = 0; k < K; ++k)
      GMLP_UNROLL
      for (int v = 0; v < V; ++v) h.x[k * V + v] = __ldcg(part + (int64_t(j) * K + k) * N + c + v);
    return h;
  }
  __device__ void apply(const Held& h, int, int, float* s) const {
    GMLP_UNROLL
    for (int i = 0; i < K * V; ++i) s[i] += h.x[i];
  }
};
template <int K, typename Term>
__device__ inline void column_sums_finished(int M, int N, int rows_per, const Term& term, float* part,
                                            const ColumnFinish& out) {
  column_chunk_sums<K>(M, N, rows_per, term, part);
  if (!out.arrived) return;  // uniform over the launch
  __shared__ unsigned before;  // blocks of this tile that arrived before this one
  __threadfence();
  __syncthreads();
  if (threadIdx.x == 0 && threadIdx.y == 0) before = atomicAdd(out.arrived + blockIdx.x, 1u);
  __syncthreads();
  if (before + 1 != gridDim.y) return;
  __threadfence();
  const int chunks = int(gridDim.y);
  column_sums_in_lanes<K>(
      chunks, N, chunks, PartTile<K, width_of<Term>()>{part, N},
      [&](int k, int c, float t) { (k == 0 ? out.o0 : k == 1 ? out.o1 : out.o2)[c] += t; }, 0);
  if (threadIdx.x == 0 && threadIdx.y == 0) out.arrived[blockIdx.x] = 0;
}

// The second stage: o_k[c] += the sum over the chunks of part[(chunk * K + k) * N + c],
// for k < K (at most 3: o_1 and o_2 only where K asks); part read as chunks rows of
// K x N columns, summed as the first stage sums its rows (a block per 32 of those
// columns, each of its kFinishLanes row lanes every 32nd chunk, then the lanes in order:
// a fixed order, and not one thread per column adding hundreds of chunks in a chain).
// Launched (linear.cu).
void finish_column_sums(const float* part, int chunks, int K, int N, float* o0, float* o1, float* o2);

// One lane's value from lane ^ o, for the sums below: a number, or a float2 (two sums
// taken at once).
template <typename T>
__device__ inline T shfl_xor(T v, int o) {
  return __shfl_xor_sync(0xffffffffu, v, o);
}
__device__ inline float2 shfl_xor(float2 v, int o) { return {shfl_xor(v.x, o), shfl_xor(v.y, o)}; }
__device__ inline float2 operator+(float2 a, float2 b) { return {a.x + b.x, a.y + b.y}; }

// Sum of v over the warp; every lane gets it.
template <typename T>
__device__ inline T warp_sum(T v) {
  for (int o = 16; o > 0; o >>= 1) v = v + shfl_xor(v, o);
  return v;
}

// Sum of v over the block (blockDim.x a multiple of 32, at most 1024); every thread
// gets the result. `shared` holds 32 values. T float2 takes two sums with the barriers of
// one, each added in the order a single sum is (a LayerNorm backward's row).
template <typename T>
__device__ inline T block_sum(T v, T* shared) {
  v = warp_sum(v);
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = blockDim.x >> 5;
  __syncthreads();  // shared may still be read by a previous call
  if (lane == 0) shared[warp] = v;
  __syncthreads();
  return warp_sum(lane < warps ? shared[lane] : T{});
}

__device__ inline float block_max(float v, float* shared) {
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = blockDim.x >> 5;
  __syncthreads();
  if (lane == 0) shared[warp] = v;
  __syncthreads();
  v = lane < warps ? shared[lane] : -INFINITY;
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}

// The block's softmax of row[0, keys) up to its normalisation: each thread takes the
// entries j = threadIdx.x, + blockDim.x, ..., replaces them by exp(row[j] - max) and the
// block's sum of those comes back as 1 / sum. The caller scales (and synchronises before
// reading entries other threads wrote). The tiny attention's rows and the decoder's.
__device__ inline float block_softmax_exp(float* row, int keys, float* shared) {
  float mx = -INFINITY;
  for (int j = threadIdx.x; j < keys; j += blockDim.x) mx = fmaxf(mx, row[j]);
  mx = block_max(mx, shared);
  float s = 0.f;
  for (int j = threadIdx.x; j < keys; j += blockDim.x) {
    row[j] = expf(row[j] - mx);
    s += row[j];
  }
  return 1.f / block_sum(s, shared);
}

}  // namespace gmlp::cuda
