#pragma once
// The CUDA emulator's stand-in for <cuda_bf16.h>: the type alone, as the tensor cores'
// fragments (mma.h) name their operands; the sources hold bf16 as uint16_t bits and
// convert them themselves (ops/bf16.h).
#include <cstdint>

struct __nv_bfloat16 {
  uint16_t bits;
};
