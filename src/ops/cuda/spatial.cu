// The SGU's token mixing on the device (spatial.cpp's plan): non-causal is one GEMM;
// causal is cut into row blocks, the part left of the diagonal one GEMM and the
// diagonal block a triangular multiply, so the masked half is never computed (beyond
// the diagonal blocks of dW, whose strict upper part is cleared).
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
  for (int i0 = 0; i0 < T; i0 += kBlock) {
    const int m = std::min(T, i0 + kBlock) - i0;
    float* Fb = F + int64_t(i0) * ld;
    trmm_lower(false, m, cols, 1.f, W + int64_t(i0) * ldw + i0, ldw, G + int64_t(i0) * ld, ld, Fb, ld);
    if (i0 > 0) gemm(false, false, m, cols, i0, 1.f, W + int64_t(i0) * ldw, ldw, G, ld, 1.f, Fb, ld);
  }
}

void spatial_mix_backward(const float* W, int ldw, bool causal, int T, int cols, const float* G, const float* dF,
                          int ld, float* dG, float* dW) {
  if (!causal) {
    gemm(true, false, T, cols, T, 1.f, W, ldw, dF, ld, 0.f, dG, ld);
    gemm(false, true, T, T, cols, 1.f, dF, ld, G, ld, 1.f, dW, ldw);
    return;
  }
  for (int j0 = 0; j0 < T; j0 += kBlock) {
    const int j1 = std::min(T, j0 + kBlock), m = j1 - j0;
    float* dGb = dG + int64_t(j0) * ld;
    trmm_lower(true, m, cols, 1.f, W + int64_t(j0) * ldw + j0, ldw, dF + int64_t(j0) * ld, ld, dGb, ld);
    if (j1 < T)
      gemm(true, false, m, cols, T - j1, 1.f, W + int64_t(j1) * ldw + j0, ldw, dF + int64_t(j1) * ld, ld, 1.f, dGb,
           ld);
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
