#pragma once
// The CPU backend: host memory, and the ops of src/ops/ called as they are. Not final:
// the tests derive a backend that keeps its memory apart from the host's, to exercise a
// device model's mirrors and uploads without a device.
#include <cstdint>
#include <cstdlib>
#include <cstring>

#include "backend/backend.h"
#include "gmlp/error.h"

namespace gmlp {

class CpuBackend : public Backend {
 public:
  static constexpr size_t kAlign = 64;  // bytes: one cache line, one AVX-512 vector
  Device device() const override { return Device::cpu; }
  std::string device_name() const override { return "cpu"; }
  bool host_memory() const override { return true; }
  void set_precision(Precision p) override;

  // Cache-line aligned: glibc's calloc returns a large block 16 bytes past a page
  // boundary, and then every 64-byte vector load of it straddled two lines (an
  // annotated training step ran 3% slower, 1425 ms against 1380). calloc still
  // provides the memory, so pages never touched stay unmapped; the block's own start
  // is kept just before p.
  void* alloc(size_t bytes) override {
    if (bytes == 0) return nullptr;
    void* raw = std::calloc(1, bytes + kAlign);
    require(raw != nullptr, "out of memory allocating " + std::to_string(bytes) + " bytes");
    void* p = reinterpret_cast<void*>((reinterpret_cast<uintptr_t>(raw) + kAlign) & ~uintptr_t(kAlign - 1));
    static_cast<void**>(p)[-1] = raw;
    return p;
  }
  void release(void* p) override {
    if (p) std::free(static_cast<void**>(p)[-1]);
  }
  void upload(void* dst, const void* src, size_t bytes) override { copy(dst, src, bytes); }
  void download(void* dst, const void* src, size_t bytes) override { copy(dst, src, bytes); }
  void copy(void* dst, const void* src, size_t bytes) override {
    if (bytes && dst != src) std::memmove(dst, src, bytes);
  }
  void zero(void* p, size_t bytes) override {
    if (bytes) std::memset(p, 0, bytes);
  }

  void synchronize() override {}

