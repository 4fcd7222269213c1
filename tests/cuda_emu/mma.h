#pragma once
// The CUDA emulator's stand-in for <mma.h>: the warp matrix functions (nvcuda::wmma)
// over 16 x 16 x 16 tiles of bf16 operands and float accumulators, the one shape the
// sources use. A GPU spreads a fragment over its warp's 32 lanes in an order the API
// leaves unspecified; here every thread holds the whole tile, so code that only fills,
// loads, multiplies and stores fragments (as the sources do) computes what it computes
// on a GPU, and code that reads a fragment's elements by index would be wrong on one
// anyway. What the API requires is checked, and a breach ends the process naming it:
// every lane of the warp calls each function (a warp shuffle's rule, the emulator's
// check of it), with the same pointer and leading dimension; the pointer 256-bit
// aligned, the leading dimension a multiple of 16 bytes; an operand's fragment declared
// row- or column-major. The products are exact in float (two bf16 values' product is) and summed
// in k order, each sum rounded once, as a fused multiply-add would.
#include <cstdint>
#include <cstring>
#include <type_traits>

#include "cuda_bf16.h"
#include "cuda_runtime.h"

namespace nvcuda::wmma {

struct matrix_a {};
struct matrix_b {};
struct accumulator {};
struct row_major {};
struct col_major {};
enum layout_t { mem_row_major, mem_col_major };

template <typename Use, int M, int N, int K, typename T, typename Layout = void>
struct fragment {
  static_assert(M == 16 && N == 16 && K == 16, "the emulator's fragments are 16 x 16 x 16");
  static_assert(std::is_same_v<Use, accumulator> || !std::is_void_v<Layout>,
                "a matrix_a or matrix_b fragment is declared row_major or col_major");
  static constexpr int num_elements = 256;  // a 16 x 16 tile, whichever the use
  float x[256];                             // [row][column] of the tile
};

namespace detail {
inline float widen(__nv_bfloat16 v) {
  const uint32_t u = uint32_t(v.bits) << 16;
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}
inline float widen(float v) { return v; }
// Every lane of the warp here, with the same pointer and ldm: five exchanges across the
// warp's butterfly, each lane's pair the same as its partner's.
inline void same_in_warp(const void* p, unsigned ldm, const char* what) {
  struct {
    const void* p;
    uint64_t ldm;
  } mine{p, ldm}, other;
  for (int mask = 1; mask < 32; mask <<= 1) {
    ::gmlp::emu::warp_exchange(&mine, &other, sizeof mine, mask);
    if (other.p != mine.p || other.ldm != mine.ldm) ::gmlp::emu::fail(what);
  }
}
template <typename T>
void check(const T* p, unsigned ldm, const char* what) {
  same_in_warp(p, ldm, what);
  if (reinterpret_cast<uintptr_t>(p) % 32) ::gmlp::emu::fail(what);
  if ((ldm * sizeof(T)) % 16) ::gmlp::emu::fail(what);
}
template <typename T>
void load(float (&x)[256], const T* p, unsigned ldm, bool row) {
  check(p, ldm,
        "wmma::load_matrix_sync: every lane calls it with the same pointer, 32-byte aligned, and the same ldm, a "
        "multiple of 16 bytes");
  for (int i = 0; i < 16; ++i)
    for (int j = 0; j < 16; ++j) x[i * 16 + j] = widen(row ? p[size_t(i) * ldm + j] : p[i + size_t(j) * ldm]);
}
}  // namespace detail

template <typename Use, typename T, typename Layout>
void fill_fragment(fragment<Use, 16, 16, 16, T, Layout>& f, float v) {  // no lane's business but its own
  for (float& e : f.x) e = v;
}

template <typename Use, typename Layout>
void load_matrix_sync(fragment<Use, 16, 16, 16, __nv_bfloat16, Layout>& f, const __nv_bfloat16* p, unsigned ldm) {
  detail::load(f.x, p, ldm, std::is_same_v<Layout, row_major>);
}
inline void load_matrix_sync(fragment<accumulator, 16, 16, 16, float>& f, const float* p, unsigned ldm,
                             layout_t layout) {
  detail::load(f.x, p, ldm, layout == mem_row_major);
}

inline void store_matrix_sync(float* p, const fragment<accumulator, 16, 16, 16, float>& f, unsigned ldm,
                              layout_t layout) {
  detail::check(p, ldm,
                "wmma::store_matrix_sync: every lane calls it with the same pointer, 32-byte aligned, and the same "
                "ldm, a multiple of 16 bytes");
  for (int i = 0; i < 16; ++i)
    for (int j = 0; j < 16; ++j) {
      float& to = layout == mem_row_major ? p[size_t(i) * ldm + j] : p[i + size_t(j) * ldm];
      to = f.x[i * 16 + j];
    }
}

// d = a b + c; d may be c.
template <typename LA, typename LB>
void mma_sync(fragment<accumulator, 16, 16, 16, float>& d, const fragment<matrix_a, 16, 16, 16, __nv_bfloat16, LA>& a,
              const fragment<matrix_b, 16, 16, 16, __nv_bfloat16, LB>& b,
              const fragment<accumulator, 16, 16, 16, float>& c) {
  detail::same_in_warp(nullptr, 0, "wmma::mma_sync: every lane of the warp calls it");
  float out[256];
  for (int i = 0; i < 16; ++i)
    for (int j = 0; j < 16; ++j) {
      float s = c.x[i * 16 + j];
      for (int k = 0; k < 16; ++k) s += a.x[i * 16 + k] * b.x[k * 16 + j];
      out[i * 16 + j] = s;
    }
  std::memcpy(d.x, out, sizeof out);
}

}  // namespace nvcuda::wmma
