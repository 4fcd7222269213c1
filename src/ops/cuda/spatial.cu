// The SGU's token mixing on the device (spatial.cpp's plan): non-causal is one GEMM;
// causal is cut into row blocks, each one GEMM over W's rows left of and on the
// diagonal, read from a copy of W with the diagonal's upper side cleared (T x T floats,
// a quarter of a megabyte at T = 256), so the masked half is never computed beyond the
// diagonal blocks' (a third of what is multiplied at T = 256 in 128-row blocks). Those
// blocks were cuBLAS triangular multiplies, which have no bf16 form: under bf16 half
// of the causal mixing's work ran in fp32 on CUDA cores. dW's diagonal blocks have
// their strict upper part cleared. Training under bf16 the SGU hands G and dF in bf16
// and takes dG in bf16, and the products read W from a bf16 copy (its lower triangle,
// or all of it) made by each call: T x T values, next to the [M, g] operands. The copy's
// rows are padded to 16 bytes and it starts on 256: cuBLAS's Hopper kernels read their
// operands with the tensor memory accelerator, whose rows must be 16-byte multiples, and
// gMLP-S/16's T = 196 gives W rows of 392 bytes in bf16 (its three spatial products took
// Ampere kernels, `cutlass_80_..._align2`, 50 to 63 µs each on an H100, docs/bench-gpu.md).
#include <algorithm>
#include <type_traits>

#include "gmlp/error.h"
#include "ops/cuda/common.cuh"

