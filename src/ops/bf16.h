#pragma once
// bfloat16 as bit patterns (uint16_t), on the CPU and in the CUDA kernels alike: the
// CPU's bf16 products round their inputs with it (products.cpp), and the CUDA backend
// stores the SGU's saved activations with it under --precision bf16 (sgu.cu).
#include <bit>
#include <cstdint>

#if defined(__CUDACC__)
#define GMLP_BF16_FN __host__ __device__ inline
#else
#define GMLP_BF16_FN inline
#endif

namespace gmlp::ops {

GMLP_BF16_FN uint32_t float_bits(float x) {
#if defined(__CUDA_ARCH__)
  return __float_as_uint(x);
#else
  return std::bit_cast<uint32_t>(x);
#endif
}

GMLP_BF16_FN float bits_float(uint32_t u) {
#if defined(__CUDA_ARCH__)
  return __uint_as_float(u);
#else
  return std::bit_cast<float>(u);
#endif
}

// To nearest, ties to even (the largest floats round to infinity, subnormals kept); a
// NaN stays a NaN. Branch-free, so that loops over it vectorise. On the CPU a NaN keeps
// its top bits and is made quiet, as AVX512-BF16's conversion does. On a GPU (sm_80 on)
// the conversion is the hardware's one instruction, which gives the same bits for every
// other float and the canonical NaN 0x7fff. Written out it was seven PTX instructions,
// and the SGU's gate pass rounds three outputs a value.
GMLP_BF16_FN uint16_t to_bf16(float x) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  uint16_t h;
  asm("cvt.rn.bf16.f32 %0, %1;" : "=h"(h) : "f"(x));
  return h;
#else
  const uint32_t u = float_bits(x);
  const uint32_t rounded = (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;
  return uint16_t((u & 0x7fffffffu) > 0x7f800000u ? (u >> 16) | 0x40u : rounded);
#endif
}

GMLP_BF16_FN float from_bf16(uint16_t h) { return bits_float(uint32_t(h) << 16); }

}  // namespace gmlp::ops
