// Softmax cross-entropy on the device, fused: a block per row finds the log-sum-exp,
// writes the row's loss and, when asked, d(mean loss)/d logits; the mean is a
// fixed-order reduction into a double of device memory, which the host reads when it
// needs it (a training step: once, after its update is queued).
#include "ops/cuda/common.cuh"

namespace gmlp::cuda {
namespace {

constexpr int kRowThreads = 256;

// The number of targets >= 0, into *count (one block); `over` instead where it is > 0.
__global__ void k_count(const int32_t* targets, int M, int over, int* count) {
  __shared__ int sh[32];
  int c = 0;
  for (int r = threadIdx.x; r < M; r += blockDim.x) c += targets[r] >= 0;
  c = block_sum(c, sh);
  if (threadIdx.x == 0) *count = over > 0 ? over : c;
}

__global__ void k_rows(const float* logits, int V, const int32_t* targets, const int* count, float* dlogits,
                       double* loss, ops::SoftTargets soft) {
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
  // The target as a distribution (ops::SoftTargets): on_a at y, on_b at b, off everywhere;
  // one-hot without soft targets.
  const int b = soft.second ? soft.second[r] : y;
  const float w = soft.weight ? soft.weight[r] : 1.f, keep = 1.f - soft.smoothing;
  const float on_a = keep * w, on_b = keep * (1.f - w), off = soft.smoothing / float(V);
  if (dr) {
    const float scale = 1.f / float(*count);
    for (int v = threadIdx.x; v < V; v += blockDim.x) {
      const float q = (v == y ? on_a : 0.f) + (v == b ? on_b : 0.f) + off;
      dr[v] = (expf(lr[v] - lse) - q) * scale;
    }
  }
  // lse - q . logits; the logits' sum only where smoothing spreads mass over them.
  float sum = 0.f;
  if (off > 0.f) {
    for (int v = threadIdx.x; v < V; v += blockDim.x) sum += lr[v];
    sum = block_sum(sum, sh);
  }
  if (threadIdx.x == 0)
    loss[r] = double(lse) - double(on_a) * double(lr[y]) - double(on_b) * double(lr[b]) - double(off) * double(sum);
}

// The mean over the rows with a target (0 without any), as the CPU op divides; added to
// *out with add.
__global__ void k_mean(const double* x, int M, const int* count, bool add, double* out) {
  __shared__ double sh[32];
  double s = 0.0;
  for (int r = threadIdx.x; r < M; r += blockDim.x) s += x[r];
  s = block_sum(s, sh);
  if (threadIdx.x == 0) {
    const double mean = *count > 0 ? s / double(*count) : 0.0;
    *out = add ? *out + mean : mean;
  }
}

}  // namespace

void cross_entropy(const float* logits, int M, int V, const int32_t* targets, float* dlogits, double* mean,
                   int64_t mean_over, bool add, const ops::SoftTargets& soft) {
  if (M <= 0) {
    if (!add) check(int(cudaMemset(mean, 0, sizeof(double))), "cudaMemset");
    return;
  }
  // Scratch: M row losses, then the count.
  char* base = static_cast<char*>(scratch(sizeof(double) * size_t(M) + sizeof(int)));
  double* loss = reinterpret_cast<double*>(base);
  int* count = reinterpret_cast<int*>(loss + M);
  GMLP_LAUNCH(k_count, 1, 1024)(targets, M, int(mean_over), count);
  GMLP_LAUNCH(k_rows, unsigned(M), kRowThreads)(logits, V, targets, count, dlogits, loss, soft);
  GMLP_LAUNCH(k_mean, 1, 1024)(loss, M, count, add, mean);
  check_launch("cross-entropy");
}

}  // namespace gmlp::cuda
