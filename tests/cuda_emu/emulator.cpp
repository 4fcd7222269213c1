// The CUDA emulator's runtime (tests/cuda_emu/README.md): kernels run on the CPU, one
// block at a time, each thread a fiber that the scheduler switches at __syncthreads and
// warp shuffles; device memory is host memory the emulator tracks, so
// copies and cuBLAS calls check their pointers and leading dimensions; cuBLAS's two
// products are written from its documented column-major semantics.
//
// Two schedules (run_block_fibers): blocks and threads in index order, the block in
// step; or, with GMLP_CUDA_EMULATOR_ORDER=reverse, in reverse order with each warp
// running ahead alone. CUDA promises neither, so a kernel's result must be the same
// under both.
//
// What breaks a rule of the device language ends the process with a message naming the
// launch site: a barrier not every thread of the block reaches, a shuffle not every lane
// of the warp reaches or whose partner lane does not exist, a barrier inside a launch
// site that earlier ran without any.
#include <sys/mman.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "cublasLt.h"
#include "cublas_v2.h"
#include "cuda_profiler_api.h"
#include "cuda_runtime.h"

// Under AddressSanitizer (scripts/sanitize.sh) the emulator tells it of every stack
// switch, and device memory is allocated at its exact size: a kernel that reads or
// writes past a buffer, or past a __shared__ array, is then a heap- or
// global-buffer-overflow report naming the kernel: a CPU-side memcheck.
#if defined(__SANITIZE_ADDRESS__)
#include <sanitizer/asan_interface.h>
#include <sanitizer/common_interface_defs.h>
#define GMLP_EMU_ASAN 1
#else
#define GMLP_EMU_ASAN 0
#endif

namespace gmlp::emu {

dim3 thread_idx, block_idx, block_dim, grid_dim;  // one launch at a time (g_launch_mutex)

namespace {

// ---- memory: every allocation, by address, for the copies' and products' checks
std::mutex g_mem_mutex;
std::map<const char*, size_t> g_allocs;  // start -> bytes
size_t g_live = 0;                       // their sum
thread_local cudaError_t g_last_error = cudaSuccess;

cudaError_t record(cudaError_t e) {
  if (e != cudaSuccess) g_last_error = e;
  return e;
}


[[noreturn]] void die(const std::string& what) {
  std::fprintf(stderr, "CUDA emulator: %s\n", what.c_str());
  std::fflush(stderr);
  std::abort();
}

// A setting of the emulator's own that it does not understand: the run ends with status
// 2 and the message, not an abort (die's, for a broken rule of the device, whose core is
// worth keeping), whose "Aborted" from the shell read like a crash in the tests' logs.
[[noreturn]] void refuse(const std::string& what) {
  std::fprintf(stderr, "CUDA emulator: %s\n", what.c_str());
  std::fflush(stderr);
  std::_Exit(2);
}

// ---- the scheduler
//
// A fiber switch saves the callee-saved registers on the stack it leaves and takes the
// other's (System V x86-64). glibc's swapcontext does that plus a system call for the
// signal mask and the floating-point control words (which no kernel changes), which made
// the CUDA tests' millions of barriers and shuffles take ten times as long.
extern "C" void gmlp_emu_switch(void** save_sp, void* load_sp);
asm(R"(
  .text
  .globl gmlp_emu_switch
  .hidden gmlp_emu_switch
  .type gmlp_emu_switch, @function
gmlp_emu_switch:
  pushq %rbp
  pushq %rbx
  pushq %r12
  pushq %r13
  pushq %r14
  pushq %r15
  movq %rsp, (%rdi)
  movq %rsi, %rsp
  popq %r15
  popq %r14
  popq %r13
  popq %r12
  popq %rbx
  popq %rbp
  ret
  .size gmlp_emu_switch, .-gmlp_emu_switch
)");

enum class Wait { none, block, warp, done };

struct Fiber {
  void* sp = nullptr;  // its saved stack pointer while it is not running
  Wait wait = Wait::none;
  dim3 idx;
  void* asan_fake = nullptr;  // AddressSanitizer's fake stack while switched out
};

constexpr size_t kStackBytes = GMLP_EMU_ASAN ? 512 * 1024 : 64 * 1024;

// AddressSanitizer's two halves of a switch (nothing without it): before leaving a
// stack for the one at [bottom, bottom + size), and on arriving.
void asan_leave(void** fake, const void* bottom, size_t size) {
#if GMLP_EMU_ASAN
  __sanitizer_start_switch_fiber(fake, bottom, size);
#else
  (void)fake, (void)bottom, (void)size;
#endif
}
void asan_arrive(void* fake, const void** bottom_old, size_t* size_old) {
#if GMLP_EMU_ASAN
  __sanitizer_finish_switch_fiber(fake, bottom_old, size_old);
#else
  (void)fake, (void)bottom_old, (void)size_old;
#endif
}

struct Run {
  Site* site = nullptr;
  const std::function<void()>* body = nullptr;
  bool plain = false;   // threads as plain calls: no barrier may be reached
  bool synced = false;  // a barrier was reached in this launch
  unsigned threads = 0;
  std::vector<Fiber> fibers;
  // Warp exchange, 16 bytes a thread in each of two buffers: shuffles alternate between
  // them, so a lane can write its next value before its partner has read the last one
  // (no lane gets two shuffles ahead: each shuffle waits for the whole warp).
  std::vector<unsigned char> slots[2];
  std::vector<unsigned char> phase;  // each thread's next buffer
  void* sched_sp = nullptr;          // the scheduler's, while a fiber runs
  const void* sched_bottom = nullptr;  // the scheduler's stack, for AddressSanitizer
  size_t sched_size = 0;
  void* sched_fake = nullptr;
  std::vector<unsigned> at_warp;     // per warp: lanes waiting at a shuffle
  unsigned at_block = 0, done = 0;   // threads waiting at __syncthreads, returned
  unsigned current = 0;
};

Run* g_run = nullptr;

// A switch of two values from the environment: false where unset, empty or `off`, true
// where `on`; anything else ends the process naming the variable.
bool env_switch(const char* name, const char* off, const char* on) {
  const char* v = std::getenv(name);
  if (!v || !*v || std::strcmp(v, off) == 0) return false;
  if (std::strcmp(v, on) == 0) return true;
  refuse(std::string(name) + "=" + v + ": expected " + off + " or " + on);
}

// Whether blocks and threads run in decreasing index order, each warp running ahead
// (GMLP_CUDA_EMULATOR_ORDER=reverse; run_block_fibers). A thread that reads what
// another writes with no barrier between them, or a block that reads what another block
// of its launch writes, sees the new value in one order and the old in the other: the
// tests, run both ways, then disagree with the CPU in one.
bool reverse_order() {
  static const bool reverse = env_switch("GMLP_CUDA_EMULATOR_ORDER", "forward", "reverse");
  return reverse;
}

// Whether the emulator times the host alone (GMLP_CUDA_EMULATOR_HOST_ONLY=1): a launch,
// a product, a fill or a device-to-device copy is counted and does nothing, so that a
// run's time is the host's own work (gmlp's side of each op, its checks, its uploads),
// without the CUDA runtime's launch cost. Every result is then garbage: for timing
// (docs/gpu.md, "The host's side of a step"), never for tests of values.
bool host_only() {
  static const bool on = env_switch("GMLP_CUDA_EMULATOR_HOST_ONLY", "0", "1");
  return on;
}
// What a host-only run skipped, and how long the device would have sat idle waiting for
// the host: from the end of each wait for the legacy stream's work (a read-back, a
// synchronous upload, a synchronisation of the device, of that stream or of an event
// recorded on it) to the next work queued for it (a launch, a product, a fill, a device
// copy, an upload beside), the host's work in between is time a GPU that had finished
// spends doing nothing. A wait for another stream alone (an upload beside) leaves the
// legacy stream's work running. Host threads may launch at once: atomics and a mutex.
struct HostOnlyCounts {
  std::atomic<uint64_t> launches{0}, products{0}, beside{0};
  std::mutex m;
  bool idle = false;  // the device has nothing queued since the last wait
  std::chrono::steady_clock::time_point idle_since;
  std::vector<double> gaps;  // each wait's ms
  std::vector<const Site*> sites;  // every launch site that skipped a launch, once
  uint64_t queued = 0;             // the legacy stream's work queued so far (an event's record notes it)
  // The host waited for the legacy stream's work up to the `upto`-th piece queued (all
  // of it by default): idle only if nothing was queued after that.
  void waited(uint64_t upto = UINT64_MAX) {
    if (!host_only()) return;
    std::lock_guard<std::mutex> lock(m);
    if (idle || upto < queued) return;  // still idle, or the device still has work
    idle = true;
    idle_since = std::chrono::steady_clock::now();
  }
  uint64_t queued_so_far() {
    if (!host_only()) return 0;
    std::lock_guard<std::mutex> lock(m);
    return queued;
  }
  // Work queued for the device; `legacy`: on the legacy stream, which a wait for an event
  // recorded there waits for (an upload beside ends an idle stretch but is not that work).
  void work(bool legacy = true) {
    if (!host_only()) return;
    std::lock_guard<std::mutex> lock(m);
    if (legacy) ++queued;
    if (!idle) return;
    idle = false;
    gaps.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - idle_since).count());
  }
  // Counted at the site, listed at its first: no lookup by name a launch, which the
  // host times that the counts come with would include.
  void skip_launch(Site& site) {
    ++launches;
    if (site.skipped.fetch_add(1, std::memory_order_relaxed) == 0) {
      std::lock_guard<std::mutex> lock(m);
      sites.push_back(&site);
    }
    work();
  }
  void skip_product() {
    ++products;
    work();
  }
  // A run's set-up waits are few and long, a training loop's one or two a step: the median is a step's.
  ~HostOnlyCounts() {
    if (!host_only()) return;
    double all = 0;
    for (double g : gaps) all += g;
    std::sort(gaps.begin(), gaps.end());
    std::fprintf(stderr,
                 "CUDA emulator (host only): %llu launches, %llu matrix products and %llu uploads beside skipped; "
                 "the device waited for the host %zu times, %.3f ms in all, %.4f ms the median wait\n",
                 static_cast<unsigned long long>(launches.load()), static_cast<unsigned long long>(products.load()),
                 static_cast<unsigned long long>(beside.load()), gaps.size(), all,
                 gaps.empty() ? 0.0 : gaps[gaps.size() / 2]);
    // Most launched first: what a change to a step's launches moved (bench/host_side.py --kernels).
    std::map<std::string, uint64_t> by_kernel;  // sites of one kernel added together
    for (const Site* s : sites) by_kernel[s->name] += s->skipped.load();
    std::vector<std::pair<uint64_t, std::string>> most;
    for (const auto& [name, n] : by_kernel) most.emplace_back(n, name);
    std::sort(most.begin(), most.end(), [](const auto& a, const auto& b) { return a.first > b.first; });
    for (const auto& [n, name] : most)
      std::fprintf(stderr, "CUDA emulator (host only): %llu launches of %s\n", static_cast<unsigned long long>(n),
                   name.c_str());
  }
} g_skipped;

