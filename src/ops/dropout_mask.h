#pragma once
// Dropout masks by counter: an element's mask value is a hash of (seed, stream, global
// batch row, position, channel), so the ops that apply a mask compute it where they
// read it, on the CPU and on the GPU alike, and no mask is drawn on the host, stored or
// uploaded. The same step draws the same masks on any device and any number of ranks
// (a rank's row b is row row_offset + b of the global batch), whatever B and T are.
//
// The generator (docs/variants.md "Dropout"; python/gmlp/reference.py repeats it):
//   mix(z)      SplitMix64's finaliser: z ^= z >> 30; z *= 0xBF58476D1CE4E5B9;
//               z ^= z >> 27; z *= 0x94D049BB133111EB; z ^= z >> 31
//   stream key  K = mix(seed ^ mix(stream + 1))         stream: block l, or L for the head
//   row key     R = mix(K ^ (b << 32 | t))               b: global batch row, t: position
//   draw        u = mix(R + (c + 1) * 0x9E3779B97F4A7C15) >> 40   (24 bits), c: channel
//   value       0 where u < ceil(p * 2^24), else 1/(1 - p)
// Along a row the draws are SplitMix64's own sequence from R.
#include <cmath>
#include <cstdint>

#if defined(__CUDACC__)
#define GMLP_HOST_DEVICE __host__ __device__
#else
#define GMLP_HOST_DEVICE
#endif

namespace gmlp::ops {

constexpr uint64_t kGolden = 0x9E3779B97F4A7C15ULL;

GMLP_HOST_DEVICE inline uint64_t mix64(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
  return z ^ (z >> 31);
}

// The mask value of channel c in the row of key R: 0 where the draw is below threshold,
// else scale.
GMLP_HOST_DEVICE inline float drop_value(uint64_t R, int c, uint32_t threshold, float scale) {
  return uint32_t(mix64(R + uint64_t(c + 1) * kGolden) >> 40) < threshold ? 0.f : scale;
}

// One call's mask: inactive (threshold 0) means no dropout.
struct DropMask {
  uint64_t key = 0;        // the stream key K
  uint32_t threshold = 0;  // an element is dropped where its 24-bit draw is below this
  float scale = 1.f;       // the value of a kept element, 1/(1 - p)
  int row_offset = 0;      // the global batch row of the call's row 0
  GMLP_HOST_DEVICE bool active() const { return threshold != 0; }
  // Row (b, t)'s key; b counts from the call's first row.
  GMLP_HOST_DEVICE uint64_t row_key(int b, int t) const {
    return mix64(key ^ ((uint64_t(uint32_t(row_offset + b)) << 32) | uint32_t(t)));
  }
  GMLP_HOST_DEVICE float value(uint64_t R, int c) const { return drop_value(R, c, threshold, scale); }
};

// The mask of rate p (0 <= p < 1) for stream `stream` of the step's seed.
inline DropMask drop_mask(uint64_t seed, int stream, float p, int row_offset) {
  DropMask m;
  if (!(p > 0.f)) return m;
  m.key = mix64(seed ^ mix64(uint64_t(stream) + 1));
  m.threshold = uint32_t(std::ceil(double(p) * 16777216.0));  // p < 1: at most 2^24
  m.scale = 1.f / (1.f - p);
  m.row_offset = row_offset;
  return m;
}

}  // namespace gmlp::ops
