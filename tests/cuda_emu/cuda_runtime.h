#pragma once
// The CUDA emulator's stand-in for <cuda_runtime.h> (tests/cuda_emu/README.md): the
// subset of the CUDA runtime and device language that src/ops/cuda uses, so that g++
// compiles those sources unchanged and the CUDA tests run their kernels on the CPU.
// Kernels run one block at a time, each thread a fiber, switched at __syncthreads and
// at warp shuffles, so a kernel's logic (indices, bounds, reductions, barriers) is
// exercised; its speed, memory coalescing and real concurrency are not.
#include <atomic>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <functional>

#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __shared__ static  // one block runs at a time: a static is that block's

struct dim3 {
  unsigned x, y, z;
  constexpr dim3(unsigned x_ = 1, unsigned y_ = 1, unsigned z_ = 1) : x(x_), y(y_), z(z_) {}
};

struct float2 {  // CUDA's vector type, as far as the kernels use it (two sums at once)
  float x, y;
};
struct float3 {  // and three values a slot (a LayerNorm row's x, h and keep)
  float x, y, z;
};

enum cudaError_t {
  cudaSuccess = 0,
  cudaErrorInvalidValue = 1,
  cudaErrorMemoryAllocation = 2,
  cudaErrorInvalidConfiguration = 9,
  cudaErrorInsufficientDriver = 35,
  cudaErrorNoDevice = 100,
  cudaErrorLaunchFailure = 719,
};
using cudaError = cudaError_t;
enum cudaMemcpyKind {
  cudaMemcpyHostToHost = 0,
  cudaMemcpyHostToDevice = 1,
  cudaMemcpyDeviceToHost = 2,
  cudaMemcpyDeviceToDevice = 3,
  cudaMemcpyDefault = 4
};
using cudaStream_t = struct CUstream_st*;
using cudaEvent_t = struct CUevent_st*;
#define cudaStreamLegacy ((cudaStream_t)0x1)
#define cudaStreamNonBlocking 0x01
#define cudaEventDisableTiming 0x02

struct cudaDeviceProp {
  char name[256];
  int major, minor, multiProcessorCount;
  size_t totalGlobalMem;
};

cudaError_t cudaGetDeviceCount(int* count);
cudaError_t cudaGetDevice(int* device);
cudaError_t cudaGetDeviceProperties(cudaDeviceProp* prop, int device);
cudaError_t cudaSetDevice(int device);
cudaError_t cudaMalloc(void** p, size_t bytes);
template <typename T>
cudaError_t cudaMalloc(T** p, size_t bytes) {
  return cudaMalloc(reinterpret_cast<void**>(p), bytes);
}
cudaError_t cudaFree(void* p);
cudaError_t cudaMemcpy(void* dst, const void* src, size_t bytes, cudaMemcpyKind kind);
cudaError_t cudaMemset(void* p, int value, size_t bytes);
cudaError_t cudaDeviceSynchronize();
// Streams and events (NCCL's reduction stream, src/ops/cuda/nccl.cpp; the backend's
// uploads beside the device's work): launches, products and synchronous copies run to
// completion when they are made, in issue order; an asynchronous upload on a
// non-blocking stream waits, uncopied, for the first wait for it (emulator.cpp says why).
cudaError_t cudaStreamCreateWithFlags(cudaStream_t* stream, unsigned flags);
cudaError_t cudaStreamSynchronize(cudaStream_t stream);
cudaError_t cudaEventCreateWithFlags(cudaEvent_t* event, unsigned flags);
// Page-locked host memory, and uploads from it that return before they copy.
cudaError_t cudaMallocHost(void** p, size_t bytes);
cudaError_t cudaFreeHost(void* p);
cudaError_t cudaMemcpyAsync(void* dst, const void* src, size_t bytes, cudaMemcpyKind kind, cudaStream_t stream);
cudaError_t cudaEventRecord(cudaEvent_t event, cudaStream_t stream);
// Timing events (src/ops/cuda/op_profile.cpp): the host time of each record.
cudaError_t cudaEventCreate(cudaEvent_t* event);
cudaError_t cudaEventDestroy(cudaEvent_t event);
cudaError_t cudaEventSynchronize(cudaEvent_t event);
cudaError_t cudaEventElapsedTime(float* ms, cudaEvent_t start, cudaEvent_t end);
cudaError_t cudaStreamWaitEvent(cudaStream_t stream, cudaEvent_t event, unsigned flags);
cudaError_t cudaGetLastError();
const char* cudaGetErrorString(cudaError_t e);

