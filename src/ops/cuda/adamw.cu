// AdamW and global-norm clipping on the device (adamw.cpp's arithmetic). The sum of
// squares is a fixed-order two-stage reduction in double, written to device memory;
// the clipping factor and whether the step may update at all (ops/step_guard.h) are
// read there by the kernels, so nothing of a step comes back to the host before its
// update is queued.
#include "ops/cuda/common.cuh"
#include "ops/step_guard.h"

namespace gmlp::cuda {
namespace {

// Whether value i decays: an odd count of s's bounds at or below it (a binary search
// over a table of a few hundred, in the cache; the caller issues its loads first).
__device__ inline bool decays(const ops::AdamWStep& s, size_t i) {
  if (!s.decay_bounds) return true;
  int lo = 0, hi = s.n_decay_bounds;  // the first bound above i, in [lo, hi]
  while (lo < hi) {
    const int mid = (lo + hi) / 2;
    if (s.decay_bounds[mid] <= i) lo = mid + 1;
    else hi = mid;
  }
  return lo % 2 == 1;
}

__global__ void k_adamw(float* params, const float* grads, float* m, float* v, size_t n, ops::AdamWStep s) {
  const size_t i = size_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= n || !ops::step_may_update(s.guard, s.guards)) return;
  // clip_scale's product, taken as the gradient is read: no pass of its own.
  const float c = s.clip_sum_squares ? ops::clip_factor(*s.clip_sum_squares, s.max_norm) : 1.f;
  const float g = grads[i] * c, p0 = params[i], m0 = m[i], v0 = v[i];
  const float p = p0 * (decays(s, i) ? s.decay : 1.f);
  const float mi = s.b1 * m0 + (1.f - s.b1) * g;
  const float vi = s.b2 * v0 + (1.f - s.b2) * g * g;
  m[i] = mi;
  v[i] = vi;
  params[i] = p - s.step_size * (mi / (sqrtf(vi) / s.bc2_sqrt + s.eps));
}

constexpr int kReduceBlocks = 1024;

__global__ void k_sum_squares(const float* x, size_t n, double* part) {
  __shared__ double sh[32];
  double s = 0.0;
  for (size_t i = size_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x)
    s += double(x[i]) * x[i];
  s = block_sum(s, sh);
  if (threadIdx.x == 0) part[blockIdx.x] = s;
}

__global__ void k_finish(const double* part, int k, double* out) {
  __shared__ double sh[32];
  double s = 0.0;
  for (int i = threadIdx.x; i < k; i += blockDim.x) s += part[i];
  s = block_sum(s, sh);
  if (threadIdx.x == 0) *out = s;
}

// The product rounded on its own (__fmul_rn: never contracted), then one fmaf, as the
// CPU's std::fma(rest, x, avg * decay).
__global__ void k_ema(float* avg, const float* x, size_t n, float decay, float rest) {
  const size_t i = size_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n) avg[i] = fmaf(rest, x[i], __fmul_rn(avg[i], decay));
}

__global__ void k_scale(float* x, size_t n, float c) {
  const size_t i = size_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n) x[i] *= c;
}

// Each thread works out the factor: no block writes anything when it is 1.
__global__ void k_clip_scale(float* x, size_t n, const double* sum_squares, float max_norm) {
  const float c = ops::clip_factor(*sum_squares, max_norm);
  const size_t i = size_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (c != 1.f && i < n) x[i] *= c;
}

}  // namespace

void adamw_update(float* p, const float* g, float* m, float* v, size_t n, const ops::AdamWStep& s) {
  if (n == 0) return;
  GMLP_LAUNCH(k_adamw, blocks_for(int64_t(n)), kThreads)(p, g, m, v, n, s);
  check_launch("adamw");
}

void sum_squares(const float* x, size_t n, double* out) {
  if (n == 0) {
    check(int(cudaMemset(out, 0, sizeof(double))), "cudaMemset");
    return;
  }
  double* part = static_cast<double*>(scratch(sizeof(double) * kReduceBlocks));
  GMLP_LAUNCH(k_sum_squares, kReduceBlocks, kThreads)(x, n, part);
  GMLP_LAUNCH(k_finish, 1, 1024)(part, kReduceBlocks, out);
  check_launch("sum of squares");
}

void clip_scale(float* x, size_t n, const double* sum_squares, float max_norm) {
  if (n == 0) return;
  GMLP_LAUNCH(k_clip_scale, blocks_for(int64_t(n)), kThreads)(x, n, sum_squares, max_norm);
  check_launch("clip scale");
}

void ema_update(float* avg, const float* x, size_t n, float decay, float rest) {
  if (n == 0) return;
  GMLP_LAUNCH(k_ema, blocks_for(int64_t(n)), kThreads)(avg, x, n, decay, rest);
  check_launch("ema update");
}

void scale(float* x, size_t n, float c) {
  if (n == 0) return;
  GMLP_LAUNCH(k_scale, blocks_for(int64_t(n)), kThreads)(x, n, c);
  check_launch("scale");
}

}  // namespace gmlp::cuda
