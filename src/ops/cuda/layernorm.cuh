#pragma once
// LayerNorm's kernels, written once over where x comes from and where dx goes: the
// generic op (layernorm.cu) reads x and writes dx as they are; the SGU's gate
// (sgu.cu) normalises GELU(U), recomputed as it reads U, and folds GELU's derivative
// (and the non-split forms' direct path) into dU, so Z and dZ are never stored. Row r,
// channel c of x is xin(r, c); the backward's dL/dx goes to out(r, c, d).
#include <type_traits>

#include "ops/cuda/common.cuh"

namespace gmlp::cuda {

constexpr int kRowThreads = 128;
// A row of up to this many channels is kept in shared memory (16 KB) between a kernel's
// passes over it: x read (for the SGU's gate, GELU(U) evaluated) once instead of each
// pass. Each thread reads back only the channels it wrote, so no barrier is needed. On
// the CUDA emulator 16, so that the tests' rows take both paths.
#if defined(GMLP_CUDA_EMULATED)
constexpr int kRowCache = 16;
#else
constexpr int kRowCache = 4096;
#endif

// x as it is in memory, rows ld apart.
// The warp kernels take each input in two steps, load (every memory read of a row's
// channels, issued together) and value (the arithmetic on what was loaded): with the
// loads of a row behind the arithmetic of the channel before (the SGU's gate: GELU
// between them, and its branches), the warp waited on each load in turn, and the gate
// LayerNorm's backward took 790 µs of an H100's gMLP-S/16 step where its bytes take 50
// (docs/bench-gpu.md). operator() is the two at once.
// Lane lane's channel j of a row of C, as the warp kernels load it: lanes past C take
// channel C - 1 (any of the row would do) and drop it, so that no load is conditional.
__device__ inline int lane_channel(int lane, int j, int C) { return min(lane + 32 * j, C - 1); }

struct XPlain {
  const float* x;
  int ld;
  using Raw = float;
  template <int PerLane>
  __device__ void load_row(int64_t r, int lane, int C, Raw (&raw)[PerLane]) const {
    GMLP_UNROLL
    for (int j = 0; j < PerLane; ++j) raw[j] = x[r * ld + lane_channel(lane, j, C)];
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

// Rows of up to kWarpColumns channels take a warp each, four rows to a block of
// kRowThreads, a lane holding its channels (c = lane, lane + 32, ...) in registers: the
// sums are shuffles within the warp, with no barrier between rows, and a block's four
// rows go at their own pace. The block-per-row kernels below (every row's sums two
// block-wide reductions, four barriers) were the slowest of a bf16 step on an H200
// (docs/bench-gpu.md: the gate LayerNorm's backward 421 µs where its bytes take 27).
// Wider rows take the block kernels: a lane's 48 channels of BERT's gate of 1,536 took
// its backward from 573 µs to 819 on an H100, its forward from 118 to 147. PerLane, a
// lane's channels, is a compile-time 8, 16, 24 or 32, so the arrays stay in registers.
// On the CUDA emulator 16 channels (the variants' d and split gates; their other gates
// of 32 take the block kernels below), and PerLane chosen at widths 64 times smaller
// (lane_fits), so that the tests' narrow rows take every PerLane.
#if defined(GMLP_CUDA_EMULATED)
constexpr int kWarpColumns = 16;
#else
constexpr int kWarpColumns = 1024;
#endif

// Whether a lane's PerLane channels may take rows of C: 32 PerLane on a GPU; on the
// emulator PerLane / 2 (8: up to 4, 16: 8, 24: 12, 32: 16), rows narrower than the
// lanes' room, which the kernels allow (lanes past C idle).
constexpr bool lane_fits(int per_lane, int C) {
#if defined(GMLP_CUDA_EMULATED)
  return C <= per_lane / 2;
#else
  return C <= per_lane * 32;
#endif
}

// f(std::integral_constant<int, PerLane>) for the smallest PerLane of 8, 16, 24, 32
// whose lanes take C channels (C <= kWarpColumns).
template <typename F>
void with_per_lane(int C, F&& f) {
  if (lane_fits(8, C)) return f(std::integral_constant<int, 8>{});
  if (lane_fits(16, C)) return f(std::integral_constant<int, 16>{});
  if (lane_fits(24, C)) return f(std::integral_constant<int, 24>{});
  f(std::integral_constant<int, 32>{});
}

// A warp per row: mean and variance in two passes over the lane's registers, as the CPU
// op takes them.
template <int PerLane, typename XIn, typename YOut>
__global__ void ln_forward_warp_k(XIn xin, int M, int C, const float* w, const float* b, float eps, YOut out,
                                  float* mean, float* rstd) {
  const int lane = int(threadIdx.x) & 31;
  const int64_t r = int64_t(blockIdx.x) * (blockDim.x >> 5) + (threadIdx.x >> 5);
  if (r >= M) return;  // the whole warp: no barrier follows
  typename XIn::Raw raw[PerLane];
  xin.load_row(r, lane, C, raw);
  float v[PerLane];
  float s = 0.f;
  GMLP_UNROLL
  for (int j = 0; j < PerLane; ++j) {
    v[j] = lane + 32 * j < C ? xin.value(raw[j], lane + 32 * j) : 0.f;
    s += v[j];
  }
  const float mu = warp_sum(s) / float(C);
  float q = 0.f;
  GMLP_UNROLL
  for (int j = 0; j < PerLane; ++j)
    if (lane + 32 * j < C) q += (v[j] - mu) * (v[j] - mu);
  const float rs = rsqrtf(warp_sum(q) / float(C) + eps);
  float wj[PerLane], bj[PerLane];
  GMLP_UNROLL
  for (int j = 0; j < PerLane; ++j) {
    const int c = lane_channel(lane, j, C);
    wj[j] = w[c];
    bj[j] = b[c];
  }
  GMLP_UNROLL
  for (int j = 0; j < PerLane; ++j) {
    const int c = lane + 32 * j;
    if (c < C) out(r, c, (v[j] - mu) * rs * wj[j] + bj[j]);
  }
  if (lane == 0) {
    if (mean) mean[r] = mu;
    if (rstd) rstd[r] = rs;
  }
}

// A block per row.
template <typename XIn, typename YOut>
__global__ void ln_forward_k(XIn xin, int C, const float* w, const float* b, float eps, YOut out, float* mean,
                             float* rstd) {
  __shared__ float sh[32];
  __shared__ float row[kRowCache];
  const int64_t r = blockIdx.x;
  const bool cached = C <= kRowCache;
  auto x = [&](int c) { return cached ? row[c] : xin(r, c); };
  float s = 0.f;
  for (int c = threadIdx.x; c < C; c += blockDim.x) {
    const float v = xin(r, c);
    if (cached) row[c] = v;
    s += v;
  }
  const float mu = block_sum(s, sh) / float(C);
  float v = 0.f;  // two passes, as the CPU op
  for (int c = threadIdx.x; c < C; c += blockDim.x) {
    const float d = x(c) - mu;
    v += d * d;
  }
  const float rs = rsqrtf(block_sum(v, sh) / float(C) + eps);
  for (int c = threadIdx.x; c < C; c += blockDim.x) out(r, c, (x(c) - mu) * rs * w[c] + b[c]);
  if (threadIdx.x == 0) {
    if (mean) mean[r] = mu;
    if (rstd) rstd[r] = rs;
  }
}

// The forward over M rows (mean and rstd kept where given): a warp per row where the
// rows fit kWarpColumns, else a block per row.
template <typename XIn, typename YOut>
void layernorm_forward_with(XIn xin, int M, int C, const float* w, const float* b, float eps, YOut out, float* mean,
                            float* rstd) {
  if (M <= 0) return;
  if (C <= kWarpColumns) {
    with_per_lane(C, [&](auto per_lane) {
      constexpr int kRows = kRowThreads / 32;
      GMLP_LAUNCH(ln_forward_warp_k<decltype(per_lane)::value>, blocks_for(M, kRows), kRowThreads)(
          xin, M, C, w, b, eps, out, mean, rstd);
    });
  } else {
    GMLP_LAUNCH(ln_forward_k, unsigned(M), kRowThreads)(xin, C, w, b, eps, out, mean, rstd);
  }
  check_launch("layernorm forward");
}

template <typename XIn, typename YOut>
__global__ void ln_apply_k(XIn xin, int M, int C, const float* w, const float* b, const float* mean, const float* rstd,
                           YOut out) {
  const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= int64_t(M) * C) return;
  const int64_t r = i / C;
  const int c = int(i % C);
  out(r, c, (xin(r, c) - mean[r]) * rstd[r] * w[c] + b[c]);
}

// Row r's dx, by the whole block: xhat and dy w summed over the row, then dx to out.
// Each thread owns the same channels in both passes, so out may overwrite x: a
// channel's x is read (pass 2) by the thread that then writes its dx. dy is floats, or
// bf16 bits (the SGU's gate under bf16). out(r, c, d) stores d and gives back what it
// holds (d rounded, or added to what was there). xhat keeps the row's xhat where given
// (C channels of shared memory), else pass 2 computes it again; read(c, dy, xhat) sees
// each channel as pass 1 reads it, wrote(c, held) as pass 2 writes it.
template <typename XIn, typename Out, typename TY, typename Read, typename Wrote>
__device__ inline void ln_backward_row(const TY* dyr, XIn xin, int64_t r, float mu, float rs, const float* w, int C,
                                       float* xhat, const Out& out, float2* sh, const Read& read, const Wrote& wrote) {
  float sg = 0.f, sgx = 0.f;
  for (int c = threadIdx.x; c < C; c += blockDim.x) {
    const float xh = (xin(r, c) - mu) * rs, d = value(dyr[c]), g = d * w[c];
    if (xhat) xhat[c] = xh;
    read(c, d, xh);
    sg += g;
    sgx += g * xh;
  }
  const float2 sums = block_sum(float2{sg, sgx}, sh);
  const float mg = sums.x / float(C), mgx = sums.y / float(C);
  for (int c = threadIdx.x; c < C; c += blockDim.x) {
    const float xh = xhat ? xhat[c] : (xin(r, c) - mu) * rs;
    wrote(c, out(r, c, rs * (value(dyr[c]) * w[c] - mg - xh * mgx)));
  }
}

// A block per row.
template <typename XIn, typename Out, typename TY>
__global__ void ln_backward_dx_k(const TY* dy, int lddy, XIn xin, const float* mean, const float* rstd,
                                 const float* w, int C, Out out) {
  __shared__ float2 sh[32];
  __shared__ float xhat[kRowCache];
  const int64_t r = blockIdx.x;
  ln_backward_row(dy + r * lddy, xin, r, mean[r], rstd[r], w, C, C <= kRowCache ? xhat : nullptr, out, sh,
                  [](int, float, float) {}, [](int, float) {});
}

// dw's and db's terms of row r, column c: dy * xhat and dy.
template <typename XIn, typename TY>
struct DwDbTerms {
  const TY* dy;
  int lddy;
  XIn xin;
  const float *mean, *rstd;
  __device__ void operator()(int r, int c, float* s) const {
    const float g = value(dy[int64_t(r) * lddy + c]);
    s[0] += g * (xin(r, c) - mean[r]) * rstd[r];
    s[1] += g;
  }
};

template <typename XIn, typename TY>
__global__ void ln_backward_dwdb_partial_k(const TY* dy, int lddy, XIn xin, const float* mean, const float* rstd,
                                           int M, int C, int rows_per, float* part) {
  column_chunk_sums<2>(M, C, rows_per, DwDbTerms<XIn, TY>{dy, lddy, xin, mean, rstd}, part);
}

// The backward in one pass over the rows of up to kWarpColumns channels, a warp per row:
// a block of warp_block_warps(K, PerLane) warps takes a chunk of rows, its warps every
// Warps-th row each, a lane's channels of the row (xhat, dy w) in registers, the row's
// two sums shuffles within the warp. Each lane adds its channels' dw and db terms (and,
// K = 3, what out holds) over its warp's rows into its warp's own shared memory (in
// registers they left a PerLane of 24 a few warps per multiprocessor); then the block
// adds its warps' sums in warp order, and the chunk's go to part[(chunk * K + k) * C +
// c]. Every (row, channel) is one lane's: out may overwrite x, as in ln_backward_row.
// A row's loads are issued together (XPlain's note), x's and dy's, then out's
// (Out::load_row: what out reads back, dx to add to or the SGU's U).
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
// interleaved). Bounded so, gMLP-S/16's bf16 step (PerLane 24) went from 58 ms to 40.5
// on an H100; the LM's gate (PerLane 32, 255 registers, 6 warps a multiprocessor) stayed
// at 337 µs where its bytes take 17: not yet understood (docs/bench-gpu.md).
constexpr int warp_backward_registers(int per_lane) { return per_lane <= 8 ? 96 : per_lane <= 16 ? 128 : per_lane <= 24 ? 168 : 255; }
constexpr int warp_backward_blocks(int K, int per_lane) {
  return 65536 / (32 * warp_block_warps(K, per_lane) * warp_backward_registers(per_lane));
}

template <int K, int PerLane, typename XIn, typename Out, typename TY>
__global__ void GMLP_BOUNDS(32 * warp_block_warps(K, PerLane), warp_backward_blocks(K, PerLane)) ln_backward_warp_k(const TY* dy, int lddy, XIn xin, const float* mean, const float* rstd,
                                   const float* w, int M, int C, int rows_per, Out out, float* part) {
  constexpr int Warps = warp_block_warps(K, PerLane), Row = PerLane * 32;
  __shared__ float sums[Warps][K][Row];
  const int lane = int(threadIdx.x) & 31, warp = int(threadIdx.x) >> 5;
  float(*acc)[Row] = sums[warp];  // acc[k][32 j + lane]: lane's channel j, whether or not it is < C
  GMLP_UNROLL
  for (int k = 0; k < K; ++k)
    GMLP_UNROLL
    for (int j = 0; j < PerLane; ++j) acc[k][32 * j + lane] = 0.f;
  const int64_t r0 = int64_t(blockIdx.x) * rows_per, r1 = r0 + rows_per < M ? r0 + rows_per : M;
  for (int64_t r = r0 + warp; r < r1; r += Warps) {
    const float mu = mean[r], rs = rstd[r];
    const TY* dyr = dy + r * lddy;
    typename XIn::Raw xr[PerLane];
    xin.load_row(r, lane, C, xr);
    TY dr[PerLane];
    float g[PerLane];
    GMLP_UNROLL
    for (int j = 0; j < PerLane; ++j) {
      const int c = lane_channel(lane, j, C);
      dr[j] = dyr[c];
      g[j] = w[c];
    }
    float xh[PerLane];
    float sg = 0.f, sgx = 0.f;
    GMLP_UNROLL
    for (int j = 0; j < PerLane; ++j) {
      xh[j] = 0.f;
      if (lane + 32 * j < C) {
        xh[j] = (xin.value(xr[j], lane + 32 * j) - mu) * rs;
        const float d = value(dr[j]);
        g[j] *= d;  // dy w
        sg += g[j];
        sgx += g[j] * xh[j];
        acc[0][32 * j + lane] += d * xh[j];
        acc[1][32 * j + lane] += d;
      }
    }
    const float mg = warp_sum(sg) / float(C), mgx = warp_sum(sgx) / float(C);
    typename Out::Pre pre[PerLane];
    out.load_row(r, lane, C, pre);
    GMLP_UNROLL
    for (int j = 0; j < PerLane; ++j) {
      const int c = lane + 32 * j;
      if (c < C) {
        const float held = out.store(pre[j], r, c, rs * (g[j] - mg - xh[j] * mgx));
        if constexpr (K == 3) acc[2][32 * j + lane] += held;
      }
    }
  }
  __syncthreads();
  for (int c = int(threadIdx.x); c < C; c += int(blockDim.x))  // the warps' sums, in warp order
    for (int k = 0; k < K; ++k) {
      float t = sums[0][k][c];
      for (int v = 1; v < Warps; ++v) t += sums[v][k][c];
      part[(int64_t(blockIdx.x) * K + k) * C + c] = t;
    }
}

// The backward in one pass over the rows, for rows of up to kFusedColumns channels: a
// block per chunk of rows, taking them one after another as ln_backward_dx_k takes its
// row, with each channel's dw and db terms (and, K = 3, what out holds: the SGU's gate
// sums dU into the in-projection's bias) added up by the thread that owns the channel,
// in shared memory; the chunk's sums go to part[(chunk * K + k) * C + c]. The unfused
// backward (below) reads dy and x twice: once for dw and db, once for dx. Rows of up to
// kWarpColumns take the warp kernel above instead. On the CUDA emulator 32 channels, so
// that the tests take all three (the variants' d 16 and split gates of 16 a warp per
// row, their other gates of 32 this kernel, CudaOps' rows of 300 and more neither).
#if defined(GMLP_CUDA_EMULATED)
constexpr int kFusedColumns = 32;
#else
constexpr int kFusedColumns = 2048;
#endif
static_assert(kWarpColumns <= kFusedColumns, "the warp kernel's rows are a fused backward's too");
// About 512 chunks whatever M, at least 8 rows each: a guess for a profile to tune
// (more chunks, more blocks to hide a row's latency; fewer, fewer partial sums).
inline int fused_rows_per(int M) { return M > 8 * 512 ? (M + 511) / 512 : 8; }

template <int K, typename XIn, typename Out, typename TY>
__global__ void ln_backward_fused_k(const TY* dy, int lddy, XIn xin, const float* mean, const float* rstd,
                                    const float* w, int M, int C, int rows_per, Out out, float* part) {
  __shared__ float2 sh[32];
  __shared__ float xhat[kFusedColumns];
  __shared__ float acc[K][kFusedColumns];
  for (int c = threadIdx.x; c < C; c += blockDim.x)
    for (int k = 0; k < K; ++k) acc[k][c] = 0.f;
  const int64_t r0 = int64_t(blockIdx.x) * rows_per, r1 = r0 + rows_per < M ? r0 + rows_per : M;
  for (int64_t r = r0; r < r1; ++r)  // the same rows for every thread: each reaches the barriers
    ln_backward_row(
        dy + r * lddy, xin, r, mean[r], rstd[r], w, C, xhat, out, sh,
        [&](int c, float d, float xh) {
          acc[0][c] += d * xh;
          acc[1][c] += d;
        },
        [&](int c, float held) {
          if constexpr (K == 3) acc[2][c] += held;
        });
  for (int c = threadIdx.x; c < C; c += blockDim.x)
    for (int k = 0; k < K; ++k) part[(int64_t(blockIdx.x) * K + k) * C + c] = acc[k][c];
}

// The whole backward; where dsum is given, the column sums of what out holds after it
// are added to dsum too. Fused where the rows fit; else dw and db first (they read x,
// which out may overwrite), then dx, then the sums of what out wrote (out.column_sums).
template <typename XIn, typename Out, typename TY>
void layernorm_backward_with(const TY* dy, int lddy, XIn xin, const float* mean, const float* rstd, const float* w,
                             int M, int C, Out out, float* dw, float* db, float* dsum = nullptr) {
  if (M <= 0) return;
  if (C <= kWarpColumns) {  // a warp per row
    with_per_lane(C, [&](auto per_lane) {
      using PL = decltype(per_lane);
      const auto run = [&](auto k) {
        constexpr int K = decltype(k)::value, warps = warp_block_warps(K, PL::value);
        const int rows_per = warp_rows_per(M, warps), chunks = (M + rows_per - 1) / rows_per;
        float* part = static_cast<float*>(scratch(sizeof(float) * size_t(K) * size_t(chunks) * C));
        GMLP_LAUNCH((ln_backward_warp_k<K, PL::value>), unsigned(chunks), unsigned(32 * warps))(
            dy, lddy, xin, mean, rstd, w, M, C, rows_per, out, part);
        finish_column_sums(part, chunks, K, C, dw, db, dsum);
      };
      if (dsum)
        run(std::integral_constant<int, 3>{});
      else
        run(std::integral_constant<int, 2>{});
    });
    check_launch("layernorm backward (a warp per row)");
    return;
  }
  if (C <= kFusedColumns) {  // a block per chunk of rows
    const int rows_per = fused_rows_per(M), chunks = (M + rows_per - 1) / rows_per, K = dsum ? 3 : 2;
    float* part = static_cast<float*>(scratch(sizeof(float) * size_t(K) * size_t(chunks) * C));
    if (dsum) {
      GMLP_LAUNCH(ln_backward_fused_k<3>, unsigned(chunks), kRowThreads)(dy, lddy, xin, mean, rstd, w, M, C, rows_per,
                                                                         out, part);
    } else {
      GMLP_LAUNCH(ln_backward_fused_k<2>, unsigned(chunks), kRowThreads)(dy, lddy, xin, mean, rstd, w, M, C, rows_per,
                                                                         out, part);
    }
    finish_column_sums(part, chunks, K, C, dw, db, dsum);
    check_launch("layernorm backward (fused)");
    return;
  }
  const int rows_per = rows_per_chunk(M), chunks = (M + rows_per - 1) / rows_per;
  float* part = static_cast<float*>(scratch(sizeof(float) * 2 * size_t(chunks) * C));
  GMLP_LAUNCH(ln_backward_dwdb_partial_k, column_sum_grid(C, chunks), column_sum_block())(dy, lddy, xin, mean, rstd, M,
                                                                                          C, rows_per, part);
  finish_column_sums(part, chunks, 2, C, dw, db, nullptr);
  GMLP_LAUNCH(ln_backward_dx_k, unsigned(M), kRowThreads)(dy, lddy, xin, mean, rstd, w, C, out);
  check_launch("layernorm backward");
  if (dsum) out.column_sums(M, C, dsum);
}

}  // namespace gmlp::cuda