// The k-th of n in the scheduler's order.
unsigned in_order(unsigned k, unsigned n) { return reverse_order() ? n - 1 - k : k; }
// One stack per thread of the largest block yet, each above a page no access may touch:
// a kernel that overflows its stack faults there instead of writing over its neighbour's.
struct Stack {
  char* base = nullptr;  // the usable stack, kStackBytes above the guard page
  Stack() {
    void* m = mmap(nullptr, kStackBytes + kGuard, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (m == MAP_FAILED) die("cannot map a fiber stack");
    if (mprotect(m, kGuard, PROT_NONE) != 0) die("cannot protect a fiber stack's guard page");
    base = static_cast<char*>(m) + kGuard;
  }
  static constexpr size_t kGuard = 4096;
};
std::vector<std::unique_ptr<Stack>> g_stacks;
std::mutex g_launch_mutex;  // one launch at a time: __shared__ is a static

std::string site_of(const Run& r) { return std::string("kernel ") + (r.site ? r.site->name : "?"); }

// A fiber's first instructions: the body, then back to the scheduler for good.
[[noreturn]] void fiber_main() {
  Run& r = *g_run;
  asan_arrive(nullptr, &r.sched_bottom, &r.sched_size);
  (*r.body)();
  Fiber& f = r.fibers[r.current];
  f.wait = Wait::done;
  ++r.done;
  asan_leave(nullptr, r.sched_bottom, r.sched_size);  // null: this fiber's stack is done with
  gmlp_emu_switch(&f.sp, r.sched_sp);
  die("a finished fiber was resumed");
}

// A fresh stack whose first switch "returns" into fiber_main, aligned as a call would
// leave it.
void* fresh_stack(char* base) {
#if GMLP_EMU_ASAN
  __asan_unpoison_memory_region(base, kStackBytes);  // a finished fiber's frames never unwound
#endif
  uintptr_t top = (reinterpret_cast<uintptr_t>(base) + kStackBytes) & ~uintptr_t(15);
  auto* w = reinterpret_cast<uint64_t*>(top);
  *--w = 0;                                        // fiber_main's (never used) return address
  *--w = reinterpret_cast<uint64_t>(&fiber_main);  // where the switch's ret goes
  for (int i = 0; i < 6; ++i) *--w = 0;            // rbp, rbx, r12-r15
  return w;
}

void wait_at(Wait kind, const char* what) {
  Run* r = g_run;
  if (!r) die(std::string(what) + " outside a kernel");
  if (r->plain)
    die(site_of(*r) + ": " + what + " reached in a launch run without fibers (an earlier launch of this site "
                               "reached none); the emulator cannot run this site's threads as plain calls");
  r->synced = true;
  Fiber& f = r->fibers[r->current];
  f.wait = kind;
  if (kind == Wait::warp)
    ++r->at_warp[r->current / 32];
  else
    ++r->at_block;
  asan_leave(&f.asan_fake, r->sched_bottom, r->sched_size);
  gmlp_emu_switch(&f.sp, r->sched_sp);
  asan_arrive(f.asan_fake, nullptr, nullptr);
}

// A thread's linear index in its block (warps are runs of 32 of these), and back.
unsigned linear(const dim3& i, const dim3& dim) { return i.x + dim.x * (i.y + dim.y * i.z); }
dim3 thread_at(unsigned t, const dim3& dim) { return dim3(t % dim.x, (t / dim.x) % dim.y, t / (dim.x * dim.y)); }

// Runs thread t until it waits at a barrier or returns.
void run_fiber(Run& r, unsigned t) {
  r.current = t;
  thread_idx = r.fibers[t].idx;
  asan_leave(&r.sched_fake, g_stacks[t]->base, kStackBytes);
  gmlp_emu_switch(&r.sched_sp, r.fibers[t].sp);
  asan_arrive(r.sched_fake, nullptr, nullptr);
}

// Lets warp w past its shuffle if every lane waits there; false if none does.
bool release_warp(Run& r, unsigned w) {
  if (r.at_warp[w] == 0) return false;
  const unsigned lo = w * 32, hi = std::min(r.threads, lo + 32);
  if (r.at_warp[w] != hi - lo)
    die(site_of(r) + ": a warp shuffle that not every lane of warp " + std::to_string(w) + " reached (" +
        std::to_string(r.at_warp[w]) + " of " + std::to_string(hi - lo) + " lanes)");
  for (unsigned t = lo; t < hi; ++t) r.fibers[t].wait = Wait::none;
  r.at_warp[w] = 0;
  return true;
}

// Two schedules. Forward: every thread runs to its next wait, in index order, then the
// warps waiting at a shuffle go on, round after round, so the whole block advances in
// step. Reverse: warp by warp from the last, lanes from the last, each warp as far as it
// gets alone (through its shuffles, to the block's barrier) before the next starts, so
// one warp runs ahead of the others: a warp that writes shared memory another still
// reads, with no barrier between, then gives another result.
void run_block_fibers(Run& r) {
  const unsigned n = r.threads, warps = (n + 31) / 32;
  while (g_stacks.size() < n) g_stacks.emplace_back(new Stack);
  r.fibers.assign(n, Fiber{});
  r.phase.assign(n, 0);
  r.at_warp.assign(warps, 0);
  r.at_block = r.done = 0;
  for (unsigned t = 0; t < n; ++t) {
    Fiber& f = r.fibers[t];
    f.idx = thread_at(t, block_dim);
    f.sp = fresh_stack(g_stacks[t]->base);
  }
  for (;;) {
    if (reverse_order()) {
      for (unsigned w = warps; w-- > 0;) {
        const unsigned lo = w * 32, hi = std::min(n, lo + 32);
        do
          for (unsigned t = hi; t-- > lo;)
            if (r.fibers[t].wait == Wait::none) run_fiber(r, t);
        while (release_warp(r, w));
      }
    } else {
      for (unsigned t = 0; t < n; ++t)
        if (r.fibers[t].wait == Wait::none) run_fiber(r, t);
      bool released = false;
      for (unsigned w = 0; w < warps; ++w) released = release_warp(r, w) || released;
      if (released) continue;
    }
    // Every fiber now waits at the block's barrier or is done.
    if (r.done == n) return;
    if (r.done > 0)
      die(site_of(r) + ": __syncthreads() that not every thread of block (" + std::to_string(block_idx.x) + ", " +
          std::to_string(block_idx.y) + ") reached (" + std::to_string(r.at_block) + " of " + std::to_string(n) +
          " threads; the rest had returned)");
    for (Fiber& f : r.fibers) f.wait = Wait::none;
    r.at_block = 0;
  }
}

}  // namespace

