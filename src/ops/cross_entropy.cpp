// Softmax cross-entropy with the softmax fused in: one pass computes the loss and,
// when asked, the gradient, without materialising probabilities separately.
#include <cmath>

#include "ops/ops.h"
#include "ops/reduce.h"

namespace gmlp::ops {

double cross_entropy(const float* logits, int M, int V, const int32_t* targets, float* dlogits, int64_t* count) {
  int64_t n = 0;
  for (int r = 0; r < M; ++r) n += targets[r] >= 0;
  if (count) *count = n;
  const float scale = n > 0 ? 1.f / float(n) : 0.f;
  const double total = ordered_sum(M, [&](int64_t r) -> double {
    const float* lr = logits + r * V;
    float* dr = dlogits ? dlogits + r * V : nullptr;
    const int y = targets[r];
    if (y < 0) {
      if (dr)
        for (int v = 0; v < V; ++v) dr[v] = 0.f;
      return 0.0;
    }
    float mx = lr[0];
    for (int v = 1; v < V; ++v) mx = lr[v] > mx ? lr[v] : mx;
    double se = 0.0;
    for (int v = 0; v < V; ++v) se += std::exp(double(lr[v] - mx));
    const double lse = double(mx) + std::log(se);
    if (dr) {
      for (int v = 0; v < V; ++v) dr[v] = float(std::exp(double(lr[v]) - lse)) * scale;
      dr[y] -= scale;
    }
    return lse - double(lr[y]);
  });
  return n > 0 ? total / double(n) : 0.0;
}

}  // namespace gmlp::ops
