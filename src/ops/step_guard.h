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

// guard[0, count): values of the step that must all be finite for it to update (the
// step's loss and its gradients' sum of squares, or the sum alone where each process
// has a loss of its own), or count 0 (no condition). A step that may not update changes
// nothing: the run stops on it, and the weights and moments stay the last good step's.
GMLP_STEP_FN bool step_may_update(const double* guard, int count) {
  for (int k = 0; k < count; ++k)
#if defined(__CUDA_ARCH__)
    if (!isfinite(guard[k])) return false;
#else
    if (!std::isfinite(guard[k])) return false;
#endif
  return true;
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
