#pragma once
// F = W G over bf16 operands on the tensor cores (the warp matrix functions, wmma), each
// tile of F handed as floats to an epilogue that writes what the caller wants of it: the
// SGU's forward takes F and S = combine(Z, F + bias) there (sgu.cu), where cuBLAS's
// product wrote F and a pass of its own read F and U back to write S. W [T, T] and G
// [T, N] are row-major, W's rows padded with zeros to ldw (a multiple of 8 values), so
// that every load is 16 bytes: the layers' bf16 copies of W are (spatial.cu).
//
// A block of four warps takes a tile of kMixRows positions by kMixCols columns, a warp
// 32 x 64 of it (2 x 4 fragments), K in chunks of kMixK staged in shared memory, each
// chunk's loads in flight in registers while the warps multiply the chunk before;
// positions past T are zeros in, and the epilogue is not called for them (nor are
// fragments wholly past T multiplied). A causal W's zeros above the diagonal are read
// only within the diagonal's tiles: a tile's K ends with its last position. The
// epilogue's own loads (the SGU's U) are all issued before its first sum is read. The
// grid's x runs over the position tiles, so that the blocks reading the same columns
// of G run together and G comes from DRAM about once. Written without a GPU to time it (docs/bench-gpu.md, session 50): the
// simple form, one stage of shared memory and the warp matrix functions, not Hopper's
// asynchronous copies and warpgroup products.
#include <cuda_bf16.h>  // the emulator's stand-ins under GMLP_CUDA_EMULATED (tests/cuda_emu)
#include <mma.h>

#include "ops/cuda/common.cuh"