namespace gmlp::emu {

// The running thread's coordinates (set by the scheduler at every switch; launches run
// one at a time, so these are plain globals: thread_local ones cost a call per read in a
// shared library).
extern dim3 thread_idx, block_idx, block_dim, grid_dim;

// Runs body once per thread of every block; a launch's configuration errors become the
// runtime's last error, as on a GPU. `plain` is per launch site: set once a launch of it
// ran without any barrier, after which its threads run as plain calls (much faster); a
// barrier reached in plain mode is an error naming the site.
struct Site {
  const char* name;
  bool plain = false;
  std::atomic<uint64_t> skipped{0};  // launches the host-only mode skipped (its count by kernel)
};
void run_grid(Site& site, dim3 grid, dim3 block, const std::function<void()>& body);

template <typename F>
struct Launch {
  Site* site;
  dim3 grid, block;
  F f;
  template <typename... A>
  void operator()(A... a) const {
    run_grid(*site, grid, block, [&] { f(a...); });
  }
};

void syncthreads();
void warp_exchange(const void* mine, void* partner, size_t bytes, int lane_mask);
void fail(const char* what);  // a kernel broke a rule of the device language: ends the process
bool on_device(const void* p, size_t bytes);  // [p, p + bytes) lies in one device allocation

}  // namespace gmlp::emu

#define threadIdx (::gmlp::emu::thread_idx)
#define blockIdx (::gmlp::emu::block_idx)
#define blockDim (::gmlp::emu::block_dim)
#define gridDim (::gmlp::emu::grid_dim)

// The CUDA sources launch through GMLP_LAUNCH (ops/cuda/common.cuh), which is
// kernel<<<grid, block>>> under nvcc and this here.
#define GMLP_EMU_LAUNCH(kernel, grid, block)                                                                         \
  [&] {                                                                                                               \
    static ::gmlp::emu::Site site{#kernel};                                                                          \
    auto call = [](auto... a) { kernel(a...); };                                                                      \
    return ::gmlp::emu::Launch<decltype(call)>{&site, dim3(grid), dim3(block), call};                               \
  }()

inline void __syncthreads() { ::gmlp::emu::syncthreads(); }

template <typename T>
T __shfl_xor_sync(unsigned /*mask: every lane, as the sources use it*/, T v, int lane_mask) {
  T partner;
  ::gmlp::emu::warp_exchange(&v, &partner, sizeof(T), lane_mask);
  return partner;
}

// One block runs at a time, on one host thread: an atomic add is an add.
inline float atomicAdd(float* p, float v) {
  const float old = *p;
  *p = old + v;
  return old;
}
inline double atomicAdd(double* p, double v) {
  const double old = *p;
  *p = old + v;
  return old;
}
inline unsigned atomicAdd(unsigned* p, unsigned v) {
  const unsigned old = *p;
  *p = old + v;
  return old;
}
// One block at a time: every write is seen by the blocks after it, fenced or not, and
// there is no L1 cache to read past.
inline void __threadfence() {}
inline float __ldcg(const float* p) { return *p; }
inline double __ldcg(const double* p) { return *p; }
inline float rsqrtf(float x) { return 1.f / std::sqrt(x); }
// A product rounded on its own (never fused into a sum): a call g++ may not inline, so
// may not fuse.
__attribute__((noinline)) inline float __fmul_rn(float a, float b) { return a * b; }
// The special function unit's approximations, exact here: the emulator checks a kernel's
// logic, and its GELU against the CPU's within the tests' tolerances.
// Macros, not functions of those names: glibc's math.h declares its own __expf.
inline float gmlp_emu_expf(float x) { return std::exp(x); }
inline float gmlp_emu_fdividef(float a, float b) { return a / b; }
#define __expf(x) gmlp_emu_expf(x)
#define __fdividef(a, b) gmlp_emu_fdividef(a, b)
// CUDA's device min and max of two ints (the sources take no other kind).
inline int min(int a, int b) { return a < b ? a : b; }
inline int max(int a, int b) { return a > b ? a : b; }
