#pragma once
// The CPU backend with its memory kept apart from the host's: a model or decoder on it
// takes the path a device takes (host mirrors, uploads, read-backs), with the CPU's
// arithmetic, so its results must equal the CPU's bit for bit. Its memory is still host
// memory, so the ops a device path leans on most (the decoder's, the embedding, GELU,
// the SGU combine) also check that every pointer they are given lies in memory this
// backend handed out: a host pointer that would fault on a GPU fails the test here.
#include <map>
#include <string>

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

  void embedding_forward(const float* E, int d, const int32_t* tokens, int M, int B, const float* pe,
                         float* x) override {
    mine("embedding_forward", {E, tokens, pe, x});
    CpuBackend::embedding_forward(E, d, tokens, M, B, pe, x);
  }
  void gelu_forward(const float* x, float* y, int64_t n, bool t) override {
    mine("gelu_forward", {x, y});
    CpuBackend::gelu_forward(x, y, n, t);
  }
  void sgu_combine(Sgu kind, const float* Z, int ldz, const float* F, int M, int g, float* S) override {
    mine("sgu_combine", {Z, F, S});
    CpuBackend::sgu_combine(kind, Z, ldz, F, M, g, S);
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
    mine("decode_attention", {p.qkv_w, p.qkv_b, p.out_w, p.out_b, h, stream, pos, qkv, P, O, A, F});
    CpuBackend::decode_attention(p, h, stream, pos, R, n, qkv, P, O, A, F);
  }

 private:
  // Every non-null pointer must lie inside a live allocation of this backend.
  void mine(const char* op, std::initializer_list<const void*> ptrs) const {
    int k = 0;
    for (const void* p : ptrs) {
      ++k;
      if (!p) continue;
      auto it = live_.upper_bound(p);
      const bool ok = it != live_.begin() &&
                      static_cast<const char*>(p) < static_cast<const char*>((--it)->first) + it->second;
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
