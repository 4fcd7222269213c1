// The SGU's token mixing on the device (spatial.cpp's plan): non-causal is one GEMM;
// causal is cut into row blocks, each one GEMM over W's rows left of and on the
// diagonal, read from a copy of W with the diagonal's upper side cleared (T x T floats,
// a quarter of a megabyte at T = 256), so the masked half is never computed beyond the
// diagonal blocks' (a third of what is multiplied at T = 256 in 128-row blocks). Those
// blocks were cuBLAS triangular multiplies, which have no bf16 form: under bf16 half
// of the causal mixing's work ran in fp32 on CUDA cores. dW's diagonal blocks have
// their strict upper part cleared.
#include <algorithm>

#include "ops/cuda/common.cuh"

namespace gmlp::cuda {
namespace {
constexpr int kBlock = 128;

// Zeroes dW[r, c] for r in [r0, r1), c in (r, c1): the strict upper part of a diagonal block.
__global__ void clear_upper(float* dW, int ldw, int r0, int r1, int c1) {
  const int r = r0 + blockIdx.y;
  const int c = r + 1 + blockIdx.x * blockDim.x + threadIdx.x;
  if (r < r1 && c < c1) dW[int64_t(r) * ldw + c] = 0.f;
}

// Wl[i, j] = W[i, j] for j <= i, 0 above the diagonal (Wl dense, T x T).
__global__ void k_lower(const float* W, int ldw, int T, float* Wl) {
  const int64_t idx = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (idx >= int64_t(T) * T) return;
  const int i = int(idx / T), j = int(idx % T);
  Wl[idx] = j <= i ? W[int64_t(i) * ldw + j] : 0.f;
}

const float* lower_copy(const float* W, int ldw, int T) {
  float* Wl = static_cast<float*>(scratch(sizeof(float) * size_t(T) * T));
  GMLP_LAUNCH(k_lower, blocks_for(int64_t(T) * T), kThreads)(W, ldw, T, Wl);
  check_launch("causal W's lower triangle");
  return Wl;
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

void spatial_mix_forward(const float* W, int ldw, bool causal, int T, int cols, const float* G, int ld, float* F) {
  if (!causal) {
    gemm(false, false, T, cols, T, 1.f, W, ldw, G, ld, 0.f, F, ld);
    return;
  }
  const float* Wl = lower_copy(W, ldw, T);
  for (int i0 = 0; i0 < T; i0 += kBlock) {
    const int i1 = std::min(T, i0 + kBlock);
    gemm(false, false, i1 - i0, cols, i1, 1.f, Wl + int64_t(i0) * T, T, G, ld, 0.f, F + int64_t(i0) * ld, ld);
  }
}

void spatial_mix_backward(const float* W, int ldw, bool causal, int T, int cols, const float* G, const float* dF,
                          int ld, float* dG, float* dW) {
  if (!causal) {
    gemm(true, false, T, cols, T, 1.f, W, ldw, dF, ld, 0.f, dG, ld);
    gemm(false, true, T, T, cols, 1.f, dF, ld, G, ld, 1.f, dW, ldw);
    return;
  }
  const float* Wl = lower_copy(W, ldw, T);
  for (int j0 = 0; j0 < T; j0 += kBlock) {
    const int j1 = std::min(T, j0 + kBlock), m = j1 - j0;
    // dG[j] = sum over i >= j of W[i, j] dF[i]: the block's columns of Wl, rows j0 on.
    gemm(true, false, m, cols, T - j0, 1.f, Wl + int64_t(j0) * T + j0, T, dF + int64_t(j0) * ld, ld, 0.f,
         dG + int64_t(j0) * ld, ld);
    gemm(false, true, m, j1, cols, 1.f, dF + int64_t(j0) * ld, ld, G, ld, 1.f, dW + int64_t(j0) * ldw, ldw);
    GMLP_LAUNCH(clear_upper, dim3(blocks_for(m), unsigned(m)), kThreads)(dW, ldw, j0, j1, j1);
    check_launch("causal dW clear");
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