void fail(const char* what) { die(what); }

bool on_device(const void* p, size_t bytes) {
  std::lock_guard<std::mutex> lock(g_mem_mutex);
  const char* c = static_cast<const char*>(p);
  auto it = g_allocs.upper_bound(c);
  if (it == g_allocs.begin()) return false;
  --it;
  return c >= it->first && c + bytes <= it->first + it->second;
}


void syncthreads() { wait_at(Wait::block, "__syncthreads()"); }

void warp_exchange(const void* mine, void* partner, size_t bytes, int lane_mask) {
  Run* r = g_run;
  if (!r) die("a warp shuffle outside a kernel");
  if (bytes > 16) die("a warp shuffle of more than 16 bytes");
  if (r->plain) wait_at(Wait::warp, "a warp shuffle");  // ends the process, naming the site
  const unsigned t = linear(thread_idx, block_dim), other = t ^ unsigned(lane_mask);
  if (lane_mask < 0 || lane_mask > 31 || other >= r->threads)
    die(site_of(*r) + ": thread " + std::to_string(t) + " shuffles with lane mask " + std::to_string(lane_mask) +
        ", whose partner thread " + std::to_string(other) + " does not exist (" + std::to_string(r->threads) +
        " threads)");
  const int p = r->phase[t];
  r->phase[t] = uint8_t(p ^ 1);
  std::memcpy(&r->slots[p][size_t(t) * 16], mine, bytes);
  wait_at(Wait::warp, "a warp shuffle");
  std::memcpy(partner, &r->slots[p][size_t(other) * 16], bytes);
}

void run_grid(Site& site, dim3 grid, dim3 block, const std::function<void()>& body) {
  const uint64_t threads = uint64_t(block.x) * block.y * block.z;
  if (threads == 0 || threads > 1024 || block.z > 64 || grid.x == 0 || grid.y == 0 || grid.z == 0 ||
      grid.x > 0x7fffffffu || grid.y > 65535 || grid.z > 65535) {
    record(cudaErrorInvalidConfiguration);
    return;
  }
  if (host_only()) {
    g_skipped.skip_launch(site);
    return;
  }
  std::lock_guard<std::mutex> lock(g_launch_mutex);
  Run r;
  r.site = &site;
  r.body = &body;
  r.plain = site.plain;
  r.threads = unsigned(threads);
  for (auto& s : r.slots) s.assign(size_t(threads) * 16, 0);
  Run* outer = g_run;
  g_run = &r;
  grid_dim = grid;
  block_dim = block;
  const uint64_t blocks = uint64_t(grid.x) * grid.y * grid.z;
  for (uint64_t k = 0; k < blocks; ++k) {
    const uint64_t b = reverse_order() ? blocks - 1 - k : k;
    block_idx = dim3(unsigned(b % grid.x), unsigned(b / grid.x % grid.y), unsigned(b / (uint64_t(grid.x) * grid.y)));
    if (r.plain) {
      for (unsigned k2 = 0; k2 < r.threads; ++k2) {
        thread_idx = thread_at(in_order(k2, r.threads), block);
        body();
      }
    } else {
      run_block_fibers(r);
    }
  }
  g_run = outer;
  if (!r.synced) site.plain = true;
}

}  // namespace gmlp::emu

using gmlp::emu::record;

// ---- the runtime
namespace {
// The device's memory, GMLP_CUDA_EMULATOR_MEMORY_MIB (unset: as much as the host
// gives): a cudaMalloc past it fails as a full GPU's does, for the tests of what gmlp
// says when a batch does not fit.
size_t device_memory() {
  static const size_t bytes = [] {
    const char* v = std::getenv("GMLP_CUDA_EMULATOR_MEMORY_MIB");
    if (!v || !*v) return SIZE_MAX;
    char* end = nullptr;
    const unsigned long long mib = std::strtoull(v, &end, 10);
    if (*end != '\0' || mib == 0 || mib > (1ull << 30))
      gmlp::emu::refuse(std::string("GMLP_CUDA_EMULATOR_MEMORY_MIB=") + v + ": expected a positive number of MiB");
    return size_t(mib) << 20;
  }();
  return bytes;
}
}  // namespace

// GMLP_CUDA_EMULATOR_DRIVER=old plays a driver older than the runtime, as CUDA reports it,
// so that the tests can see what gmlp says of a GPU machine whose CUDA does not work.
cudaError_t cudaGetDeviceCount(int* count) {
  const char* driver = std::getenv("GMLP_CUDA_EMULATOR_DRIVER");
  if (driver && std::strcmp(driver, "old") == 0) {
    *count = 0;
    return record(cudaErrorInsufficientDriver);
  }
  *count = 1;
  return cudaSuccess;
}

cudaError_t cudaGetDevice(int* device) {
  *device = 0;
  return cudaSuccess;
}

cudaError_t cudaGetDeviceProperties(cudaDeviceProp* prop, int device) {
  if (device != 0) return record(cudaErrorInvalidValue);
  *prop = cudaDeviceProp{};
  std::snprintf(prop->name, sizeof prop->name, "the CUDA emulator on the CPU (tests/cuda_emu), not a GPU");
  prop->major = 0;
  prop->minor = 0;
  prop->multiProcessorCount = 1;
  prop->totalGlobalMem = device_memory() == SIZE_MAX ? 0 : device_memory();
  return cudaSuccess;
}

cudaError_t cudaSetDevice(int device) { return record(device == 0 ? cudaSuccess : cudaErrorInvalidValue); }

