#pragma once
// The CUDA forms of the ops of ops/ops.h: the same names, shapes and contracts, over
// device pointers, each in the .cu file named like its CPU file. Every launch goes on
// the legacy default stream, so work runs in the order it is issued and a copy back to
// the host waits for what came before it. cuda_backend.cpp wraps these as a Backend.
#include <cstddef>
#include <cstdint>

#include "ops/ops.h"

namespace gmlp::cuda {

// Throws gmlp::Error naming `what` when the last CUDA call or launch failed.
void check(int status, const char* what);
void check_launch(const char* what);
// A scratch area of device memory reused by every op (grown, never shrunk).
void* scratch(size_t bytes);
// n counters in device memory, zero between launches: a launch that counts in them
// leaves them at zero (common.cuh's column_sums_finished). Grown, never shrunk.
unsigned* zeroed_counters(int n);
// Device memory in use by the backend (allocations and scratch), now and at its peak; every
// cudaMalloc and cudaFree of the backend reports its size here.
void count_device_bytes(int64_t delta);
size_t peak_device_bytes();
size_t live_device_bytes();

// The products' precision for the rest of the process (gmlp/device.h): fp32 (the
// default) or bf16 inputs with fp32 accumulation on tensor cores.
void set_bf16_products(bool on);

// The widest rows the LayerNorms take a warp per row (layernorm_rows.cuh): all the warp
// kernels take, or fewer by GMLP_CUDA_LN_WARP_COLUMNS (read once; an error if it is not
// a number from 0 to that).
int warp_columns();
// Whether the bf16 SGU forward takes its spatial product and combine together where
// they apply (sgu.cu): GMLP_CUDA_SPATIAL_COMBINE "on"; unset or "off", not; read at each
// call, so that a test can set it; an error naming the variable for any other value.
bool spatial_combine_on();

// gemm.cu (cuBLAS; in fp32 no TF32, so results stay within float rounding of the CPU).
void gemm(bool trans_a, bool trans_b, int M, int N, int K, float alpha, const float* A, int lda, const float* B,
          int ldb, float beta, float* C, int ldc);

// count products C_i = alpha op(A_i) op(B_i) + beta C_i, each operand stride elements
// after the last (0: the same A or B for every product; the C_i must not overlap), in
// one cuBLAS call.
void gemm_batched(bool trans_a, bool trans_b, int M, int N, int K, float alpha, const float* A, int lda, int64_t sa,
                  const float* B, int ldb, int64_t sb, float beta, float* C, int ldc, int64_t sc, int count);

// The same over operands held as bf16 bits (Backend::gemm_bf16), summed in float, into
// float C, or into bf16 C rounded once.
void gemm(bool trans_a, bool trans_b, int M, int N, int K, float alpha, const uint16_t* A, int lda, const uint16_t* B,
          int ldb, float beta, float* C, int ldc);
void gemm(bool trans_a, bool trans_b, int M, int N, int K, float alpha, const uint16_t* A, int lda, const uint16_t* B,
          int ldb, float beta, uint16_t* C, int ldc);
void gemm_batched(bool trans_a, bool trans_b, int M, int N, int K, float alpha, const uint16_t* A, int lda, int64_t sa,
                  const uint16_t* B, int ldb, int64_t sb, float beta, float* C, int ldc, int64_t sc, int count);
void gemm_batched(bool trans_a, bool trans_b, int M, int N, int K, float alpha, const uint16_t* A, int lda, int64_t sa,
                  const uint16_t* B, int ldb, int64_t sb, float beta, uint16_t* C, int ldc, int64_t sc, int count);

// rows x cols of X (rows ld apart), count of them stride apart (stride 0: one, shared),
// rounded to bf16 bits (ops/bf16.h) into out, rows ldo apart and each copy size after
// the last: the bf16 products' operand copies and the SGU's held U.
void to_bf16_rows(const float* X, int rows, int cols, int ld, int64_t stride, int count, int ldo, int64_t size,
                  uint16_t* out);
// count roundings, kBf16Copies at a launch (Backend::to_bf16_many: a step's projection
// weights); and one, n values of x into y (Backend::to_bf16).
constexpr int kBf16Copies = 64;
void to_bf16_many(const ops::Bf16Copy* copies, int count);
void to_bf16(const float* x, size_t n, uint16_t* y);
// y [M, N] = r + x W^T + b over bf16 x [M, K] and W [N, K] (r null: x W^T + b) in one
// cuBLASLt product, the bias in its epilogue and r read as its C; false where
// GMLP_CUDA_LT=off or cuBLASLt offers no algorithm for the shape (the caller seeds y
// and multiplies instead).
bool lt_linear_bf16(const uint16_t* x, int M, int K, const uint16_t* W, const float* b, int N, const float* r,
                    float* y);

// linear.cu
void linear_forward(const float* x, int M, int in, const float* W, const float* b, int out, float* y);
void linear_backward(const float* dy, const float* x, int M, int in, const float* W, int out, float* dx,
                     bool accumulate_dx, float* dW, float* db);
void colsum_add(const float* x, int M, int N, int ld, float* out);  // out[c] += sum_r x[r * ld + c]
void colsum_add(const uint16_t* x, int M, int N, int ld, float* out);  // over bf16 bits
// M rows of N of x rounded into y, and x's column sums added to sums, in one pass, row r
// scaled by row_scale[r % B] where given (Backend::to_bf16_summing_columns).
void to_bf16_summing_columns(const float* x, int M, int N, uint16_t* y, float* sums, const float* row_scale, int B);
// The same over bf16 x, dy16 and W (Backend::linear_forward_bf16); db from the float dy.
void linear_forward_bf16(const uint16_t* x, int M, int in, const uint16_t* W, const float* b, int out, float* y);
// y = r + x W^T + b over bf16 x and W (Backend::linear_residual_bf16).
void linear_residual_bf16(const uint16_t* x, int M, int in, const uint16_t* W, const float* b, int out,
                          const float* r, float* y);
void linear_backward_bf16(const uint16_t* dy16, const float* dy, const uint16_t* x, int M, int in, const uint16_t* W,
                          int out, float* dx, bool accumulate_dx, float* dW, float* db);

// layernorm.cu
void layernorm_forward(const float* x, int ldx, int M, int C, const float* w, const float* b, float eps, float* y,
                       int ldy, float* mean, float* rstd);
void layernorm_apply(const float* x, int ldx, int M, int C, const float* w, const float* b, const float* mean,
                     const float* rstd, float* y, int ldy);
// The output as bf16 bits into y16, and as floats into y too where y is given.
void layernorm_forward_bf16(const float* x, int ldx, int M, int C, const float* w, const float* b, float eps, float* y,
                            uint16_t* y16, int ldy, float* mean, float* rstd);
void layernorm_apply_bf16(const float* x, int ldx, int M, int C, const float* w, const float* b, const float* mean,
                          const float* rstd, float* y, uint16_t* y16, int ldy);
// out = x + keep[r % B] h (residual_keep) and its LayerNorm into y16, in one pass.
void residual_keep_layernorm_bf16(const float* x, const float* keep, const float* h, int M, int B, int d, float* out,
                                  const float* w, const float* b, float eps, uint16_t* y16, float* mean, float* rstd);
void layernorm_backward(const float* dy, int lddy, const float* x, int ldx, const float* mean, const float* rstd,
                        const float* w, int M, int C, float* dx, int lddx, bool accumulate_dx, float* dw, float* db);

// gelu.cu
void gelu_forward(const float* x, float* y, int64_t n, bool tanh_approx);
void bias_gelu_forward(float* u, const float* b, int M, int n, float* y, bool tanh_approx);
void gelu_backward(const float* x, const float* dy, float* dx, int64_t n, bool tanh_approx);

// spatial.cu
// count products, each cols wide, G's, F's, dF's and dG's columns stride after the
// last's (rows ld apart), all with the one W; a batch's dW are summed into dW. w16: the
// copies of W made beforehand (spatial_w_bf16_many) for bf16 operands, or null; the
// float forms take none (an error if given).
void spatial_mix_forward(const float* W, int ldw, bool causal, int T, int cols, const float* G, int ld, float* F,
                         int count = 1, int stride = 0, const uint16_t* w16 = nullptr);
void spatial_mix_backward(const float* W, int ldw, bool causal, int T, int cols, const float* G, const float* dF,
                          int ld, float* dG, float* dW, int count = 1, int stride = 0, const uint16_t* w16 = nullptr);
// The same over G, F, dF and dG in bf16 (training under bf16), with W rounded into a
// copy (w16, or one each call makes): F is the products' float sums rounded once.
void spatial_mix_forward(const float* W, int ldw, bool causal, int T, int cols, const uint16_t* G, int ld, uint16_t* F,
                         int count = 1, int stride = 0, const uint16_t* w16 = nullptr);
void spatial_mix_backward(const float* W, int ldw, bool causal, int T, int cols, const uint16_t* G, const uint16_t* dF,
                          int ld, uint16_t* dG, float* dW, int count = 1, int stride = 0,
                          const uint16_t* w16 = nullptr);
// W in bf16 as W (not W^T), rows padded_row<uint16_t>(T) apart with zeros from T on, and
// above the diagonal when causal: in w16 where the layers' copies were made, else a copy
// made now in scratch() (sgu.cu's product with the combine in its epilogue, mix_tiles.cuh).
const uint16_t* spatial_w_bf16_plain(const float* W, int ldw, int T, bool causal, const uint16_t* w16);
// Backend::spatial_w_bf16_many.
void spatial_w_bf16_many(const float* const* W, int layers, int ldw, int64_t head_stride, int heads, int T,
                         bool causal, uint16_t* out, int64_t layer_stride);
void toeplitz_materialize(const float* w, int n, bool causal, int T, float* W);
void toeplitz_fold(const float* dW, int T, int n, bool causal, float* dw);

// sgu.cu
void sgu_forward(const ops::SguParams& p, const float* Z, int T, int B, int f, float* S, float* gmean, float* grstd,
                 float* F, float* G, const float* extra);
void sgu_combine(Sgu kind, const float* Z, int ldz, const float* F, int M, int g, float* S);
void sgu_backward_gate(const ops::SguParams& p, const float* dS, const float* Z, int T, int B, int f, const float* F,
                       float* S, float* dF, float* dZ);
void sgu_backward_mix(const ops::SguParams& p, const ops::SguGrads& g, const float* dS, const float* Z, int T, int B,
                      int f, const float* gmean, const float* grstd, const float* F, float* dZ, float* G, float* dF,
                      float* dG);

// tiny_attention.cu
void tiny_attention_forward(const ops::AttnParams& p, const float* H, int T, int B, float* qkv, float* P, float* O,
                            float* A);
void tiny_attention_backward(const ops::AttnParams& p, const ops::AttnGrads& g, const float* dA, const float* H, int T,
                             int B, const float* qkv, const float* P, const float* O, float* dH, float* dO, float* dP,
                             float* dqkv);

// embedding.cu (token embedding and patches)
void embedding_forward(const float* E, int d, const int32_t* tokens, int M, int B, const float* pe, float* x);
void embedding_backward(const float* dx, int d, const int32_t* tokens, int M, int V, float* dE);
void extract_patches(ops::Pixels images, int B, int C, int Hi, int Wi, int ph, int pw, float* out);
void extract_patches(ops::Pixels images, int B, int C, int Hi, int Wi, int ph, int pw, uint16_t* out);

// dropout.cu: the masks computed from their counters as the kernels read them
// (ops/dropout_mask.h); keep (stochastic depth) may be null, the mask inactive.
void dropout_apply(const float* x, const ops::DropMask& mask, int B, int d, float* y);
void residual_dropout(const float* x, const float* h, const float* keep, const ops::DropMask& mask, int M, int B,
                      int d, float* out);
void residual_dropout_backward(const float* dout, const float* keep, const ops::DropMask& mask, int M, int B, int d,
                               float* dh);

// cross_entropy.cu: the mean loss, into *loss (device memory; added to it with add), over
// mean_over targets where that is > 0, soft targets as ops::SoftTargets (Backend::cross_entropy).
void cross_entropy(const float* logits, int M, int V, const int32_t* targets, float* dlogits, double* loss,
                   int64_t mean_over, bool add, const ops::SoftTargets& soft);

// rows.cu
void residual_bias(const float* x, const float* b, int M, int d, float* out);
void residual_keep(const float* x, const float* keep, const float* h, int M, int B, int d, float* out);
void scale_rows(const float* keep, const float* dx, int M, int B, int d, float* out);
void mean_pool_forward(const float* h, int T, int B, int d, const int32_t* lengths, float* pooled);
void mean_pool_backward(const float* dpooled, int T, int B, int d, const int32_t* lengths, float* dh);
void gather_rows(const float* src, const int32_t* rows, int K, int d, float* dst);
void scatter_rows(const float* src, const int32_t* rows, int K, int M, int d, float* dst);
void zero_padding(const int32_t* lengths, int T, int B, int C, float* X);
void zero_padding(const int32_t* lengths, int T, int B, int C, uint16_t* X);

// decode.cu (layernorm.cu: decode_layernorm): the cached decoder's one-token ops.
void decode_embed(const float* E, int d, const int32_t* tokens, const int32_t* pos, int R, const float* pe, float* x);
void decode_linear(const float* W, int out, int in, const float* X, int R, const float* b, float* Y, bool accumulate);
void decode_layernorm(const float* x, int ldx, int R, int C, const float* w, const float* b, float eps, float* y,
                      int ldy, const int32_t* rows);
void decode_mix(const float* G, int n, int g, int heads, const float* W, int64_t wsz, bool toeplitz,
                const float* bias, const int32_t* stream, const int32_t* pos, int R, float* F);
void decode_attention(const ops::AttnParams& p, const float* h, const int32_t* stream, const int32_t* pos, int R, int n,
                      float* qkv, float* P, float* O, float* A, float* F);

// adamw.cu
void adamw_update(float* p, const float* g, float* m, float* v, size_t n, const ops::AdamWStep& s);
void sum_squares(const float* x, size_t n, double* out);
void clip_scale(float* x, size_t n, const double* sum_squares, float max_norm);
void ema_update(float* avg, const float* x, size_t n, float decay, float rest);
void scale(float* x, size_t n, float c);

}  // namespace gmlp::cuda