namespace gmlp::cuda {

constexpr int kMixRows = 64, kMixCols = 128, kMixK = 32, kMixThreads = 128;

struct MixOperands {
  const uint16_t* W;  // [T, T], rows ldw apart, zeros from T to ldw
  int ldw;
  const uint16_t* G;  // [T, N], rows ld apart
  int64_t ld;
  int T;
  int64_t N;
  bool lower = false;  // W zero above its diagonal (causal): a tile's K ends at its last position
};

// Whether mix_then takes these operands: every row 16 bytes aligned, and few enough
// column tiles for the grid's y.
inline bool mix_then_fits(const MixOperands& o) {
  return o.T > 0 && o.N > 0 && o.ldw % 8 == 0 && o.ldw >= o.T && o.ld % 8 == 0 && o.N % 8 == 0 &&
         vec_aligned<8>(o.W) && vec_aligned<8>(o.G) && (o.N + kMixCols - 1) / kMixCols <= 65535;
}

// Shared memory rows padded by 16 bytes (the fragments' rows must be 16-byte multiples,
// their starts 32-byte aligned: every offset below is).
constexpr int kMixLdA = kMixK + 8, kMixLdB = kMixCols + 8, kMixLdC = kMixCols + 4;
union alignas(128) MixShared {
  struct {
    uint16_t a[kMixRows][kMixLdA];  // W's rows of the tile, the chunk's columns
    uint16_t b[kMixK][kMixLdB];     // G's rows of the chunk, the tile's columns
  } in;
  float c[kMixRows][kMixLdC];  // the tile's sums, for the epilogue
};

// A chunk of K's operands on their way from global memory to shared memory: a thread's
// share, in registers, so that the next chunk's loads are in flight while the warps
// multiply the chunk before (kMixThreads threads: W's tile 2 loads of 16 bytes each, G's 4).
struct MixChunk {
  static constexpr int kA = kMixRows * kMixK / 8 / kMixThreads, kB = kMixK * kMixCols / 8 / kMixThreads;
  uint16_t a[kA][8], b[kB][8];
  __device__ void load(const MixOperands& o, int m0, int64_t n0, int k0) {
    GMLP_UNROLL
    for (int q = 0; q < kA; ++q) {
      const int v = int(threadIdx.x) + q * kMixThreads, r = v / (kMixK / 8), c = v % (kMixK / 8) * 8;
      const int t = m0 + r, s = k0 + c;
      if (t < o.T && s < o.ldw) {
        load_vec<8>(o.W + int64_t(t) * o.ldw + s, a[q]);
      } else {
        GMLP_UNROLL
        for (int e = 0; e < 8; ++e) a[q][e] = 0;
      }
    }
    GMLP_UNROLL
    for (int q = 0; q < kB; ++q) {
      const int v = int(threadIdx.x) + q * kMixThreads, r = v / (kMixCols / 8), c = v % (kMixCols / 8) * 8;
      const int s = k0 + r;
      if (s < o.T && n0 + c < o.N) {
        load_vec<8>(o.G + int64_t(s) * o.ld + n0 + c, b[q]);
      } else {
        GMLP_UNROLL
        for (int e = 0; e < 8; ++e) b[q][e] = 0;
      }
    }
  }
  __device__ void store(MixShared& sm) const {
    GMLP_UNROLL
    for (int q = 0; q < kA; ++q) {
      const int v = int(threadIdx.x) + q * kMixThreads;
      store_vec<8>(&sm.in.a[v / (kMixK / 8)][v % (kMixK / 8) * 8], a[q]);
    }
    GMLP_UNROLL
    for (int q = 0; q < kB; ++q) {
      const int v = int(threadIdx.x) + q * kMixThreads;
      store_vec<8>(&sm.in.b[v / (kMixCols / 8)][v % (kMixCols / 8) * 8], b[q]);
    }
  }
};

// The epilogue: epi.load(t, col) what it reads besides F (all of a thread's loads issued
// before the first is used), then epi(t, col, x, loaded) with x the 8 sums of
// F[t, col .. col + 7].
template <typename Epi>
__global__ void GMLP_BOUNDS(kMixThreads, 3) k_mix_then(MixOperands o, Epi epi) {
  namespace wmma = nvcuda::wmma;
  using Bf = __nv_bfloat16;
  __shared__ MixShared sm;
  const int m0 = int(blockIdx.x) * kMixRows;
  const int64_t n0 = int64_t(blockIdx.y) * kMixCols;
  const int warp = int(threadIdx.x) / 32, wr = (warp / 2) * 32, wc = (warp % 2) * 64;
  wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc[2][4];
  GMLP_UNROLL
  for (int i = 0; i < 2; ++i)
    GMLP_UNROLL
  for (int j = 0; j < 4; ++j) wmma::fill_fragment(acc[i][j], 0.f);
  const int k_end = o.lower ? min(o.T, m0 + kMixRows) : o.T;
  MixChunk chunk;
  chunk.load(o, m0, n0, 0);
  for (int k0 = 0; k0 < k_end; k0 += kMixK) {
    chunk.store(sm);
    __syncthreads();
    if (k0 + kMixK < k_end) chunk.load(o, m0, n0, k0 + kMixK);  // in flight through the products
    GMLP_UNROLL
    for (int kk = 0; kk < kMixK; kk += 16) {
      wmma::fragment<wmma::matrix_b, 16, 16, 16, Bf, wmma::row_major> b[4];
      GMLP_UNROLL
      for (int j = 0; j < 4; ++j)
        wmma::load_matrix_sync(b[j], reinterpret_cast<const Bf*>(&sm.in.b[kk][wc + 16 * j]), kMixLdB);
      GMLP_UNROLL
      for (int i = 0; i < 2; ++i) {
        if (m0 + wr + 16 * i >= o.T) continue;  // the whole fragment past T: the same in every lane
        wmma::fragment<wmma::matrix_a, 16, 16, 16, Bf, wmma::row_major> a;
        wmma::load_matrix_sync(a, reinterpret_cast<const Bf*>(&sm.in.a[wr + 16 * i][kk]), kMixLdA);
        GMLP_UNROLL
        for (int j = 0; j < 4; ++j) wmma::mma_sync(acc[i][j], a, b[j], acc[i][j]);
      }
    }
    __syncthreads();  // the chunk read before the next overwrites it, or the sums do
  }
  GMLP_UNROLL
  for (int i = 0; i < 2; ++i)
    GMLP_UNROLL
  for (int j = 0; j < 4; ++j)
    wmma::store_matrix_sync(&sm.c[wr + 16 * i][wc + 16 * j], acc[i][j], kMixLdC, wmma::mem_row_major);
  constexpr int kOut = kMixRows * kMixCols / 8 / kMixThreads;
  typename Epi::Loaded loaded[kOut];
  GMLP_UNROLL
  for (int q = 0; q < kOut; ++q) {
    const int v = int(threadIdx.x) + q * kMixThreads, t = m0 + v / (kMixCols / 8);
    const int64_t col = n0 + v % (kMixCols / 8) * 8;
    if (t < o.T && col < o.N) loaded[q] = epi.load(t, col);
  }
  __syncthreads();
  GMLP_UNROLL
  for (int q = 0; q < kOut; ++q) {
    const int v = int(threadIdx.x) + q * kMixThreads, r = v / (kMixCols / 8), c = v % (kMixCols / 8) * 8;
    const int t = m0 + r;
    const int64_t col = n0 + c;
    if (t >= o.T || col >= o.N) continue;
    float x[8];
    GMLP_UNROLL
    for (int e = 0; e < 8; ++e) x[e] = sm.c[r][c + e];
    epi(t, col, x, loaded[q]);
  }
}

template <typename Epi>
void mix_then(const MixOperands& o, const Epi& epi) {
  const dim3 grid(unsigned((o.T + kMixRows - 1) / kMixRows), unsigned((o.N + kMixCols - 1) / kMixCols));
  GMLP_LAUNCH(k_mix_then<Epi>, grid, kMixThreads)(o, epi);
}

}  // namespace gmlp::cuda