namespace gmlp::cuda {
namespace {
constexpr int kBlock = 128;

// Zeroes the strict upper part of every diagonal block of kBlock rows of dW [T, T]: row r
// (blockIdx.y) from column r + 1 to its block's end. One launch after all the blocks'
// products, where a launch after each took two a layer of the annotated LM's step.
__global__ void clear_upper(float* dW, int ldw, int T) {
  for (int r = int(blockIdx.y); r < T; r += int(gridDim.y)) {
    const int end = min(T, (r / kBlock + 1) * kBlock), c = r + 1 + int(blockIdx.x * blockDim.x + threadIdx.x);
    if (c < end) dW[int64_t(r) * ldw + c] = 0.f;
  }
}

// Wc[i, j] = W[i, j] (held as Wc holds it), or 0 above the diagonal when lower, or
// W[j, i] when transposed (Wc T x T, rows ldc apart; the padding between them zero).
__device__ inline float w_copied(const float* W, int ldw, int T, bool lower, bool transposed, int i, int j) {
  return j >= T || (lower && j > i) ? 0.f : transposed ? W[int64_t(j) * ldw + i] : W[int64_t(i) * ldw + j];
}
template <typename E>
__global__ void k_copy_w(const float* W, int ldw, int T, bool lower, bool transposed, E* Wc, int ldc) {
  const int64_t idx = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (idx >= int64_t(T) * ldc) return;
  const int i = int(idx / ldc), j = int(idx % ldc);
  hold(Wc + idx, w_copied(W, ldw, T, lower, transposed, i, j));
}

// Whether the forward product reads W^T (below, mix_forward_as).
template <typename E>
bool forward_transposed(bool causal, int T) {
  return !causal && !std::is_same_v<E, float> && padded_row<E>(T) != T;
}

// Every layer's copies (spatial_w_bf16_many), kWCopies layers a launch: blockIdx.y a
// (layer, head) matrix, its forward form into its first slot and, where that is W^T,
// the plain form (dG's) into the second.
constexpr int kWCopies = 64;
struct WCopies {
  const float* W[kWCopies];
};
__global__ void k_copy_w_many(WCopies src, int heads, int ldw, int64_t head_stride, int T, bool causal,
                              bool transposed, uint16_t* out, int64_t layer_stride, int ldc, int64_t slot) {
  const int64_t idx = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (idx >= int64_t(T) * ldc) return;
  const int l = int(blockIdx.y) / heads, k = int(blockIdx.y) % heads;
  const float* W = src.W[l] + k * head_stride;
  uint16_t* c = out + l * layer_stride + k * 2 * slot;
  const int i = int(idx / ldc), j = int(idx % ldc);
  hold(c + idx, w_copied(W, ldw, T, causal, transposed, i, j));
  if (transposed) hold(c + slot + idx, w_copied(W, ldw, T, causal, false, i, j));
}

// dW[i, j] += the count partial products' [i, j], in order. Causal: j <= i only; dW's
// strict upper triangle is never written (as on the CPU; the one-product path's
// clearing writes the zeros it held, gradients starting at zero).
__global__ void k_add_parts(const float* part, int count, int T, bool causal, float* dW, int ldw) {
  const int64_t idx = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (idx >= int64_t(T) * T) return;
  const int i = int(idx / T), j = int(idx % T);
  if (causal && j > i) return;
  float s = 0.f;
  for (int k = 0; k < count; ++k) s += part[int64_t(k) * T * T + idx];
  dW[int64_t(i) * ldw + j] += s;
}

// How many of a batch's partial dW [T, T] are made at once (spatial_mix_backward): at
// most 64 MiB of them. On the CUDA emulator two, so that the tests' small batches go
// through several chunks.
int parts_at_once(int T) {
#if defined(GMLP_CUDA_EMULATED)
  (void)T;
  return 2;
#else
  return int(std::max<int64_t>(1, int64_t(size_t(64) << 20) / (int64_t(sizeof(float)) * T * T)));
#endif
}

// The scratch of one call: for a batch of products whose dW are summed, `parts`
// partial dW; then, from the next 256 bytes, the W the products read: W itself (floats,
// not causal), or a copy held as the operands are, its lower triangle alone when causal,
// or W^T (transposed: never causal).
template <typename E>
struct Scratch {
  const E* W = nullptr;
  int ldw = 0;
  float* part = nullptr;
};
// made: the copy made beforehand (spatial_w_bf16_many), or null.
template <typename E>
Scratch<E> scratch_for(const float* W, int ldw, bool causal, int T, int parts, bool transposed = false,
                       const E* made = nullptr) {
  const int64_t TT = int64_t(T) * T;
  const bool copy = (causal || !std::is_same_v<E, float>) && !made;
  const int ldc = padded_row<E>(T);
  const size_t part_bytes = (sizeof(float) * size_t(TT) * parts + 255) / 256 * 256;
  char* s = static_cast<char*>(scratch(part_bytes + (copy ? sizeof(E) * size_t(T) * ldc : 0)));
  Scratch<E> out;
  out.part = parts ? reinterpret_cast<float*>(s) : nullptr;
  if (made) {
    out.W = made;
    out.ldw = ldc;
    return out;
  }
  if (!copy) {
    out.W = reinterpret_cast<const E*>(W);  // E is float here
    out.ldw = ldw;
    return out;
  }
  E* Wc = reinterpret_cast<E*>(s + part_bytes);
  GMLP_LAUNCH(k_copy_w, blocks_for(int64_t(T) * ldc), kThreads)(W, ldw, T, causal, transposed, Wc, ldc);
  check_launch("the mixing's copy of W");
  out.W = Wc;
  out.ldw = ldc;
  return out;
}

__global__ void k_toeplitz(const float* w, int n, bool causal, int T, float* W) {
  const int64_t idx = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (idx >= int64_t(T) * T) return;
  const int i = int(idx / T), j = int(idx % T), k = i - j;
  float v = 0.f;
  if (causal ? (k >= 0 && k < n) : (k > -n && k < n)) v = w[causal ? k : k + n - 1];
  W[idx] = v;
}

// One thread per diagonal k: its entries summed in order, in double (as the CPU op).
__global__ void k_toeplitz_fold(const float* dW, int T, int n, bool causal, float* dw) {
  const int kmin = causal ? 0 : -(n - 1);
  const int k = kmin + int(blockIdx.x * blockDim.x + threadIdx.x);
  if (k > n - 1) return;
  double s = 0.0;
  for (int i = max(0, k); i < T && i - k < T; ++i) s += dW[int64_t(i) * T + (i - k)];
  dw[causal ? k : k + n - 1] += float(s);
}

}  // namespace

namespace {
// w16: the head's copies made beforehand (ops.h's spatial_w16_head), or null.
template <typename E>
void mix_forward_as(const float* W, int ldw, bool causal, int T, int cols, const E* G, int ld, E* F, int count,
                    int stride, const E* w16 = nullptr) {
  // F = W G reads W's rows along the products' K, T values each: at gMLP-S/16's T = 196
  // (392 bytes in bf16, padding or not) cuBLAS took an Ampere kernel (`nn_align2`, 65
  // µs on an H100), where dG's W^T dF over the same shapes, reading W's padded rows
  // along its M, took `nt_align8` (52 µs; docs/bench-gpu.md). So where a row of T
  // values is not a multiple of 16 bytes, F = (W^T)^T G, from a transposed copy.
  const bool transposed = forward_transposed<E>(causal, T);
  const Scratch<E> s = scratch_for<E>(W, ldw, causal, T, 0, transposed, w16);
  if (!causal) {
    gemm_batched(transposed, false, T, cols, T, 1.f, s.W, s.ldw, 0, G, ld, stride, 0.f, F, ld, stride, count);
    return;
  }
  for (int i0 = 0; i0 < T; i0 += kBlock) {
    const int i1 = std::min(T, i0 + kBlock);
    gemm_batched(false, false, i1 - i0, cols, i1, 1.f, s.W + int64_t(i0) * s.ldw, s.ldw, 0, G, ld, stride, 0.f,
                 F + int64_t(i0) * ld, ld, stride, count);
  }
}

template <typename E>
void mix_backward_as(const float* W, int ldw, bool causal, int T, int cols, const E* G, const E* dF, int ld,
                     E* dG, float* dW, int count, int stride, const E* w16 = nullptr) {
  const int64_t TT = int64_t(T) * T;
  // A batch's dW are partial products summed in order, a chunk of the members at a time.
  const int chunk = count > 1 ? std::min(count, parts_at_once(T)) : 0;
  // dG's copy: the forward's, or the slot after it where the forward's is W^T.
  const E* made = w16 && forward_transposed<E>(causal, T) ? w16 + ops::spatial_w16_slot(T) : w16;
  const Scratch<E> s = scratch_for<E>(W, ldw, causal, T, chunk, false, made);
  // dG = W^T dF for every member; causal: dG[j] = sum over i >= j of W[i, j] dF[i], the
  // block's columns of the lower triangle from row j0 on.
  if (!causal) gemm_batched(true, false, T, cols, T, 1.f, s.W, s.ldw, 0, dF, ld, stride, 0.f, dG, ld, stride, count);
  for (int j0 = 0; causal && j0 < T; j0 += kBlock)
    gemm_batched(true, false, std::min(T, j0 + kBlock) - j0, cols, T - j0, 1.f, s.W + int64_t(j0) * s.ldw + j0,
                 s.ldw, 0, dF + int64_t(j0) * ld, ld, stride, 0.f, dG + int64_t(j0) * ld, ld, stride, count);
  // dW += dF G^T; causal: rows [j0, j1) up to column j1, the diagonal blocks' strict
  // upper parts cleared after (one product) or never added (partials).
  if (count == 1) {
    if (!causal) gemm(false, true, T, T, cols, 1.f, dF, ld, G, ld, 1.f, dW, ldw);
    for (int j0 = 0; causal && j0 < T; j0 += kBlock) {
      const int j1 = std::min(T, j0 + kBlock), m = j1 - j0;
      gemm(false, true, m, j1, cols, 1.f, dF + int64_t(j0) * ld, ld, G, ld, 1.f, dW + int64_t(j0) * ldw, ldw);
    }
    if (causal) {
      GMLP_LAUNCH(clear_upper, dim3(blocks_for(std::min(T, kBlock)), unsigned(std::min(T, 65535))), kThreads)(dW, ldw,
                                                                                                         T);
      check_launch("causal dW clear");
    }
    return;
  }
  for (int c0 = 0; c0 < count; c0 += chunk) {
    const int n = std::min(chunk, count - c0);
    const E *dFc = dF + int64_t(c0) * stride, *Gc = G + int64_t(c0) * stride;
    if (!causal) gemm_batched(false, true, T, T, cols, 1.f, dFc, ld, stride, Gc, ld, stride, 0.f, s.part, T, TT, n);
    for (int j0 = 0; causal && j0 < T; j0 += kBlock) {
      const int j1 = std::min(T, j0 + kBlock);
      gemm_batched(false, true, j1 - j0, j1, cols, 1.f, dFc + int64_t(j0) * ld, ld, stride, Gc, ld, stride, 0.f,
                   s.part + int64_t(j0) * T, T, TT, n);
    }
    GMLP_LAUNCH(k_add_parts, blocks_for(TT), kThreads)(s.part, n, T, causal, dW, ldw);
    check_launch("spatial dW sum");
  }
}
}  // namespace

void spatial_mix_forward(const float* W, int ldw, bool causal, int T, int cols, const float* G, int ld, float* F,
                         int count, int stride, const uint16_t* w16) {
  if (w16) throw Error("spatial_mix_forward: W's bf16 copies are for bf16 operands");
  mix_forward_as(W, ldw, causal, T, cols, G, ld, F, count, stride);
}
void spatial_mix_forward(const float* W, int ldw, bool causal, int T, int cols, const uint16_t* G, int ld, uint16_t* F,
                         int count, int stride, const uint16_t* w16) {
  mix_forward_as(W, ldw, causal, T, cols, G, ld, F, count, stride, w16);
}

void spatial_mix_backward(const float* W, int ldw, bool causal, int T, int cols, const float* G, const float* dF,
                          int ld, float* dG, float* dW, int count, int stride, const uint16_t* w16) {
  if (w16) throw Error("spatial_mix_backward: W's bf16 copies are for bf16 operands");
  mix_backward_as(W, ldw, causal, T, cols, G, dF, ld, dG, dW, count, stride);
}
void spatial_mix_backward(const float* W, int ldw, bool causal, int T, int cols, const uint16_t* G,
                          const uint16_t* dF, int ld, uint16_t* dG, float* dW, int count, int stride,
                          const uint16_t* w16) {
  mix_backward_as(W, ldw, causal, T, cols, G, dF, ld, dG, dW, count, stride, w16);
}

const uint16_t* spatial_w_bf16_plain(const float* W, int ldw, int T, bool causal, const uint16_t* w16) {
  const uint16_t* made = w16 && forward_transposed<uint16_t>(causal, T) ? w16 + ops::spatial_w16_slot(T) : w16;
  return scratch_for<uint16_t>(W, ldw, causal, T, 0, false, made).W;
}

void spatial_w_bf16_many(const float* const* W, int layers, int ldw, int64_t head_stride, int heads, int T,
                         bool causal, uint16_t* out, int64_t layer_stride) {
  const int ldc = padded_row<uint16_t>(T);
  const bool transposed = forward_transposed<uint16_t>(causal, T);
  for (int l0 = 0; l0 < layers; l0 += kWCopies) {
    WCopies src{};
    const int n = std::min(kWCopies, layers - l0);
    for (int l = 0; l < n; ++l) src.W[l] = W[l0 + l];
    GMLP_LAUNCH(k_copy_w_many, dim3(blocks_for(int64_t(T) * ldc), unsigned(n * heads)), kThreads)(
        src, heads, ldw, head_stride, T, causal, transposed, out + l0 * layer_stride, layer_stride, ldc,
        ops::spatial_w16_slot(T));
    check_launch("the layers' copies of W");
  }
}

void toeplitz_materialize(const float* w, int n, bool causal, int T, float* W) {
  GMLP_LAUNCH(k_toeplitz, blocks_for(int64_t(T) * T), kThreads)(w, n, causal, T, W);
  check_launch("toeplitz materialize");
}

void toeplitz_fold(const float* dW, int T, int n, bool causal, float* dw) {
  const int count = causal ? n : 2 * n - 1;
  GMLP_LAUNCH(k_toeplitz_fold, blocks_for(count), kThreads)(dW, T, n, causal, dw);
  check_launch("toeplitz fold");
}

}  // namespace gmlp::cuda
