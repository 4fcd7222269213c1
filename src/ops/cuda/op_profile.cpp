// GMLP_CUDA_PROFILE=1: the device time of each backend op, measured with CUDA events
// recorded around it on the stream the ops run on, summed per op and printed to stderr
// when the process ends. The events are read back in batches (a wait every kBatch ops),
// so the ops still queue ahead of the GPU as they do unprofiled.
#include "ops/cuda/op_profile.h"

#include <cuda_profiler_api.h>
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <string>
#include <vector>

#include "gmlp/error.h"
#include "ops/cuda/cuda_ops.h"

namespace gmlp::cuda {
namespace {

constexpr size_t kBatch = 256;

struct Totals {
  int64_t calls = 0;
  double ms = 0;
};

class Profile {
 public:
  bool on = true;
  void restart() noexcept {
    settle();
    totals_.clear();
    if (first_) free_.push_back(first_);
    if (last_stop_) free_.push_back(last_stop_);
    first_ = last_stop_ = nullptr;
  }
  void begin(OpTimer::Events& t) {
    if (!first_) record(first_ = event());
    t.start = event();
    t.stop = event();
    record(t.start);
  }
  // Never throws: runs as an op unwinds too.
  void end(const char* op, const OpTimer::Events& t) noexcept {
    if (cudaEventRecord(t.stop, nullptr) != cudaSuccess) {
      cudaGetLastError();
      return;
    }
    pending_.push_back({op, t});
    if (pending_.size() >= kBatch) settle();
  }
  void report() noexcept {
    settle();
    float span = 0;
    if (!first_ || !last_stop_ || cudaEventElapsedTime(&span, first_, last_stop_) != cudaSuccess) span = 0;
    cudaGetLastError();
    if (totals_.empty()) return;
    std::vector<std::pair<std::string, Totals>> rows(totals_.begin(), totals_.end());
    std::sort(rows.begin(), rows.end(), [](const auto& a, const auto& b) { return a.second.ms > b.second.ms; });
    double busy = 0;
    int64_t calls = 0;
    for (const auto& r : rows) {
      busy += r.second.ms;
      calls += r.second.calls;
    }
    std::fprintf(stderr,
                 "gmlp: device time per op (GMLP_CUDA_PROFILE): %lld ops, %.3f ms in them of the %.3f ms from the "
                 "first op's start to the last op's end (%.1f%%; the rest is the device waiting for work)\n",
                 static_cast<long long>(calls), busy, double(span), span > 0 ? 100.0 * busy / span : 0.0);
    std::fprintf(stderr, "  %-28s %9s %12s %11s %7s\n", "op", "calls", "total ms", "mean us", "share");
    for (const auto& [op, s] : rows)
      std::fprintf(stderr, "  %-28s %9lld %12.3f %11.2f %6.1f%%\n", op.c_str(), static_cast<long long>(s.calls), s.ms,
                   1000.0 * s.ms / double(s.calls), busy > 0 ? 100.0 * s.ms / busy : 0.0);
  }

 private:
  cudaEvent_t event() {
    if (!free_.empty()) {
      cudaEvent_t e = free_.back();
      free_.pop_back();
      return e;
    }
    cudaEvent_t e = nullptr;
    check(int(cudaEventCreate(&e)), "cudaEventCreate (GMLP_CUDA_PROFILE)");
    return e;
  }
  static void record(cudaEvent_t e) { check(int(cudaEventRecord(e, nullptr)), "cudaEventRecord (GMLP_CUDA_PROFILE)"); }
  // Waits for the last pending op and adds up the pending ops' times; its stop event is
  // kept as the end of the span so far, every other event goes back to the pool.
  void settle() noexcept {
    if (pending_.empty()) return;
    if (cudaEventSynchronize(pending_.back().second.stop) != cudaSuccess) {
      cudaGetLastError();
      pending_.clear();
      return;
    }
    for (const auto& [op, t] : pending_) {
      float ms = 0;
      if (cudaEventElapsedTime(&ms, t.start, t.stop) == cudaSuccess) {
        Totals& s = totals_[op];
        ++s.calls;
        s.ms += ms;
      }
      free_.push_back(t.start);
      if (t.stop != pending_.back().second.stop) free_.push_back(t.stop);
    }
    cudaGetLastError();
    if (last_stop_) free_.push_back(last_stop_);
    last_stop_ = pending_.back().second.stop;
    pending_.clear();
  }

  std::vector<cudaEvent_t> free_;
  std::vector<std::pair<const char*, OpTimer::Events>> pending_;
  std::map<std::string, Totals> totals_;
  cudaEvent_t first_ = nullptr, last_stop_ = nullptr;
};

Profile* g_profile = nullptr;

}  // namespace

bool start_op_profile() {
  const char* v = std::getenv("GMLP_CUDA_PROFILE");
  if (!v || !*v || std::strcmp(v, "0") == 0) return false;
  if (std::strcmp(v, "1") != 0)
    throw Error(std::string("GMLP_CUDA_PROFILE: '") + v + "' is not 1 (profile each op) or 0 (don't)");
  g_profile = new Profile;  // lives until exit, when it reports
  // Registered after the CUDA runtime's own exit handlers (the runtime is initialised by
  // now), so it runs before them, while events can still be read.
  std::atexit([] { g_profile->report(); });
  return true;
}

void profile_ops(bool on) {
  // The same window for an attached profiler (ncu --profile-from-start off, in
  // scripts/gpu_checks.sh's ncu step): the timed steps alone. Without one, nothing.
  if ((on ? cudaProfilerStart() : cudaProfilerStop()) != cudaSuccess) cudaGetLastError();
  if (!g_profile) return;
  if (on) g_profile->restart();
  g_profile->on = on;
}

OpTimer::OpTimer(const char* op) : op_(g_profile && g_profile->on ? op : nullptr) {
  if (op_) g_profile->begin(events_);
}

OpTimer::~OpTimer() {
  if (op_) g_profile->end(op_, events_);
}

}  // namespace gmlp::cuda