cudaError_t cudaMalloc(void** p, size_t bytes) {
  *p = nullptr;
  if (bytes == 0) return cudaSuccess;
  {
    std::lock_guard<std::mutex> lock(gmlp::emu::g_mem_mutex);
    if (bytes > device_memory() - std::min(gmlp::emu::g_live, device_memory()))
      return record(cudaErrorMemoryAllocation);
  }
  // 256-byte aligned as cudaMalloc's; at the exact size under AddressSanitizer, which
  // then reports a kernel's first byte past the end.
  void* q = nullptr;
  if (posix_memalign(&q, 256, GMLP_EMU_ASAN ? bytes : (bytes + 255) / 256 * 256) != 0) q = nullptr;
  if (!q) return record(cudaErrorMemoryAllocation);
  // Fresh device memory holds garbage, never zeros to rely on: all bits set, a NaN read
  // as a float or as bf16 (0xA5 bytes read as bf16 were -2.9e-16, as good as a zero).
  // Timing the host alone, zeros: nothing computes, and a training run's loss and
  // gradient norm then read as finite, so that its loop goes on rather than stop on NaN.
  std::memset(q, gmlp::emu::host_only() ? 0 : 0xFF, bytes);
  std::lock_guard<std::mutex> lock(gmlp::emu::g_mem_mutex);
  gmlp::emu::g_allocs[static_cast<const char*>(q)] = bytes;
  gmlp::emu::g_live += bytes;
  *p = q;
  return cudaSuccess;
}

cudaError_t cudaFree(void* p) {
  if (!p) return cudaSuccess;
  std::lock_guard<std::mutex> lock(gmlp::emu::g_mem_mutex);
  auto it = gmlp::emu::g_allocs.find(static_cast<const char*>(p));
  if (it == gmlp::emu::g_allocs.end()) return record(cudaErrorInvalidValue);
  gmlp::emu::g_live -= it->second;
  gmlp::emu::g_allocs.erase(it);
  std::free(p);
  return cudaSuccess;
}

namespace {
// Below, with the uploads beside: the host has waited for the legacy stream's work up
// to its op `upto`, and a fill queued on that stream.
void legacy_done(uint64_t upto);
void queued_fill(const void* p, size_t bytes);
}  // namespace

cudaError_t cudaMemcpy(void* dst, const void* src, size_t bytes, cudaMemcpyKind kind) {
  if (bytes == 0) return cudaSuccess;
  if (kind != cudaMemcpyDeviceToDevice) legacy_done(UINT64_MAX);
  const bool dst_dev = gmlp::emu::on_device(dst, bytes), src_dev = gmlp::emu::on_device(src, bytes);
  const bool ok = kind == cudaMemcpyHostToDevice   ? dst_dev && !src_dev
                  : kind == cudaMemcpyDeviceToHost ? src_dev && !dst_dev
                  : kind == cudaMemcpyDeviceToDevice ? src_dev && dst_dev
                                                     : kind == cudaMemcpyDefault;
  if (!ok) return record(cudaErrorInvalidValue);
  if (gmlp::emu::host_only() && kind == cudaMemcpyDeviceToDevice) {  // the device's work
    gmlp::emu::g_skipped.work();
    return cudaSuccess;
  }
  std::memmove(dst, src, bytes);
  // A copy to or from the host waits for the legacy stream's work first and returns when
  // it is done; a device copy is queued like a launch.
  if (kind == cudaMemcpyDeviceToDevice)
    gmlp::emu::g_skipped.work();
  else
    gmlp::emu::g_skipped.waited();
  return cudaSuccess;
}

cudaError_t cudaMemset(void* p, int value, size_t bytes) {
  if (bytes == 0) return cudaSuccess;
  if (!gmlp::emu::on_device(p, bytes)) return record(cudaErrorInvalidValue);
  gmlp::emu::g_skipped.work();
  if (gmlp::emu::host_only()) return cudaSuccess;
  std::memset(p, value, bytes);
  queued_fill(p, bytes);
  return cudaSuccess;
}

// ---- streams, events, page-locked memory and the uploads beside the device's work
//
// Launches, products and the synchronous copies run to completion when they are made,
// so work on the legacy stream is always in issue order. An asynchronous upload on a
// stream of its own (cudaStreamNonBlocking) is different on a GPU: its copy engine runs
// it whenever it gets to it, beside the other streams' work. Two rules follow, and the
// emulator makes breaking either fail loudly:
//  - The device's other work sees the upload's bytes only if it waits for an event
//    recorded behind it. The emulator copies at the first such wait, not before: work
//    that reads the destination without waiting sees the bytes from before.
//  - The host may write the upload's source again only once it has waited for the
//    upload: for its event, its stream or the device, or with a synchronous call on the
//    legacy stream after that stream was made to wait for it (a read-back alone does not
//    wait for another stream). The emulator hashes the source when the upload is queued
//    and again at every wait until the host's, and a host that wrote it in between ends
//    the process, naming the bytes.
struct CUstream_st {
  bool beside = false;        // non-blocking: its copies wait for nothing and nothing waits for them
  uint64_t queued = 0;        // copies queued on it so far
  uint64_t after_legacy = 0;  // its copies from now on come after the legacy stream's ops up to this one
};
struct CUevent_st {
  std::chrono::steady_clock::time_point at;  // the host time of its record (GMLP_CUDA_PROFILE's elapsed times)
  bool recorded = false;
  cudaStream_t stream = nullptr;  // where it was recorded (nullptr: the legacy stream), behind how many of its copies
  uint64_t behind = 0;            // (or of the legacy stream's ops)
  uint64_t work_behind = 0;       // host only: the device's work queued before it
};

