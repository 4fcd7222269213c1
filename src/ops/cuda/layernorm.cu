// LayerNorm on the device: a block per row for the statistics; the backward a block
// per chunk of rows, dw and db as partial sums per chunk, then a fixed-order finish
// (layernorm.cuh).
#include "ops/cuda/layernorm.cuh"

namespace gmlp::cuda {

namespace {

// dx as it is in memory, overwritten or added to.
struct DxPlain {
  float* dx;
  int ld;
  bool accumulate;
  using Pre = float;  // what dx held, when added to
  template <int PerLane>
  __device__ void load_row(int64_t r, int lane, int C, Pre (&pre)[PerLane]) const {
    GMLP_UNROLL
    for (int j = 0; j < PerLane; ++j) pre[j] = accumulate ? dx[r * ld + lane_channel(lane, j, C)] : 0.f;
  }
  __device__ float store(Pre held, int64_t r, int c, float d) const {
    return dx[r * ld + c] = accumulate ? held + d : d;
  }
  __device__ float operator()(int64_t r, int c, float d) const {
    float* p = dx + r * ld + c;
    return *p = accumulate ? *p + d : d;
  }
  void column_sums(int M, int C, float* sum) const { colsum_add(dx, M, C, ld, sum); }
};

}  // namespace

void layernorm_forward(const float* x, int ldx, int M, int C, const float* w, const float* b, float eps, float* y,
                       int ldy, float* mean, float* rstd) {
  layernorm_forward_with(XPlain{x, ldx}, M, C, w, b, eps, YPlain{y, ldy}, mean, rstd);
}

void layernorm_forward_bf16(const float* x, int ldx, int M, int C, const float* w, const float* b, float eps,
                            float* y, uint16_t* y16, int ldy, float* mean, float* rstd) {
  layernorm_forward_with(XPlain{x, ldx}, M, C, w, b, eps, YBf16{y16, y, ldy}, mean, rstd);
}

void decode_layernorm(const float* x, int ldx, int R, int C, const float* w, const float* b, float eps, float* y,
                      int ldy, const int32_t* rows) {
  layernorm_forward_with(XPlain{x, ldx}, R, C, w, b, eps, YPlain{y, ldy, rows}, nullptr, nullptr);
}

void layernorm_apply(const float* x, int ldx, int M, int C, const float* w, const float* b, const float* mean,
                     const float* rstd, float* y, int ldy) {
  if (M <= 0) return;
  GMLP_LAUNCH(ln_apply_k, blocks_for(int64_t(M) * C), kThreads)(XPlain{x, ldx}, M, C, w, b, mean, rstd, YPlain{y, ldy});
  check_launch("layernorm apply");
}

void layernorm_apply_bf16(const float* x, int ldx, int M, int C, const float* w, const float* b, const float* mean,
                          const float* rstd, float* y, uint16_t* y16, int ldy) {
  if (M <= 0) return;
  GMLP_LAUNCH(ln_apply_k, blocks_for(int64_t(M) * C), kThreads)(XPlain{x, ldx}, M, C, w, b, mean, rstd,
                                                                YBf16{y16, y, ldy});
  check_launch("layernorm apply (bf16)");
}

void layernorm_backward(const float* dy, int lddy, const float* x, int ldx, const float* mean, const float* rstd,
                        const float* w, int M, int C, float* dx, int lddx, bool accumulate_dx, float* dw, float* db) {
  layernorm_backward_with(dy, lddy, XPlain{x, ldx}, mean, rstd, w, M, C, DxPlain{dx, lddx, accumulate_dx}, dw, db);
}

}  // namespace gmlp::cuda
