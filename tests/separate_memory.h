#pragma once
// The CPU backend with its memory kept apart from the host's: a model or decoder on it
// takes the path a device takes (host mirrors, uploads, read-backs), with the CPU's
// arithmetic, so its results must equal the CPU's bit for bit. Its memory is still host
// memory, so every op and copy also checks that each pointer it is given (the host side
// of an upload or download aside) lies in memory this backend handed out: a host pointer
// that would fault on a GPU fails the test here.
#include <cstring>
#include <initializer_list>
#include <map>
#include <string>
#include <vector>

#include "backend/cpu_backend.h"
#include "gmlp/error.h"

namespace gmlp::test {

class SeparateMemoryBackend final : public CpuBackend {
 public:
  bool host_memory() const override { return false; }
  void* alloc(size_t bytes) override {
    void* p = CpuBackend::alloc(bytes);
    if (p) live_[p] = bytes;
    return p;
  }
  void release(void* p) override {
    live_.erase(p);
    CpuBackend::release(p);
  }

  size_t live_bytes() const {
    size_t n = 0;
    for (const auto& [p, bytes] : live_) n += bytes;
    return n;
  }

  // What crossed between host and "device" since the caller last zeroed these, and the
  // AdamW update calls.
  size_t uploaded_bytes = 0, downloaded_bytes = 0, adamw_calls = 0;
  // adamw_calls at each download since the caller last cleared it: when the host waited.
  std::vector<size_t> adamw_calls_at_download;
  // The ops (copies aside; zeroing counts) called since the caller last zeroed `ops`, and
  // how many had been at each upload since it last cleared ops_at_upload.
  mutable size_t ops = 0;
  std::vector<size_t> ops_at_upload;