namespace {

struct Beside {
  void* dst;
  const void* src;
  size_t bytes;
  uint64_t hash;
  cudaStream_t stream;
  uint64_t seq;
  bool copied = false;  // its bytes are the device's: work waited for it
  uint64_t legacy_at =
      0;  // the legacy stream's op that waited for it (0: none did): the host's wait past it is a wait for it
};
// A fill queued on the legacy stream that the host has not waited for: on a GPU it may
// land after an upload beside queued later into the same memory.
struct Fill {
  const char* p;
  size_t bytes;
  uint64_t op;
};
// A read-back queued on the legacy stream (Backend::download_queued): the source's bytes
// as the work before it left them, landing in host memory only when the host waits past
// it. A host that reads the destination before then reads what was there.
struct Readback {
  void* dst;
  std::vector<unsigned char> bytes;
  uint64_t op;
};
std::mutex g_beside_mutex;
std::vector<Beside> g_beside;  // queued, or copied but not yet waited for by the host
std::vector<Fill> g_fills;
std::vector<Readback> g_readbacks;
uint64_t g_legacy_ops = 0;               // the legacy stream's fills and waits for uploads, numbered
std::map<const char*, size_t> g_pinned;  // cudaMallocHost's allocations, start -> bytes

bool is_legacy(cudaStream_t s) { return s == nullptr || s == cudaStreamLegacy || !s->beside; }

uint64_t hash_bytes(const void* p, size_t n) {
  const auto* c = static_cast<const unsigned char*>(p);
  uint64_t h = 14695981039346656037ull;
  for (size_t i = 0; i < n; ++i) h = (h ^ c[i]) * 1099511628211ull;
  return h;
}

void check_source(const Beside& c) {
  if (hash_bytes(c.src, c.bytes) != c.hash)
    gmlp::emu::die("the host wrote the " + std::to_string(c.bytes) + " bytes at " +
                   std::to_string(reinterpret_cast<uintptr_t>(c.src)) +
                   " while an asynchronous upload from them was in flight: a GPU may copy either the old bytes or "
                   "the new (wait for the upload's event, its stream or the device before writing them)");
}

// The uploads that `match` picks: copied now if not yet (work waits for them: at the
// legacy stream's op `legacy_at` when that stream's), and forgotten if `host_waited` (the
// host waited for them: their sources are the host's again), their sources checked
// either way. With g_beside_mutex held.
template <typename Match>
void settle_locked(Match match, uint64_t legacy_at, bool host_waited) {
  auto keep = g_beside.begin();
  for (auto it = g_beside.begin(); it != g_beside.end(); ++it) {
    if (!match(*it)) {
      *keep++ = *it;
      continue;
    }
    check_source(*it);
    if (!it->copied) std::memmove(it->dst, it->src, it->bytes);
    it->copied = true;
    if (!it->legacy_at) it->legacy_at = legacy_at;
    if (!host_waited) *keep++ = *it;
  }
  g_beside.erase(keep, g_beside.end());
}
template <typename Match>
void settle(Match match, uint64_t legacy_at, bool host_waited) {
  std::lock_guard<std::mutex> lock(g_beside_mutex);
  settle_locked(match, legacy_at, host_waited);
}
auto up_to(cudaEvent_t e) {
  return [s = e->stream, n = e->behind](const Beside& c) { return c.stream == s && c.seq <= n; };
}
auto every() {
  return [](const Beside&) { return true; };
}
// The host has waited for the legacy stream's work up to its op `upto`: the fills among
// it are done, and so are the uploads it waited for.
void legacy_done(uint64_t upto) {
  std::lock_guard<std::mutex> lock(g_beside_mutex);
  settle_locked([upto](const Beside& c) { return c.legacy_at && c.legacy_at <= upto; }, 0, true);
  g_fills.erase(std::remove_if(g_fills.begin(), g_fills.end(), [upto](const Fill& f) { return f.op <= upto; }),
                g_fills.end());
  auto landed = [upto](Readback& r) {
    if (r.op > upto) return false;
    std::memcpy(r.dst, r.bytes.data(), r.bytes.size());
    return true;
  };
  g_readbacks.erase(std::remove_if(g_readbacks.begin(), g_readbacks.end(), landed), g_readbacks.end());
}
void queued_fill(const void* p, size_t bytes) {
  std::lock_guard<std::mutex> lock(g_beside_mutex);
  g_fills.push_back({static_cast<const char*>(p), bytes, ++g_legacy_ops});
}

}  // namespace

cudaError_t cudaDeviceSynchronize() {
  settle(every(), 0, true);
  legacy_done(UINT64_MAX);
  gmlp::emu::g_skipped.waited();
  return cudaSuccess;
}

cudaError_t cudaStreamCreateWithFlags(cudaStream_t* stream, unsigned flags) {
  *stream = new CUstream_st;  // never destroyed: the emulator's streams live as long as the process
  (*stream)->beside = (flags & cudaStreamNonBlocking) != 0;
  return cudaSuccess;
}
cudaError_t cudaStreamSynchronize(cudaStream_t stream) {
  if (is_legacy(stream)) {  // its own work, not a non-blocking stream's
    legacy_done(UINT64_MAX);
    gmlp::emu::g_skipped.waited();
    return cudaSuccess;
  }
  settle([stream](const Beside& c) { return c.stream == stream; }, 0, true);
  return cudaSuccess;
}
cudaError_t cudaEventCreateWithFlags(cudaEvent_t* event, unsigned) {
  *event = new CUevent_st;
  return cudaSuccess;
}
cudaError_t cudaEventCreate(cudaEvent_t* event) { return cudaEventCreateWithFlags(event, 0); }
cudaError_t cudaEventDestroy(cudaEvent_t event) {
  delete event;
  return cudaSuccess;
}
cudaError_t cudaEventRecord(cudaEvent_t event, cudaStream_t stream) {
  if (!event) return record(cudaErrorInvalidValue);
  event->at = std::chrono::steady_clock::now();
  event->recorded = true;
  event->stream = is_legacy(stream) ? nullptr : stream;
  event->work_behind = gmlp::emu::g_skipped.queued_so_far();
  std::lock_guard<std::mutex> lock(g_beside_mutex);
  event->behind = event->stream ? stream->queued : g_legacy_ops;
  return cudaSuccess;
}
cudaError_t cudaProfilerStart() { return cudaSuccess; }
cudaError_t cudaProfilerStop() { return cudaSuccess; }
cudaError_t cudaEventSynchronize(cudaEvent_t event) {
  if (!event) return record(cudaErrorInvalidValue);
  if (event->stream) {
    settle(up_to(event), 0, true);  // a stream of its own: the legacy stream's work may still be running
  } else {
    legacy_done(event->behind);
    gmlp::emu::g_skipped.waited(event->work_behind);
  }
  return cudaSuccess;
}
cudaError_t cudaEventElapsedTime(float* ms, cudaEvent_t start, cudaEvent_t end) {
  if (!ms || !start || !end || !start->recorded || !end->recorded) return record(cudaErrorInvalidValue);
  *ms = std::chrono::duration<float, std::milli>(end->at - start->at).count();
  return cudaSuccess;
}
cudaError_t cudaStreamWaitEvent(cudaStream_t stream, cudaEvent_t event, unsigned) {
  if (!event) return record(cudaErrorInvalidValue);
  if (event->stream) {  // whatever waits for the uploads before it runs after them
    uint64_t at = 0;
    if (is_legacy(stream)) {
      std::lock_guard<std::mutex> lock(g_beside_mutex);
      at = ++g_legacy_ops;
    }
    settle(up_to(event), at, false);
  } else if (!is_legacy(stream)) {  // a non-blocking stream's later copies come after the legacy ops before it
    stream->after_legacy = std::max(stream->after_legacy, event->behind);
  }
  return cudaSuccess;
}

cudaError_t cudaMallocHost(void** p, size_t bytes) {
  *p = nullptr;
  if (bytes == 0) return cudaSuccess;
  void* q = nullptr;
  if (posix_memalign(&q, 4096, bytes) != 0 || !q) return record(cudaErrorMemoryAllocation);
  std::memset(q, 0xFF, bytes);  // as garbage as fresh device memory
  std::lock_guard<std::mutex> lock(g_beside_mutex);
  g_pinned[static_cast<const char*>(q)] = bytes;
  *p = q;
  return cudaSuccess;
}

cudaError_t cudaFreeHost(void* p) {
  if (!p) return cudaSuccess;
  std::lock_guard<std::mutex> lock(g_beside_mutex);
  auto it = g_pinned.find(static_cast<const char*>(p));
  if (it == g_pinned.end()) return record(cudaErrorInvalidValue);
  const char *lo = it->first, *hi = it->first + it->second;
  for (const Beside& c : g_beside)
    if (static_cast<const char*>(c.src) < hi && static_cast<const char*>(c.src) + c.bytes > lo)
      gmlp::emu::die("cudaFreeHost of page-locked memory that a queued upload still reads");
  for (const Readback& r : g_readbacks)
    if (static_cast<const char*>(r.dst) < hi && static_cast<const char*>(r.dst) + r.bytes.size() > lo)
      gmlp::emu::die("cudaFreeHost of page-locked memory that a queued read-back has yet to write");
  g_pinned.erase(it);
  std::free(p);
  return cudaSuccess;
}

namespace {
// Whether [p, p + bytes) lies in one cudaMallocHost allocation. With g_beside_mutex held.
bool pinned(const void* p, size_t bytes) {
  const char* s = static_cast<const char*>(p);
  auto pin = g_pinned.upper_bound(s);
  return pin != g_pinned.begin() && (--pin, s + bytes <= pin->first + pin->second);
}
}  // namespace

