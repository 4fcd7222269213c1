#pragma once
// What an optimizer step decides from its two scalars, the loss and the gradients' sum of
// squares, written where the step runs (backend memory): the CPU's ops and the CUDA
// kernels read them in place, so that a GPU step queues its clipping and its update
// without waiting to read either back (docs/gpu.md, "A step waits once").
#include <cmath>

#if defined(__CUDACC__)
#define GMLP_STEP_FN __host__ __device__ inline
#else
#define GMLP_STEP_FN inline
#endif

namespace gmlp::ops {

// guard: [the step's loss, its gradients' sum of squares], or null (no condition). A step
// whose loss or gradient is not finite updates nothing: the run stops on it, and the
// weights and moments stay those of the last good step.
GMLP_STEP_FN bool step_may_update(const double* guard) {
  if (!guard) return true;
#if defined(__CUDA_ARCH__)
  return isfinite(guard[0]) && isfinite(guard[1]);
#else
  return std::isfinite(guard[0]) && std::isfinite(guard[1]);
#endif
}

// PyTorch's clip_grad_norm_: the gradients scale by max_norm / (norm + 1e-6) where that is
// below 1 and max_norm > 0; 1 (no scaling) otherwise. A non-finite norm scales nothing:
// the step will not update, and the gradient keeps the values that name the culprit.
GMLP_STEP_FN float clip_factor(double sum_squares, float max_norm) {
#if defined(__CUDA_ARCH__)
  if (!(max_norm > 0.f) || !isfinite(sum_squares)) return 1.f;
  const double norm = sqrt(sum_squares);
#else
  if (!(max_norm > 0.f) || !std::isfinite(sum_squares)) return 1.f;
  const double norm = std::sqrt(sum_squares);
#endif
  const double coef = double(max_norm) / (norm + 1e-6);
  return coef < 1.0 ? float(coef) : 1.f;
}

}  // namespace gmlp::ops
