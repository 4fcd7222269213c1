#pragma once
// The CPU backend with its memory kept apart from the host's: a model or decoder on it
// takes the path a device takes (host mirrors, uploads, read-backs), with the CPU's
// arithmetic, so its results must equal the CPU's bit for bit.
#include "backend/cpu_backend.h"

namespace gmlp::test {

class SeparateMemoryBackend final : public CpuBackend {
 public:
  bool host_memory() const override { return false; }
};

inline SeparateMemoryBackend& separate_backend() {
  static SeparateMemoryBackend be;
  return be;
}

}  // namespace gmlp::test