cudaError_t cudaMemcpyAsync(void* dst, const void* src, size_t bytes, cudaMemcpyKind kind, cudaStream_t stream) {
  if (bytes == 0) return cudaSuccess;
  if (kind == cudaMemcpyDeviceToHost) {  // the read-backs the backend queues: in line, into page-locked memory
    if (!gmlp::emu::on_device(src, bytes) || gmlp::emu::on_device(dst, bytes) || !is_legacy(stream))
      return record(cudaErrorInvalidValue);
    gmlp::emu::g_skipped.work();
    std::lock_guard<std::mutex> lock(g_beside_mutex);
    if (!pinned(dst, bytes))
      gmlp::emu::die(
          "an asynchronous read-back into memory that cudaMallocHost did not give: from pageable memory a GPU "
          "copies in line with the host, which waits (Backend::alloc_host)");
    const auto* from = static_cast<const unsigned char*>(src);
    g_readbacks.push_back({dst, std::vector<unsigned char>(from, from + bytes), ++g_legacy_ops});
    return cudaSuccess;
  }
  // The uploads the backend makes: host to device.
  if (kind != cudaMemcpyHostToDevice || !gmlp::emu::on_device(dst, bytes) || gmlp::emu::on_device(src, bytes))
    return record(cudaErrorInvalidValue);
  gmlp::emu::g_skipped.work(is_legacy(stream));
  std::lock_guard<std::mutex> lock(g_beside_mutex);
  // gmlp's asynchronous uploads are from page-locked memory (Backend::upload_beside,
  // upload_queued): from pageable memory a GPU copies in line with the host, which
  // waits, and the overlap is lost.
  if (!pinned(src, bytes))
    gmlp::emu::die(
        "an asynchronous upload from memory that cudaMallocHost did not give: gmlp uploads asynchronously "
        "from page-locked memory only (Backend::alloc_host)");
  if (is_legacy(stream)) {
    // In line with the launches, which run as they come here: copied now, and its
    // source checked until the host waits for the legacy stream past it (a GPU copies
    // when its queue gets there, maybe after the host wrote the source again). Host
    // only: the copy engine's work, skipped (its source's hash would be the host's time).
    if (gmlp::emu::host_only()) return cudaSuccess;
    std::memmove(dst, src, bytes);
    Beside c{dst, src, bytes, hash_bytes(src, bytes), nullptr, 0};
    c.copied = true;
    c.legacy_at = ++g_legacy_ops;
    g_beside.push_back(c);
    return cudaSuccess;
  }
  const char* d = static_cast<const char*>(dst);
  for (const Fill& f : g_fills)
    if (f.op > stream->after_legacy && d < f.p + f.bytes && f.p < d + bytes)
      gmlp::emu::die(
          "an asynchronous upload into device memory that a fill queued before it on the legacy stream, "
          "not yet waited for, also writes: on a GPU the fill may land after the upload (Backend::alloc "
          "zeroes on the legacy stream: wait for the device after allocating)");
  if (gmlp::emu::host_only()) {  // from page-locked memory the copy engine does it all
    ++gmlp::emu::g_skipped.beside;
    return cudaSuccess;
  }
  g_beside.push_back({dst, src, bytes, hash_bytes(src, bytes), stream, ++stream->queued});
  return cudaSuccess;
}

cudaError_t cudaGetLastError() {
  const cudaError_t e = gmlp::emu::g_last_error;
  gmlp::emu::g_last_error = cudaSuccess;
  return e;
}

const char* cudaGetErrorString(cudaError_t e) {
  switch (e) {
    case cudaSuccess: return "no error";
    case cudaErrorInvalidValue: return "invalid argument";
    case cudaErrorMemoryAllocation: return "out of memory";
    case cudaErrorInvalidConfiguration: return "invalid configuration argument";
    case cudaErrorInsufficientDriver: return "CUDA driver version is insufficient for CUDA runtime version";
    case cudaErrorNoDevice: return "no CUDA-capable device is detected";
    default: return "unspecified launch failure";
  }
}

// ---- cuBLAS
struct cublasContext {};

namespace {

cublasContext g_blas;

// Rounded to bf16 (nearest, ties to even), as the tensor cores take fp32 inputs under
// CUBLAS_COMPUTE_32F_FAST_16BF.
float to_bf16(float x) {
  uint32_t u;
  std::memcpy(&u, &x, 4);
  if ((u & 0x7f800000u) != 0x7f800000u)
    u += 0x7fffu + ((u >> 16) & 1u);
  else if (u & 0x007fffffu)
    u |= 0x00400000u;  // a NaN stays a NaN (quiet), whichever mantissa bits were set
  u &= 0xffff0000u;
  std::memcpy(&x, &u, 4);
  return x;
}

// A matrix entry as a float: floats as they are, bf16 bit patterns (CUDA_R_16BF) widened.
float value(float x) { return x; }
float value(uint16_t h) {
  const uint32_t u = uint32_t(h) << 16;
  float x;
  std::memcpy(&x, &u, 4);
  return x;
}

// op(X)(i, l) of a column-major X with leading dimension ld.
template <typename T>
float op_at(const T* X, int ld, cublasOperation_t op, int i, int l) {
  return value(op == CUBLAS_OP_N ? X[i + size_t(l) * ld] : X[l + size_t(i) * ld]);
}

template <typename T>
bool device_matrix(const T* X, int ld, int rows, int cols) {
  return rows == 0 || cols == 0 || gmlp::emu::on_device(X, (size_t(cols - 1) * ld + rows) * sizeof(T));
}

// A result stored in C's type: a float, or its bf16 rounding (to nearest) as bits.
void store(float* c, float v) { *c = v; }
void store(uint16_t* c, float v) {
  const float r = to_bf16(v);
  uint32_t u;
  std::memcpy(&u, &r, 4);
  *c = uint16_t(u >> 16);
}

// T: the inputs' type (float, or uint16_t for CUDA_R_16BF); bf16: round float inputs.
// TC: the output's, float or (bf16 inputs) uint16_t.
template <typename T, typename TC>
cublasStatus_t gemm(cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k, float alpha, const T* A,
                    int lda, const T* B, int ldb, float beta, TC* C, int ldc, bool bf16) {
  if (m < 0 || n < 0 || k < 0 || ta == CUBLAS_OP_C || tb == CUBLAS_OP_C) return CUBLAS_STATUS_INVALID_VALUE;
  const int a_rows = ta == CUBLAS_OP_N ? m : k, a_cols = ta == CUBLAS_OP_N ? k : m;
  const int b_rows = tb == CUBLAS_OP_N ? k : n, b_cols = tb == CUBLAS_OP_N ? n : k;
  if (lda < std::max(1, a_rows) || ldb < std::max(1, b_rows) || ldc < std::max(1, m))
    return CUBLAS_STATUS_INVALID_VALUE;
  if (!device_matrix(A, lda, a_rows, a_cols) || !device_matrix(B, ldb, b_rows, b_cols) ||
      !device_matrix(C, ldc, m, n))
    gmlp::emu::fail("a cuBLAS product given memory that is not the device's, or past the end of an allocation");
  if (gmlp::emu::host_only()) {
    gmlp::emu::g_skipped.skip_product();
    return CUBLAS_STATUS_SUCCESS;
  }
  for (int j = 0; j < n; ++j)
    for (int i = 0; i < m; ++i) {
      float acc = 0.f;  // fp32 accumulation, as cuBLAS's
      for (int l = 0; l < k; ++l) {
        float a = op_at(A, lda, ta, i, l), b = op_at(B, ldb, tb, l, j);
        if (bf16) a = to_bf16(a), b = to_bf16(b);
        acc += a * b;
      }
      TC* c = C + i + size_t(j) * ldc;
      store(c, alpha * acc + (beta == 0.f ? 0.f : beta * value(*c)));  // beta 0: C is not read
    }
  return CUBLAS_STATUS_SUCCESS;
}

// count products of gemm's, each operand its stride after the last. cuBLAS leaves the
// result undefined where outputs overlap: a stride of C that makes two the same is an
// error here.
template <typename T, typename TC>
cublasStatus_t gemm_batched(cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k, float alpha,
                            const T* A, int lda, long long sa, const T* B, int ldb, long long sb, float beta,
                            TC* C, int ldc, long long sc, int count, bool bf16) {
  if (count < 0) return CUBLAS_STATUS_INVALID_VALUE;
  if (count > 1 && sc == 0 && m > 0 && n > 0)
    gmlp::emu::fail("a batched cuBLAS product whose outputs are all the same matrix (strideC 0)");
  for (int i = 0; i < count; ++i)
    if (const cublasStatus_t s = gemm(ta, tb, m, n, k, alpha, A + i * sa, lda, B + i * sb, ldb, beta, C + i * sc, ldc,
                                      bf16);
        s != CUBLAS_STATUS_SUCCESS)
      return s;
  return CUBLAS_STATUS_SUCCESS;
}

}  // namespace

