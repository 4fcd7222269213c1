// Softmax cross-entropy with the softmax fused in: one pass computes the loss and,
// when asked, the gradient, without materialising probabilities separately.
#include <cmath>

#include "ops/fast_math.h"
#include "ops/ops.h"
#include "ops/reduce.h"

namespace gmlp::ops {

double cross_entropy(const float* logits, int M, int V, const int32_t* targets, float* dlogits, int64_t* count,
                     int64_t mean_over, const SoftTargets& soft) {
  int64_t own = 0;
  for (int r = 0; r < M; ++r) own += targets[r] >= 0;
  if (count) *count = own;
  const int64_t n = mean_over > 0 ? mean_over : own;
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
#pragma omp simd reduction(max : mx)
    for (int v = 1; v < V; ++v) mx = lr[v] > mx ? lr[v] : mx;
    // One vectorised float exp per logit (libm's scalar double exp, twice per logit,
    // was 3.5% of a tiny training step), summed in double: kept in the gradient's row
    // when there is one, recomputed for the loss alone.
    double se;
    if (dr) {
#pragma omp simd
      for (int v = 0; v < V; ++v) dr[v] = fast::exp(lr[v] - mx);
      se = lane_sum<double>(V, [dr](int v) { return dr[v]; });
      const float k = float(double(scale) / se);
#pragma omp simd
      for (int v = 0; v < V; ++v) dr[v] *= k;
      if (!soft.active()) dr[y] -= scale;
    } else {
      se = lane_sum<double>(V, [lr, mx](int v) { return fast::exp(lr[v] - mx); });
    }
    const double lse = double(mx) + std::log(se);
    if (!soft.active()) return lse - double(lr[y]);
    // q = on_a e_y + on_b e_b + off: the gradient subtracts it, the loss is lse - q . logits.
    const int b = soft.second ? soft.second[r] : y;
    const double w = soft.weight ? double(soft.weight[r]) : 1.0, keep = 1.0 - double(soft.smoothing);
    const double on_a = keep * w, on_b = keep * (1.0 - w), off = double(soft.smoothing) / V;
    if (dr) {
      const float o = float(off * scale);
#pragma omp simd
      for (int v = 0; v < V; ++v) dr[v] -= o;
      dr[y] -= float(on_a * scale);
      dr[b] -= float(on_b * scale);
    }
    const double sum = off > 0 ? lane_sum<double>(V, [lr](int v) { return double(lr[v]); }) : 0.0;
    return lse - on_a * double(lr[y]) - on_b * double(lr[b]) - off * sum;
  });
  return n > 0 ? total / double(n) : 0.0;
}

}  // namespace gmlp::ops
