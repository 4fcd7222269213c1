#pragma once
// Each backend op's device time under GMLP_CUDA_PROFILE=1 (op_profile.cpp, docs/gpu.md
// "Profiling"): an OpTimer at the top of each op of the CUDA backend.
#include <cuda_runtime_api.h>

namespace gmlp::cuda {

// Reads GMLP_CUDA_PROFILE (unset, empty or 0: off; 1: on; anything else is an error
// naming the variable); on, the table is printed to stderr when the process exits.
bool start_op_profile();
// Backend::profile_ops: on restarts the timing (what was timed is dropped), off pauses it.
void profile_ops(bool on);

// Times the op it lives through, when profiling is on; costs a branch when it is not.
class OpTimer {
 public:
  struct Events {
    cudaEvent_t start = nullptr, stop = nullptr;
  };
  explicit OpTimer(const char* op);
  ~OpTimer();
  OpTimer(const OpTimer&) = delete;
  OpTimer& operator=(const OpTimer&) = delete;

 private:
  const char* op_;
  Events events_;
};

}  // namespace gmlp::cuda
