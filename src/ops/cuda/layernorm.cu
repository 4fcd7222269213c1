// LayerNorm on the device over plain rows of floats: the kernels are layernorm.cuh's
// (rows held in registers, a warp's or a block's, up to 2,048 channels; wider, a block per
// row); the backward's dw and db partial sums per chunk of rows, then a fixed-order
// finish.
#include "ops/cuda/layernorm.cuh"

#include <algorithm>
#include <cstdlib>
#include <string>

#include "gmlp/error.h"
#include "ops/fast_div.h"

namespace gmlp::cuda {

namespace {

// dx as it is in memory, overwritten or added to.
struct DxPlain {
  float* dx;
  int ld;
  bool accumulate;
  using Pre = float;  // what dx held, when added to
  template <int N, typename Slots>
  __device__ void load_row(int64_t r, Slots s, int C, Pre (&pre)[N]) const {
    const float* row = dx + r * ld;
    GMLP_UNROLL
    for (int j = 0; j < N; ++j) pre[j] = accumulate ? row[s.loaded(j, C)] : 0.f;
  }
  __device__ float store(Pre held, int64_t r, int c, float d) const {
    return dx[r * ld + c] = accumulate ? held + d : d;
  }
  __device__ float operator()(int64_t r, int c, float d) const {
    return store(accumulate ? dx[r * ld + c] : 0.f, r, c, d);
  }
  void column_sums(int M, int C, float* sum) const { colsum_add(dx, M, C, ld, sum); }
};

}  // namespace

#if defined(GMLP_CUDA_EMULATED)
EmuRows emu_rows() {  // read at each launch: a test sets it around the ops it runs
  const char* v = std::getenv("GMLP_CUDA_EMU_ROWS");
  if (!v || !*v) return EmuRows::emulator;
  const std::string e = v;
  if (e == "gpu") return EmuRows::gpu;
  if (e == "gpu-blocks") return EmuRows::gpu_blocks;
  throw Error("GMLP_CUDA_EMU_ROWS: '" + e + "' is not gpu or gpu-blocks");
}
#endif

int warp_columns() {
  static const int columns = [] {
    const char* v = std::getenv("GMLP_CUDA_LN_WARP_COLUMNS");
    if (!v || !*v) return kWarpColumnsMax;
    char* end = nullptr;
    const long n = std::strtol(v, &end, 10);
    if (*end || n < 0 || n > kWarpColumnsMax)
      throw Error("GMLP_CUDA_LN_WARP_COLUMNS: '" + std::string(v) + "' is not a number of channels from 0 to " +
                  std::to_string(kWarpColumnsMax));
    return int(n);
  }();
  return std::min(columns, warp_columns_max());
}

void layernorm_forward(const float* x, int ldx, int M, int C, const float* w, const float* b, float eps, float* y,
                       int ldy, float* mean, float* rstd) {
  layernorm_forward_with(XPlain{x, ldx}, M, C, w, b, eps, YPlain{y, ldy}, mean, rstd);
}

void layernorm_forward_bf16(const float* x, int ldx, int M, int C, const float* w, const float* b, float eps,
                            float* y, uint16_t* y16, int ldy, float* mean, float* rstd) {
  layernorm_forward_with(XPlain{x, ldx}, M, C, w, b, eps, YBf16{y16, y, ldy}, mean, rstd);
}

namespace {
// x = x_before + keep[b] h: the stochastic-depth residual of the block before (rows
// time-major, row r of batch row r % B), formed as the LayerNorm reads each row and
// written to `to` (the block's input, which its backward reads), where a pass of its own
// wrote x and the LayerNorm read it back. One fused multiply-add, as k_residual_keep
// takes it: written out, whether a compiler fuses x + k h is its own choice, made apart
// at each place the expression appears (g++ -march=native, the emulator's, did not make
// it alike in the two kernels, nor in the looped kernel's passes over a row), and the
// bits would differ.
struct XKeepResidual {
  const float *x, *h, *keep;
  float* to;
  int ld;
  ops::FastDiv B;
  using Raw = float3;  // x, h, and the row's keep
  template <int N, typename Slots>
  __device__ void load_row(int64_t r, Slots s, int C, Raw (&raw)[N]) const {
    const float k = keep[B.mod(uint32_t(r))];
    const float *xr = x + r * ld, *hr = h + r * ld;
    GMLP_UNROLL
    for (int j = 0; j < N; ++j) raw[j] = float3{xr[s.loaded(j, C)], hr[s.loaded(j, C)], k};
  }
  __device__ float value(Raw v, int) const { return fmaf(v.z, v.y, v.x); }
  __device__ float operator()(int64_t r, int c) const {
    return fmaf(keep[B.mod(uint32_t(r))], h[r * ld + c], x[r * ld + c]);
  }
  __device__ void settle(int64_t r, int c, float v) const { to[r * ld + c] = v; }
};
}  // namespace

void residual_keep_layernorm_bf16(const float* x, const float* keep, const float* h, int M, int B, int d, float* out,
                                  const float* w, const float* b, float eps, uint16_t* y16, float* mean,
                                  float* rstd) {
  layernorm_forward_with(XKeepResidual{x, h, keep, out, d, ops::FastDiv(uint32_t(B))}, M, d, w, b, eps,
                         YBf16{y16, nullptr, d}, mean, rstd);
}

void decode_layernorm(const float* x, int ldx, int R, int C, const float* w, const float* b, float eps, float* y,
                      int ldy, const int32_t* rows) {
  layernorm_forward_with(XPlain{x, ldx}, R, C, w, b, eps, YPlain{y, ldy, rows}, nullptr, nullptr);
}

void layernorm_apply(const float* x, int ldx, int M, int C, const float* w, const float* b, const float* mean,
                     const float* rstd, float* y, int ldy) {
  layernorm_apply_with(XPlain{x, ldx}, M, C, w, b, mean, rstd, YPlain{y, ldy});
  check_launch("layernorm apply");
}

void layernorm_apply_bf16(const float* x, int ldx, int M, int C, const float* w, const float* b, const float* mean,
                          const float* rstd, float* y, uint16_t* y16, int ldy) {
  layernorm_apply_with(XPlain{x, ldx}, M, C, w, b, mean, rstd, YBf16{y16, y, ldy});
  check_launch("layernorm apply (bf16)");
}

void layernorm_backward(const float* dy, int lddy, const float* x, int ldx, const float* mean, const float* rstd,
                        const float* w, int M, int C, float* dx, int lddx, bool accumulate_dx, float* dw, float* db) {
  layernorm_backward_with(dy, lddy, XPlain{x, ldx}, mean, rstd, w, M, C, DxPlain{dx, lddx, accumulate_dx}, dw, db);
}

}  // namespace gmlp::cuda
