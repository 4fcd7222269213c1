// Softmax cross-entropy on the device, fused: a block per row finds the log-sum-exp,
// writes the row's loss and, when asked, d(mean loss)/d logits; the mean is a
// fixed-order reduction whose one double comes back to the host.
#include "ops/cuda/common.cuh"

namespace gmlp::cuda {
namespace {

constexpr int kRowThreads = 256;

// The number of targets >= 0, into *count (one block).
__global__ void k_count(const int32_t* targets, int M, int* count) {
  __shared__ int sh[32];
  int c = 0;
  for (int r = threadIdx.x; r < M; r += blockDim.x) c += targets[r] >= 0;
  c = block_sum(c, sh);
  if (threadIdx.x == 0) *count = c;
}

__global__ void k_rows(const float* logits, int V, const int32_t* targets, const int* count, float* dlogits,
                       double* loss) {
  __shared__ float sh[32];
  const int64_t r = blockIdx.x;
  const float* lr = logits + r * V;
  float* dr = dlogits ? dlogits + r * V : nullptr;
  const int y = targets[r];
  if (y < 0) {
    if (dr)
      for (int v = threadIdx.x; v < V; v += blockDim.x) dr[v] = 0.f;
    if (threadIdx.x == 0) loss[r] = 0.0;
    return;
  }
  float mx = -INFINITY;
  for (int v = threadIdx.x; v < V; v += blockDim.x) mx = fmaxf(mx, lr[v]);
  mx = block_max(mx, sh);
  float se = 0.f;
  for (int v = threadIdx.x; v < V; v += blockDim.x) se += expf(lr[v] - mx);
  se = block_sum(se, sh);
  const float lse = mx + logf(se);
  if (dr) {
    const float scale = 1.f / float(*count);
    for (int v = threadIdx.x; v < V; v += blockDim.x) dr[v] = (expf(lr[v] - lse) - (v == y ? 1.f : 0.f)) * scale;
  }
  if (threadIdx.x == 0) loss[r] = double(lse) - double(lr[y]);
}

__global__ void k_sum(const double* x, int M, double* out) {
  __shared__ double sh[32];
  double s = 0.0;
  for (int r = threadIdx.x; r < M; r += blockDim.x) s += x[r];
  s = block_sum(s, sh);
  if (threadIdx.x == 0) *out = s;
}

}  // namespace

double cross_entropy(const float* logits, int M, int V, const int32_t* targets, float* dlogits) {
  if (M <= 0) return 0.0;
  // Scratch: M row losses, then the sum, then the count.
  char* base = static_cast<char*>(scratch(sizeof(double) * (size_t(M) + 1) + sizeof(int)));
  double* loss = reinterpret_cast<double*>(base);
  double* total = loss + M;
  int* count = reinterpret_cast<int*>(total + 1);
  GMLP_LAUNCH(k_count, 1, 1024)(targets, M, count);
  GMLP_LAUNCH(k_rows, unsigned(M), kRowThreads)(logits, V, targets, count, dlogits, loss);
  GMLP_LAUNCH(k_sum, 1, 1024)(loss, M, total);
  check_launch("cross-entropy");
  double host_total = 0.0;
  int host_count = 0;
  check(int(cudaMemcpy(&host_total, total, sizeof(double), cudaMemcpyDeviceToHost)), "cross-entropy read-back");
  check(int(cudaMemcpy(&host_count, count, sizeof(int), cudaMemcpyDeviceToHost)), "cross-entropy read-back");
  return host_count > 0 ? host_total / double(host_count) : 0.0;
}

}  // namespace gmlp::cuda
