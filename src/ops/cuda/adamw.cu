// AdamW and the sums of global-norm clipping on the device (adamw.cpp's arithmetic).
// The norm is a fixed-order two-stage reduction in double; only its value comes back.
#include "ops/cuda/common.cuh"

namespace gmlp::cuda {
namespace {

__global__ void k_adamw(float* params, const float* grads, float* m, float* v, size_t n, ops::AdamWStep s) {
  const size_t i = size_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= n) return;
  const float g = grads[i];
  const float p = params[i] * s.decay;
  const float mi = s.b1 * m[i] + (1.f - s.b1) * g;
  const float vi = s.b2 * v[i] + (1.f - s.b2) * g * g;
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

__global__ void k_scale(float* x, size_t n, float c) {
  const size_t i = size_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n) x[i] *= c;
}

}  // namespace

void adamw_update(float* p, const float* g, float* m, float* v, size_t n, const ops::AdamWStep& s) {
  if (n == 0) return;
  GMLP_LAUNCH(k_adamw, blocks_for(int64_t(n)), kThreads)(p, g, m, v, n, s);
  check_launch("adamw");
}

double sum_squares(const float* x, size_t n) {
  if (n == 0) return 0.0;
  double* part = static_cast<double*>(scratch(sizeof(double) * (kReduceBlocks + 1)));
  GMLP_LAUNCH(k_sum_squares, kReduceBlocks, kThreads)(x, n, part);
  GMLP_LAUNCH(k_finish, 1, 1024)(part, kReduceBlocks, part + kReduceBlocks);
  check_launch("sum of squares");
  double host = 0.0;
  check(int(cudaMemcpy(&host, part + kReduceBlocks, sizeof(double), cudaMemcpyDeviceToHost)), "norm read-back");
  return host;
}

void scale(float* x, size_t n, float c) {
  if (n == 0) return;
  GMLP_LAUNCH(k_scale, blocks_for(int64_t(n)), kThreads)(x, n, c);
  check_launch("scale");
}

}  // namespace gmlp::cuda