cublasStatus_t cublasCreate(cublasHandle_t* handle) {
  *handle = &g_blas;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasSetMathMode(cublasHandle_t handle, cublasMath_t) {
  return handle ? CUBLAS_STATUS_SUCCESS : CUBLAS_STATUS_NOT_INITIALIZED;
}

// The single products are batches of one.
cublasStatus_t cublasSgemm(cublasHandle_t handle, cublasOperation_t transa, cublasOperation_t transb, int m, int n,
                           int k, const float* alpha, const float* A, int lda, const float* B, int ldb,
                           const float* beta, float* C, int ldc) {
  return cublasSgemmStridedBatched(handle, transa, transb, m, n, k, alpha, A, lda, 0, B, ldb, 0, beta, C, ldc, 0, 1);
}

cublasStatus_t cublasGemmEx(cublasHandle_t handle, cublasOperation_t transa, cublasOperation_t transb, int m, int n,
                            int k, const void* alpha, const void* A, cudaDataType Atype, int lda, const void* B,
                            cudaDataType Btype, int ldb, const void* beta, void* C, cudaDataType Ctype, int ldc,
                            cublasComputeType_t computeType, cublasGemmAlgo_t algo) {
  return cublasGemmStridedBatchedEx(handle, transa, transb, m, n, k, alpha, A, Atype, lda, 0, B, Btype, ldb, 0, beta, C,
                                    Ctype, ldc, 0, 1, computeType, algo);
}

cublasStatus_t cublasSgemmStridedBatched(cublasHandle_t handle, cublasOperation_t transa, cublasOperation_t transb,
                                         int m, int n, int k, const float* alpha, const float* A, int lda,
                                         long long strideA, const float* B, int ldb, long long strideB,
                                         const float* beta, float* C, int ldc, long long strideC, int batchCount) {
  if (!handle) return CUBLAS_STATUS_NOT_INITIALIZED;
  return gemm_batched(transa, transb, m, n, k, *alpha, A, lda, strideA, B, ldb, strideB, *beta, C, ldc, strideC,
                      batchCount, false);
}

cublasStatus_t cublasGemmStridedBatchedEx(cublasHandle_t handle, cublasOperation_t transa, cublasOperation_t transb,
                                          int m, int n, int k, const void* alpha, const void* A, cudaDataType Atype,
                                          int lda, long long strideA, const void* B, cudaDataType Btype, int ldb,
                                          long long strideB, const void* beta, void* C, cudaDataType Ctype, int ldc,
                                          long long strideC, int batchCount, cublasComputeType_t computeType,
                                          cublasGemmAlgo_t) {
  if (!handle) return CUBLAS_STATUS_NOT_INITIALIZED;
  if (Atype != Btype) return CUBLAS_STATUS_NOT_SUPPORTED;
  if (Atype == CUDA_R_16BF) {  // bf16 inputs, float or bf16 output: fp32 compute only
    if (computeType != CUBLAS_COMPUTE_32F) return CUBLAS_STATUS_NOT_SUPPORTED;
    const float a = *static_cast<const float*>(alpha), b = *static_cast<const float*>(beta);
    const auto* A16 = static_cast<const uint16_t*>(A);
    const auto* B16 = static_cast<const uint16_t*>(B);
    if (Ctype == CUDA_R_16BF)
      return gemm_batched(transa, transb, m, n, k, a, A16, lda, strideA, B16, ldb, strideB, b,
                          static_cast<uint16_t*>(C), ldc, strideC, batchCount, false);
    if (Ctype != CUDA_R_32F) return CUBLAS_STATUS_NOT_SUPPORTED;
    return gemm_batched(transa, transb, m, n, k, a, A16, lda, strideA, B16, ldb, strideB, b, static_cast<float*>(C),
                        ldc, strideC, batchCount, false);
  }
  if (Atype != CUDA_R_32F || Ctype != CUDA_R_32F) return CUBLAS_STATUS_NOT_SUPPORTED;
  if (computeType != CUBLAS_COMPUTE_32F && computeType != CUBLAS_COMPUTE_32F_FAST_16BF)
    return CUBLAS_STATUS_NOT_SUPPORTED;
  return gemm_batched(transa, transb, m, n, k, *static_cast<const float*>(alpha), static_cast<const float*>(A), lda,
                      strideA, static_cast<const float*>(B), ldb, strideB, *static_cast<const float*>(beta),
                      static_cast<float*>(C), ldc, strideC, batchCount, computeType == CUBLAS_COMPUTE_32F_FAST_16BF);
}

// ---- cuBLASLt: D = alpha op(A) op(B) + beta C (+ bias[i] for row i of D under
// CUBLASLT_EPILOGUE_BIAS), column-major, fp32 accumulation; A and B floats or bf16
// bits, C and D floats with the same shape (they may be apart). One heuristic result.
struct cublasLtContext {};
struct cublasLtMatmulDescOpaque {
  cublasOperation_t ta = CUBLAS_OP_N, tb = CUBLAS_OP_N;
  cublasLtEpilogue_t epilogue = CUBLASLT_EPILOGUE_DEFAULT;
  const float* bias = nullptr;
};
struct cublasLtMatrixLayoutOpaque {
  cudaDataType type;
  uint64_t rows, cols;
  int64_t ld;
};
struct cublasLtMatmulPreferenceOpaque {
  size_t workspace = 0;
};

namespace {
cublasLtContext g_lt;

// The product's m x n x k from the layouts, or false where they disagree or cuBLASLt
// would refuse them (here: C and D other than floats of one shape, A and B of two types).
bool lt_shape(const cublasLtMatmulDescOpaque& d, const cublasLtMatrixLayoutOpaque& a,
              const cublasLtMatrixLayoutOpaque& b, const cublasLtMatrixLayoutOpaque& c,
              const cublasLtMatrixLayoutOpaque& o, int* m, int* n, int* k) {
  *m = int(d.ta == CUBLAS_OP_N ? a.rows : a.cols);
  *k = int(d.ta == CUBLAS_OP_N ? a.cols : a.rows);
  *n = int(d.tb == CUBLAS_OP_N ? b.cols : b.rows);
  const uint64_t bk = d.tb == CUBLAS_OP_N ? b.rows : b.cols;
  return a.type == b.type && (a.type == CUDA_R_32F || a.type == CUDA_R_16BF) && c.type == CUDA_R_32F &&
         o.type == CUDA_R_32F && c.rows == o.rows && c.cols == o.cols && c.ld == o.ld && bk == uint64_t(*k) &&
         o.rows == uint64_t(*m) && o.cols == uint64_t(*n) && a.ld >= int64_t(a.rows) && b.ld >= int64_t(b.rows) &&
         o.ld >= int64_t(o.rows);
}

template <typename T>
void lt_product(const cublasLtMatmulDescOpaque& d, int m, int n, int k, float alpha, const T* A, int lda, const T* B,
                int ldb, float beta, const float* C, float* D, int ldc) {
  const int a_rows = d.ta == CUBLAS_OP_N ? m : k, a_cols = d.ta == CUBLAS_OP_N ? k : m;
  const int b_rows = d.tb == CUBLAS_OP_N ? k : n, b_cols = d.tb == CUBLAS_OP_N ? n : k;
  if (!device_matrix(A, lda, a_rows, a_cols) || !device_matrix(B, ldb, b_rows, b_cols) ||
      (beta != 0.f && !device_matrix(C, ldc, m, n)) || !device_matrix(D, ldc, m, n) ||
      (d.epilogue == CUBLASLT_EPILOGUE_BIAS && !gmlp::emu::on_device(d.bias, sizeof(float) * size_t(m))))
    gmlp::emu::fail("a cuBLASLt product given memory that is not the device's, or past the end of an allocation");
  if (gmlp::emu::host_only()) {
    gmlp::emu::g_skipped.skip_product();
    return;
  }
  for (int j = 0; j < n; ++j)
    for (int i = 0; i < m; ++i) {
      float acc = 0.f;
      for (int l = 0; l < k; ++l) acc += op_at(A, lda, d.ta, i, l) * op_at(B, ldb, d.tb, l, j);
      const size_t at = i + size_t(j) * ldc;
      float v = alpha * acc + (beta == 0.f ? 0.f : beta * C[at]);  // beta 0: C is not read
      if (d.epilogue == CUBLASLT_EPILOGUE_BIAS) v += d.bias[i];
      D[at] = v;
    }
}
}  // namespace

cublasStatus_t cublasLtCreate(cublasLtHandle_t* handle) {
  *handle = &g_lt;
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtMatmulDescCreate(cublasLtMatmulDesc_t* desc, cublasComputeType_t compute, cudaDataType_t scale) {
  if (compute != CUBLAS_COMPUTE_32F || scale != CUDA_R_32F) return CUBLAS_STATUS_NOT_SUPPORTED;
  *desc = new cublasLtMatmulDescOpaque;
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtMatmulDescDestroy(cublasLtMatmulDesc_t desc) {
  delete desc;
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtMatmulDescSetAttribute(cublasLtMatmulDesc_t desc, cublasLtMatmulDescAttributes_t attr,
                                              const void* buf, size_t size) {
  switch (attr) {
    case CUBLASLT_MATMUL_DESC_TRANSA:
    case CUBLASLT_MATMUL_DESC_TRANSB: {
      int32_t op;  // cuBLASLt's attribute is an int32_t
      if (size != sizeof(op)) return CUBLAS_STATUS_INVALID_VALUE;
      std::memcpy(&op, buf, sizeof(op));
      (attr == CUBLASLT_MATMUL_DESC_TRANSA ? desc->ta : desc->tb) = cublasOperation_t(op);
      return CUBLAS_STATUS_SUCCESS;
    }
    case CUBLASLT_MATMUL_DESC_EPILOGUE: {
      uint32_t e;
      if (size != sizeof(e)) return CUBLAS_STATUS_INVALID_VALUE;
      std::memcpy(&e, buf, sizeof(e));
      if (e != CUBLASLT_EPILOGUE_DEFAULT && e != CUBLASLT_EPILOGUE_BIAS) return CUBLAS_STATUS_NOT_SUPPORTED;
      desc->epilogue = cublasLtEpilogue_t(e);
      return CUBLAS_STATUS_SUCCESS;
    }
    case CUBLASLT_MATMUL_DESC_BIAS_POINTER:
      if (size != sizeof(desc->bias)) return CUBLAS_STATUS_INVALID_VALUE;
      std::memcpy(&desc->bias, buf, sizeof(desc->bias));
      return CUBLAS_STATUS_SUCCESS;
  }
  return CUBLAS_STATUS_INVALID_VALUE;
}
cublasStatus_t cublasLtMatrixLayoutCreate(cublasLtMatrixLayout_t* layout, cudaDataType type, uint64_t rows,
                                          uint64_t cols, int64_t ld) {
  *layout = new cublasLtMatrixLayoutOpaque{type, rows, cols, ld};
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtMatrixLayoutDestroy(cublasLtMatrixLayout_t layout) {
  delete layout;
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtMatmulPreferenceCreate(cublasLtMatmulPreference_t* pref) {
  *pref = new cublasLtMatmulPreferenceOpaque;
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtMatmulPreferenceDestroy(cublasLtMatmulPreference_t pref) {
  delete pref;
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtMatmulPreferenceSetAttribute(cublasLtMatmulPreference_t pref,
                                                    cublasLtMatmulPreferenceAttributes_t attr, const void* buf,
                                                    size_t size) {
  if (attr != CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES || size != sizeof(uint64_t)) return CUBLAS_STATUS_INVALID_VALUE;
  uint64_t w;
  std::memcpy(&w, buf, sizeof(w));
  pref->workspace = size_t(w);
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtMatmulAlgoGetHeuristic(cublasLtHandle_t handle, cublasLtMatmulDesc_t desc,
                                              cublasLtMatrixLayout_t Adesc, cublasLtMatrixLayout_t Bdesc,
                                              cublasLtMatrixLayout_t Cdesc, cublasLtMatrixLayout_t Ddesc,
                                              cublasLtMatmulPreference_t, int requested,
                                              cublasLtMatmulHeuristicResult_t results[], int* returned) {
  if (!handle) return CUBLAS_STATUS_NOT_INITIALIZED;
  if (requested <= 0) return CUBLAS_STATUS_INVALID_VALUE;
  int m, n, k;
  *returned = 0;
  if (!lt_shape(*desc, *Adesc, *Bdesc, *Cdesc, *Ddesc, &m, &n, &k)) return CUBLAS_STATUS_NOT_SUPPORTED;
  results[0] = {};
  results[0].state = CUBLAS_STATUS_SUCCESS;
  results[0].wavesCount = 1.f;
  *returned = 1;
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtMatmul(cublasLtHandle_t handle, cublasLtMatmulDesc_t desc, const void* alpha, const void* A,
                              cublasLtMatrixLayout_t Adesc, const void* B, cublasLtMatrixLayout_t Bdesc,
                              const void* beta, const void* C, cublasLtMatrixLayout_t Cdesc, void* D,
                              cublasLtMatrixLayout_t Ddesc, const cublasLtMatmulAlgo_t*, void*, size_t,
                              cudaStream_t) {
  if (!handle) return CUBLAS_STATUS_NOT_INITIALIZED;
  int m, n, k;
  if (!lt_shape(*desc, *Adesc, *Bdesc, *Cdesc, *Ddesc, &m, &n, &k)) return CUBLAS_STATUS_NOT_SUPPORTED;
  const float a = *static_cast<const float*>(alpha), b = *static_cast<const float*>(beta);
  const int lda = int(Adesc->ld), ldb = int(Bdesc->ld), ldc = int(Ddesc->ld);
  if (Adesc->type == CUDA_R_16BF)
    lt_product(*desc, m, n, k, a, static_cast<const uint16_t*>(A), lda, static_cast<const uint16_t*>(B), ldb, b,
               static_cast<const float*>(C), static_cast<float*>(D), ldc);
  else
    lt_product(*desc, m, n, k, a, static_cast<const float*>(A), lda, static_cast<const float*>(B), ldb, b,
               static_cast<const float*>(C), static_cast<float*>(D), ldc);
  return CUBLAS_STATUS_SUCCESS;
}