  // ---- every op and copy of the interface, checked, then the CPU's.
  void upload(void* dst, const void* host_src, size_t bytes) override {
    mine("upload", {dst});
    uploaded_bytes += bytes;
    ops_at_upload.push_back(ops);
    if (bytes) std::memcpy(dst, host_src, bytes);  // not CpuBackend's, which goes through copy()
  }
  void download(void* host_dst, const void* src, size_t bytes) override {
    mine("download", {src});
    downloaded_bytes += bytes;
    adamw_calls_at_download.push_back(adamw_calls);
    if (bytes) std::memcpy(host_dst, src, bytes);
  }
  void copy(void* dst, const void* src, size_t bytes) override {
    mine("copy", {dst, src});
    CpuBackend::copy(dst, src, bytes);
  }
  void zero(void* p, size_t bytes) override {
    mine("zero", {p});
    CpuBackend::zero(p, bytes);
  }
  void gemm(bool trans_a, bool trans_b, int M, int N, int K, float alpha, const float* A, int lda, const float* B,
            int ldb, float beta, float* C, int ldc) override {
    mine("gemm", {A, B, C});
    CpuBackend::gemm(trans_a, trans_b, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
  }
  void linear_forward(const float* x, int M, int in, const float* W, const float* b, int out, float* y) override {
    mine("linear_forward", {x, W, b, y});
    CpuBackend::linear_forward(x, M, in, W, b, out, y);
  }
  void linear_backward(const float* dy, const float* x, int M, int in, const float* W, int out, float* dx,
                       bool accumulate_dx, float* dW, float* db) override {
    mine("linear_backward", {dy, x, W, dx, dW, db});
    CpuBackend::linear_backward(dy, x, M, in, W, out, dx, accumulate_dx, dW, db);
  }
  void layernorm_forward(const float* x, int ldx, int M, int C, const float* w, const float* b, float eps, float* y,
                         int ldy, float* mean, float* rstd) override {
    mine("layernorm_forward", {x, w, b, y, mean, rstd});
    CpuBackend::layernorm_forward(x, ldx, M, C, w, b, eps, y, ldy, mean, rstd);
  }
  void layernorm_apply(const float* x, int ldx, int M, int C, const float* w, const float* b, const float* mean,
                       const float* rstd, float* y, int ldy) override {
    mine("layernorm_apply", {x, w, b, mean, rstd, y});
    CpuBackend::layernorm_apply(x, ldx, M, C, w, b, mean, rstd, y, ldy);
  }
  void layernorm_backward(const float* dy, int lddy, const float* x, int ldx, const float* mean, const float* rstd,
                          const float* w, int M, int C, float* dx, int lddx, bool accumulate_dx, float* dw,
                          float* db) override {
    mine("layernorm_backward", {dy, x, mean, rstd, w, dx, dw, db});
    CpuBackend::layernorm_backward(dy, lddy, x, ldx, mean, rstd, w, M, C, dx, lddx, accumulate_dx, dw, db);
  }
  void gelu_forward(const float* x, float* y, int64_t n, bool tanh_approx) override {
    mine("gelu_forward", {x, y});
    CpuBackend::gelu_forward(x, y, n, tanh_approx);
  }
  void bias_gelu_forward(float* u, const float* b, int M, int n, float* y, bool tanh_approx) override {
    mine("bias_gelu_forward", {u, b, y});
    CpuBackend::bias_gelu_forward(u, b, M, n, y, tanh_approx);
  }
  void gelu_backward(const float* x, const float* dy, float* dx, int64_t n, bool tanh_approx) override {
    mine("gelu_backward", {x, dy, dx});
    CpuBackend::gelu_backward(x, dy, dx, n, tanh_approx);
  }
  void toeplitz_materialize(const float* w, int n, bool causal, int T, float* W) override {
    mine("toeplitz_materialize", {w, W});
    CpuBackend::toeplitz_materialize(w, n, causal, T, W);
  }
  void toeplitz_fold(const float* dW, int T, int n, bool causal, float* dw) override {
    mine("toeplitz_fold", {dW, dw});
    CpuBackend::toeplitz_fold(dW, T, n, causal, dw);
  }
  void sgu_forward(const ops::SguParams& p, const float* Z, int T, int B, int f, float* S, float* gmean,
                   float* grstd, float* F, float* G, const float* extra) override {
    mine("sgu_forward", {p.norm_w, p.norm_b, p.W, p.bias, p.lengths, p.z.bias, Z, S, gmean, grstd, F, G, extra});
    CpuBackend::sgu_forward(p, Z, T, B, f, S, gmean, grstd, F, G, extra);
  }
  void sgu_combine(Sgu kind, const float* Z, int ldz, const float* F, int M, int g, float* S) override {
    mine("sgu_combine", {Z, F, S});
    CpuBackend::sgu_combine(kind, Z, ldz, F, M, g, S);
  }
  void sgu_backward_gate(const ops::SguParams& p, const float* dS, const float* Z, int T, int B, int f,
                         const float* F, float* S, float* dF, float* dZ) override {
    mine("sgu_backward_gate", {p.norm_w, p.norm_b, p.W, p.bias, p.lengths, p.z.bias, dS, Z, F, S, dF, dZ});
    CpuBackend::sgu_backward_gate(p, dS, Z, T, B, f, F, S, dF, dZ);
  }
  void sgu_backward_mix(const ops::SguParams& p, const ops::SguGrads& g, const float* dS, const float* Z, int T,
                        int B, int f, const float* gmean, const float* grstd, const float* F, float* dZ, float* G,
                        float* dF, float* dG) override {
    mine("sgu_backward_mix", {p.norm_w, p.norm_b, p.W, p.bias, p.lengths, p.z.bias, g.norm_w, g.norm_b, g.W, g.bias, dS, Z,
                              gmean, grstd, F, dZ, G, dF, dG});
    CpuBackend::sgu_backward_mix(p, g, dS, Z, T, B, f, gmean, grstd, F, dZ, G, dF, dG);
  }
  void tiny_attention_forward(const ops::AttnParams& p, const float* H, int T, int B, float* qkv, float* P, float* O,
                              float* A) override {
    mine("tiny_attention_forward", {p.qkv_w, p.qkv_b, p.out_w, p.out_b, p.lengths, H, qkv, P, O, A});
    CpuBackend::tiny_attention_forward(p, H, T, B, qkv, P, O, A);
  }
  void tiny_attention_backward(const ops::AttnParams& p, const ops::AttnGrads& g, const float* dA, const float* H,
                               int T, int B, const float* qkv, const float* P, const float* O, float* dH, float* dO,
                               float* dP, float* dqkv) override {
    mine("tiny_attention_backward", {p.qkv_w, p.qkv_b, p.out_w, p.out_b, p.lengths, g.qkv_w, g.qkv_b, g.out_w, g.out_b,
                                     dA, H, qkv, P, O, dH, dO, dP, dqkv});
    CpuBackend::tiny_attention_backward(p, g, dA, H, T, B, qkv, P, O, dH, dO, dP, dqkv);
  }
  void extract_patches(ops::Pixels images, int B, int C, int Hi, int Wi, int ph, int pw, float* out) override {
    mine("extract_patches", {images.values, images.bytes, images.lut, out});
    CpuBackend::extract_patches(images, B, C, Hi, Wi, ph, pw, out);
  }
  void embedding_forward(const float* E, int d, const int32_t* tokens, int M, int B, const float* pe,
                         float* x) override {
    mine("embedding_forward", {E, tokens, pe, x});
    CpuBackend::embedding_forward(E, d, tokens, M, B, pe, x);
  }
  void embedding_backward(const float* dx, int d, const int32_t* tokens, int M, int V, float* dE) override {
    mine("embedding_backward", {dx, tokens, dE});
    CpuBackend::embedding_backward(dx, d, tokens, M, V, dE);
  }
  void cross_entropy(const float* logits, int M, int V, const int32_t* targets, float* dlogits, double* loss,
                     int64_t mean_over, bool add, const ops::SoftTargets& soft) override {
    mine("cross_entropy", {logits, targets, dlogits, loss, soft.second, soft.weight});
    CpuBackend::cross_entropy(logits, M, V, targets, dlogits, loss, mean_over, add, soft);
  }
  void residual_bias(const float* x, const float* b, int M, int d, float* out) override {
    mine("residual_bias", {x, b, out});
    CpuBackend::residual_bias(x, b, M, d, out);
  }
  void residual_keep(const float* x, const float* keep, const float* h, int M, int B, int d, float* out) override {
    mine("residual_keep", {x, keep, h, out});
    CpuBackend::residual_keep(x, keep, h, M, B, d, out);
  }
  void scale_rows(const float* keep, const float* dx, int M, int B, int d, float* out) override {
    mine("scale_rows", {keep, dx, out});
    CpuBackend::scale_rows(keep, dx, M, B, d, out);
  }
  void residual_dropout(const float* x, const float* h, const float* keep, const ops::DropMask& mask, int M, int B,
                        int d, float* out) override {
    mine("residual_dropout", {x, h, keep, out});
    CpuBackend::residual_dropout(x, h, keep, mask, M, B, d, out);
  }
  void residual_dropout_backward(const float* dout, const float* keep, const ops::DropMask& mask, int M, int B, int d,
                                 float* dh) override {
    mine("residual_dropout_backward", {dout, keep, dh});
    CpuBackend::residual_dropout_backward(dout, keep, mask, M, B, d, dh);
  }
  void dropout_apply(const float* x, const ops::DropMask& mask, int B, int d, float* y) override {
    mine("dropout_apply", {x, y});
    CpuBackend::dropout_apply(x, mask, B, d, y);
  }
  void mean_pool_forward(const float* h, int T, int B, int d, const int32_t* lengths, float* pooled) override {
    mine("mean_pool_forward", {h, lengths, pooled});
    CpuBackend::mean_pool_forward(h, T, B, d, lengths, pooled);
  }
  void mean_pool_backward(const float* dpooled, int T, int B, int d, const int32_t* lengths, float* dh) override {
    mine("mean_pool_backward", {dpooled, lengths, dh});
    CpuBackend::mean_pool_backward(dpooled, T, B, d, lengths, dh);
  }
  void gather_rows(const float* src, const int32_t* rows, int K, int d, float* dst) override {
    mine("gather_rows", {src, rows, dst});
    CpuBackend::gather_rows(src, rows, K, d, dst);
  }
  void scatter_rows(const float* src, const int32_t* rows, int K, int M, int d, float* dst) override {
    mine("scatter_rows", {src, rows, dst});
    CpuBackend::scatter_rows(src, rows, K, M, d, dst);
  }
  void decode_embed(const float* E, int d, const int32_t* tokens, const int32_t* pos, int R, const float* pe,
                    float* x) override {
    mine("decode_embed", {E, tokens, pos, pe, x});
    CpuBackend::decode_embed(E, d, tokens, pos, R, pe, x);
  }
  void decode_linear(const float* W, int out, int in, const float* X, int R, const float* b, float* Y,
                     bool accumulate) override {
    mine("decode_linear", {W, X, b, Y});
    CpuBackend::decode_linear(W, out, in, X, R, b, Y, accumulate);
  }
  void decode_layernorm(const float* x, int ldx, int R, int C, const float* w, const float* b, float eps, float* y,
                        int ldy, const int32_t* rows) override {
    mine("decode_layernorm", {x, w, b, y, rows});
    CpuBackend::decode_layernorm(x, ldx, R, C, w, b, eps, y, ldy, rows);
  }
  void decode_mix(const float* G, int n, int g, int heads, const float* W, int64_t wsz, bool toeplitz,
                  const float* bias, const int32_t* stream, const int32_t* pos, int R, float* F) override {
    mine("decode_mix", {G, W, bias, stream, pos, F});
    CpuBackend::decode_mix(G, n, g, heads, W, wsz, toeplitz, bias, stream, pos, R, F);
  }
  void decode_attention(const ops::AttnParams& p, const float* h, const int32_t* stream, const int32_t* pos, int R,
                        int n, float* qkv, float* P, float* O, float* A, float* F) override {
    mine("decode_attention", {p.qkv_w, p.qkv_b, p.out_w, p.out_b, p.lengths, h, stream, pos, qkv, P, O, A, F});
    CpuBackend::decode_attention(p, h, stream, pos, R, n, qkv, P, O, A, F);
  }
  void adamw_update(float* p, const float* g, float* m, float* v, size_t n, const ops::AdamWStep& s) override {
    mine("adamw_update", {p, g, m, v, s.guard, s.decay_bounds, s.clip_sum_squares});
    ++adamw_calls;
    CpuBackend::adamw_update(p, g, m, v, n, s);
  }
  void sum_squares(const float* x, size_t n, double* sum_squares) override {
    mine("sum_squares", {x, sum_squares});
    CpuBackend::sum_squares(x, n, sum_squares);
  }
  void clip_scale(float* x, size_t n, const double* sum_squares, float max_norm) override {
    mine("clip_scale", {x, sum_squares});
    CpuBackend::clip_scale(x, n, sum_squares, max_norm);
  }
  void scale(float* x, size_t n, float c) override {
    mine("scale", {x});
    CpuBackend::scale(x, n, c);
  }
  void ema_update(float* avg, const float* x, size_t n, float decay, float rest) override {
    mine("ema_update", {avg, x});
    CpuBackend::ema_update(avg, x, n, decay, rest);
  }

 private:
  // Every non-null pointer must lie inside a live allocation of this backend.
  void mine(const char* op, std::initializer_list<const void*> ptrs) const {
    const std::string name = op;
    if (name != "upload" && name != "download" && name != "copy") ++ops;
    int k = 0;
    for (const void* p : ptrs) {
      ++k;
      if (!p) continue;
      auto it = live_.upper_bound(p);
      const bool ok =
          it != live_.begin() && static_cast<const char*>(p) < static_cast<const char*>((--it)->first) + it->second;
      if (!ok) throw Error(std::string(op) + ": pointer argument " + std::to_string(k) + " is not backend memory");
    }
  }
  std::map<const void*, size_t> live_;
};

inline SeparateMemoryBackend& separate_backend() {
  static SeparateMemoryBackend be;
  return be;
}

}  // namespace gmlp::test