  void gemm(bool ta, bool tb, int M, int N, int K, float alpha, const float* A, int lda, const float* B, int ldb,
            float beta, float* C, int ldc) override {
    ops::gemm(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
  }
  void linear_forward(const float* x, int M, int in, const float* W, const float* b, int out, float* y) override {
    ops::linear_forward(x, M, in, W, b, out, y);
  }
  void linear_backward(const float* dy, const float* x, int M, int in, const float* W, int out, float* dx, bool acc,
                       float* dW, float* db) override {
    ops::linear_backward(dy, x, M, in, W, out, dx, acc, dW, db);
  }
  void layernorm_forward(const float* x, int ldx, int M, int C, const float* w, const float* b, float eps, float* y,
                         int ldy, float* mean, float* rstd) override {
    ops::layernorm_forward(x, ldx, M, C, w, b, eps, y, ldy, mean, rstd);
  }
  void layernorm_apply(const float* x, int ldx, int M, int C, const float* w, const float* b, const float* mean,
                       const float* rstd, float* y, int ldy) override {
    ops::layernorm_apply(x, ldx, M, C, w, b, mean, rstd, y, ldy);
  }
  void layernorm_backward(const float* dy, int lddy, const float* x, int ldx, const float* mean, const float* rstd,
                          const float* w, int M, int C, float* dx, int lddx, bool acc, float* dw,
                          float* db) override {
    ops::layernorm_backward(dy, lddy, x, ldx, mean, rstd, w, M, C, dx, lddx, acc, dw, db);
  }
  void gelu_forward(const float* x, float* y, int64_t n, bool t) override { ops::gelu_forward(x, y, n, t); }
  void bias_gelu_forward(float* u, const float* b, int M, int n, float* y, bool t) override {
    ops::bias_gelu_forward(u, b, M, n, y, t);
  }
  void gelu_backward(const float* x, const float* dy, float* dx, int64_t n, bool t) override {
    ops::gelu_backward(x, dy, dx, n, t);
  }
  void toeplitz_materialize(const float* w, int n, bool causal, int T, float* W) override {
    ops::toeplitz_materialize(w, n, causal, T, W);
  }
  void toeplitz_fold(const float* dW, int T, int n, bool causal, float* dw) override {
    ops::toeplitz_fold(dW, T, n, causal, dw);
  }
  void sgu_forward(const ops::SguParams& p, const float* Z, int T, int B, int f, float* S, float* gmean,
                   float* grstd, float* F, float* G, const float* extra) override {
    ops::sgu_forward(p, Z, T, B, f, S, gmean, grstd, F, G, extra);
  }
  void sgu_combine(Sgu kind, const float* Z, int ldz, const float* F, int M, int g, float* S) override {
    ops::sgu_combine(kind, Z, ldz, F, M, g, S);
  }
  void sgu_backward_gate(const ops::SguParams& p, const float* dS, const float* Z, int T, int B, int f,
                         const float* F, float* S, float* dF, float* dZ) override {
    ops::sgu_backward_gate(p, dS, Z, T, B, f, F, S, dF, dZ);
  }
  void sgu_backward_mix(const ops::SguParams& p, const ops::SguGrads& g, const float* dS, const float* Z, int T,
                        int B, int f, const float* gmean, const float* grstd, const float* F, float* dZ, float* G,
                        float* dF, float* dG) override {
    ops::sgu_backward_mix(p, g, dS, Z, T, B, f, gmean, grstd, F, dZ, G, dF, dG);
  }
  void tiny_attention_forward(const ops::AttnParams& p, const float* H, int T, int B, float* qkv, float* P, float* O,
                              float* A) override {
    ops::tiny_attention_forward(p, H, T, B, qkv, P, O, A);
  }
  void tiny_attention_backward(const ops::AttnParams& p, const ops::AttnGrads& g, const float* dA, const float* H,
                               int T, int B, const float* qkv, const float* P, const float* O, float* dH, float* dO,
                               float* dP, float* dqkv) override {
    ops::tiny_attention_backward(p, g, dA, H, T, B, qkv, P, O, dH, dO, dP, dqkv);
  }
  void extract_patches(ops::Pixels images, int B, int C, int Hi, int Wi, int ph, int pw, float* out) override {
    ops::extract_patches(images, B, C, Hi, Wi, ph, pw, out);
  }
  void embedding_forward(const float* E, int d, const int32_t* tokens, int M, int B, const float* pe,
                         float* x) override {
    ops::embedding_forward(E, d, tokens, M, B, pe, x);
  }
  void embedding_backward(const float* dx, int d, const int32_t* tokens, int M, int /*V*/, float* dE) override {
    ops::embedding_backward(dx, d, tokens, M, dE);
  }
  void cross_entropy(const float* logits, int M, int V, const int32_t* targets, float* dlogits, double* loss,
                     int64_t mean_over, bool add, const ops::SoftTargets& soft) override {
    const double mean = ops::cross_entropy(logits, M, V, targets, dlogits, nullptr, mean_over, soft);
    *loss = add ? *loss + mean : mean;
  }
  void residual_bias(const float* x, const float* b, int M, int d, float* out) override {
    ops::residual_bias(x, b, M, d, out);
  }
  void residual_keep(const float* x, const float* keep, const float* h, int M, int B, int d, float* out) override {
    ops::residual_keep(x, keep, h, M, B, d, out);
  }
  void scale_rows(const float* keep, const float* dx, int M, int B, int d, float* out) override {
    ops::scale_rows(keep, dx, M, B, d, out);
  }
  void residual_dropout(const float* x, const float* h, const float* keep, const ops::DropMask& mask, int M, int B,
                        int d, float* out) override {
    ops::residual_add(x, h, keep, mask, M, B, d, out);
  }
  void residual_dropout_backward(const float* dout, const float* keep, const ops::DropMask& mask, int M, int B, int d,
                                 float* dh) override {
    ops::residual_branch_backward(dout, keep, mask, M, B, d, dh);
  }
  void dropout_apply(const float* x, const ops::DropMask& mask, int B, int d, float* y) override {
    ops::dropout_apply(x, mask, B, d, y);
  }
  void mean_pool_forward(const float* h, int T, int B, int d, const int32_t* lengths, float* pooled) override {
    ops::mean_pool_forward(h, T, B, d, lengths, pooled);
  }
  void mean_pool_backward(const float* dp, int T, int B, int d, const int32_t* lengths, float* dh) override {
    ops::mean_pool_backward(dp, T, B, d, lengths, dh);
  }
  void gather_rows(const float* src, const int32_t* rows, int K, int d, float* dst) override {
    ops::gather_rows(src, rows, K, d, dst);
  }
  void scatter_rows(const float* src, const int32_t* rows, int K, int M, int d, float* dst) override {
    ops::scatter_rows(src, rows, K, M, d, dst);
  }
  void decode_embed(const float* E, int d, const int32_t* tokens, const int32_t* pos, int R, const float* pe,
                    float* x) override {
    ops::decode_embed(E, d, tokens, pos, R, pe, x);
  }
  void decode_linear(const float* W, int out, int in, const float* X, int R, const float* b, float* Y,
                     bool accumulate) override {
    ops::decode_linear(W, out, in, X, R, b, Y, accumulate);
  }
  void decode_layernorm(const float* x, int ldx, int R, int C, const float* w, const float* b, float eps, float* y,
                        int ldy, const int32_t* rows) override {
    ops::decode_layernorm(x, ldx, R, C, w, b, eps, y, ldy, rows);
  }
  void decode_mix(const float* G, int n, int g, int heads, const float* W, int64_t wsz, bool toeplitz,
                  const float* bias, const int32_t* stream, const int32_t* pos, int R, float* F) override {
    ops::decode_mix(G, n, g, heads, W, wsz, toeplitz, bias, stream, pos, R, F);
  }
  void decode_attention(const ops::AttnParams& p, const float* h, const int32_t* stream, const int32_t* pos, int R,
                        int n, float* qkv, float* P, float* O, float* A, float* F) override {
    ops::decode_attention(p, h, stream, pos, R, n, qkv, P, O, A, F);
  }
  void adamw_update(float* p, const float* g, float* m, float* v, size_t n, const ops::AdamWStep& s) override {
    ops::adamw_update(p, g, m, v, n, s);
  }
  void sum_squares(const float* x, size_t n, double* sum_squares) override { *sum_squares = ops::sum_squares(x, n); }
  void clip_scale(float* x, size_t n, const double* sum_squares, float max_norm) override {
    ops::clip_scale(x, n, *sum_squares, max_norm);
  }
  void scale(float* x, size_t n, float c) override { ops::scale(x, n, c); }
  void ema_update(float* avg, const float* x, size_t n, float decay, float rest) override {
    ops::ema_update(avg, x, n, decay, rest);
  }
};


}  // namespace gmlp
