#pragma once
// The CUDA emulator: see cuda_runtime.h beside this file. No profiler attaches to the
// emulator; the window calls (src/ops/cuda/op_profile.cpp) succeed and do nothing.
#include "cuda_runtime.h"
cudaError_t cudaProfilerStart();
cudaError_t cudaProfilerStop();
