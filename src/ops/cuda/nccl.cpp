// Gradient sums across the GPUs of a job over NCCL (docs/distributed.md), for the
// CUDA module. NCCL is opened with dlopen when a multi-process GPU run first asks for
// it, not linked: the library is over 200 MB, single-GPU runs never need it, and a
// machine whose CUDA lacks it can still run everything else on its GPU.
//
// Reductions run on a stream of their own, so that a bucket's all-reduce overlaps the
// backward of the layers before it: each waits for the work issued on the default
// stream when it is started, and wait_all() makes later work on the default stream
// wait for all of them.
#include <cuda_runtime_api.h>
#include <dlfcn.h>

#include <cstring>
#include <string>

#include "backend/backend.h"
#include "gmlp/comm.h"
#include "gmlp/error.h"
#include "ops/cuda/cuda_ops.h"

#if __has_include(<nccl.h>)
#include <nccl.h>
#define GMLP_NCCL_HEADERS 1
#endif

namespace gmlp {
namespace {

#ifdef GMLP_NCCL_HEADERS
struct Nccl {
  decltype(&::ncclGetVersion) get_version = nullptr;
  decltype(&::ncclGetUniqueId) get_unique_id = nullptr;
  decltype(&::ncclCommInitRank) comm_init_rank = nullptr;
  decltype(&::ncclAllReduce) all_reduce = nullptr;
  decltype(&::ncclBroadcast) broadcast = nullptr;
  decltype(&::ncclGroupStart) group_start = nullptr;
  decltype(&::ncclGroupEnd) group_end = nullptr;
  decltype(&::ncclCommAbort) comm_abort = nullptr;
  decltype(&::ncclGetErrorString) error_string = nullptr;
  std::string error;  // why it could not be opened
};

const Nccl& nccl() {
  static const Nccl lib = [] {
    Nccl n;
#ifdef GMLP_CUDA_EMULATED
    // The CUDA emulator's stand-in is part of this module (tests/cuda_emu/nccl_emulator.cpp).
    n.get_version = &::ncclGetVersion;
    n.get_unique_id = &::ncclGetUniqueId;
    n.comm_init_rank = &::ncclCommInitRank;
    n.all_reduce = &::ncclAllReduce;
    n.broadcast = &::ncclBroadcast;
    n.group_start = &::ncclGroupStart;
    n.group_end = &::ncclGroupEnd;
    n.comm_abort = &::ncclCommAbort;
    n.error_string = &::ncclGetErrorString;
#else
    void* h = dlopen("libnccl.so.2", RTLD_NOW | RTLD_LOCAL);
    if (!h) {
      n.error = std::string("cannot open libnccl.so.2 (NCCL; install it or add its directory to LD_LIBRARY_PATH): ") +
                dlerror();
      return n;
    }
    auto sym = [&](const char* name) {
      void* p = dlsym(h, name);
      if (!p && n.error.empty()) n.error = std::string("libnccl.so.2 has no ") + name;
      return p;
    };
    n.get_version = reinterpret_cast<decltype(n.get_version)>(sym("ncclGetVersion"));
    n.get_unique_id = reinterpret_cast<decltype(n.get_unique_id)>(sym("ncclGetUniqueId"));
    n.comm_init_rank = reinterpret_cast<decltype(n.comm_init_rank)>(sym("ncclCommInitRank"));
    n.all_reduce = reinterpret_cast<decltype(n.all_reduce)>(sym("ncclAllReduce"));
    n.broadcast = reinterpret_cast<decltype(n.broadcast)>(sym("ncclBroadcast"));
    n.group_start = reinterpret_cast<decltype(n.group_start)>(sym("ncclGroupStart"));
    n.group_end = reinterpret_cast<decltype(n.group_end)>(sym("ncclGroupEnd"));
    n.comm_abort = reinterpret_cast<decltype(n.comm_abort)>(sym("ncclCommAbort"));
    n.error_string = reinterpret_cast<decltype(n.error_string)>(sym("ncclGetErrorString"));
#endif
    return n;
  }();
  return lib;
}

void check_nccl(ncclResult_t r, const char* what) {
  if (r != ncclSuccess) throw Error(std::string("NCCL: ") + what + ": " + nccl().error_string(r));
}

class NcclReducer final : public DeviceReducer {
 public:
  NcclReducer(const ncclUniqueId& id, int rank, int size) : size_(size) {
    check_nccl(nccl().comm_init_rank(&comm_, size, id, rank), "ncclCommInitRank");
    cuda::check(int(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking)), "cudaStreamCreate");
    cuda::check(int(cudaEventCreateWithFlags(&issued_, cudaEventDisableTiming)), "cudaEventCreate");
    cuda::check(int(cudaEventCreateWithFlags(&reduced_, cudaEventDisableTiming)), "cudaEventCreate");
    int v = 0;
    nccl().get_version(&v);
#ifdef GMLP_CUDA_EMULATED
    version_ = "(the CUDA emulator's stand-in)";
#else
    version_ = std::to_string(v / 10000) + "." + std::to_string(v / 100 % 100) + "." + std::to_string(v % 100);
#endif
  }
  ~NcclReducer() override {
    // Lives until exit; an abort rather than a destroy cannot wait on a peer that is gone.
    if (comm_) nccl().comm_abort(comm_);
  }
  std::string describe() const override {
    return "NCCL " + version_ + ", " + std::to_string(size_) + (size_ == 1 ? " rank" : " ranks");
  }
  void start_allreduce_sum(float* buf, size_t n) override {
    cuda::check(int(cudaEventRecord(issued_, cudaStreamLegacy)), "cudaEventRecord");
    cuda::check(int(cudaStreamWaitEvent(stream_, issued_, 0)), "cudaStreamWaitEvent");
    check_nccl(nccl().all_reduce(buf, buf, n, ncclFloat32, ncclSum, comm_, stream_), "ncclAllReduce");
  }
  void wait_all() override {
    cuda::check(int(cudaEventRecord(reduced_, stream_)), "cudaEventRecord");
    cuda::check(int(cudaStreamWaitEvent(cudaStreamLegacy, reduced_, 0)), "cudaStreamWaitEvent");
  }
  // A broadcast from each rank of its block, grouped: NCCL's all-gather wants blocks of
  // one size, block_of's differ by one where P does not divide n.
  void allgather_blocks(float* buf, size_t n) override {
    cuda::check(int(cudaEventRecord(issued_, cudaStreamLegacy)), "cudaEventRecord");
    cuda::check(int(cudaStreamWaitEvent(stream_, issued_, 0)), "cudaStreamWaitEvent");
    check_nccl(nccl().group_start(), "ncclGroupStart");
    ncclResult_t failed = ncclSuccess;  // the group is closed whatever happens inside it
    for (int r = 0; r < size_ && failed == ncclSuccess; ++r) {
      const Block b = block_of(n, r, size_);
      failed = nccl().broadcast(buf + b.begin, buf + b.begin, b.end - b.begin, ncclFloat32, r, comm_, stream_);
    }
    const ncclResult_t ended = nccl().group_end();
    check_nccl(failed, "ncclBroadcast");
    check_nccl(ended, "ncclGroupEnd");
    wait_all();
  }

 private:
  int size_;
  std::string version_;
  ncclComm_t comm_ = nullptr;
  cudaStream_t stream_ = nullptr;
  cudaEvent_t issued_ = nullptr, reduced_ = nullptr;
};
#endif

void copy_error(const std::string& what, char* err, size_t cap) {
  if (cap == 0) return;
  std::strncpy(err, what.c_str(), cap - 1);
  err[cap - 1] = '\0';
}

}  // namespace
}  // namespace gmlp

// The module's NCCL entry points (src/backend/device.cpp): rank 0 makes the job's
// unique id, the host communicator carries it to every rank, and each opens its
// reducer with it. Both return null and say why in err when NCCL cannot be used.
extern "C" __attribute__((visibility("default"))) size_t gmlp_cuda_nccl_id(unsigned char* out, size_t cap, char* err,
                                                                          size_t err_cap) {
#ifdef GMLP_NCCL_HEADERS
  try {
    const gmlp::Nccl& n = gmlp::nccl();
    if (!n.error.empty()) throw gmlp::Error(n.error);
    ncclUniqueId id;
    gmlp::check_nccl(n.get_unique_id(&id), "ncclGetUniqueId");
    if (cap < sizeof id) throw gmlp::Error("internal: NCCL's unique id is larger than its buffer");
    std::memcpy(out, &id, sizeof id);
    return sizeof id;
  } catch (const std::exception& e) {
    gmlp::copy_error(e.what(), err, err_cap);
    return 0;
  }
#else
  (void)out, (void)cap;
  gmlp::copy_error("this CUDA module was built without NCCL's header (nccl.h)", err, err_cap);
  return 0;
#endif
}

extern "C" __attribute__((visibility("default"))) gmlp::DeviceReducer* gmlp_cuda_nccl_open(
    const unsigned char* id, size_t len, int rank, int size, char* err, size_t err_cap) {
#ifdef GMLP_NCCL_HEADERS
  try {
    const gmlp::Nccl& n = gmlp::nccl();
    if (!n.error.empty()) throw gmlp::Error(n.error);
    ncclUniqueId uid;
    if (len != sizeof uid) throw gmlp::Error("internal: NCCL unique id of the wrong size");
    std::memcpy(&uid, id, sizeof uid);
    return new gmlp::NcclReducer(uid, rank, size);  // the job's one reducer, kept until exit
  } catch (const std::exception& e) {
    gmlp::copy_error(e.what(), err, err_cap);
    return nullptr;
  }
#else
  (void)id, (void)len, (void)rank, (void)size;
  gmlp::copy_error("this CUDA module was built without NCCL's header (nccl.h)", err, err_cap);
  return nullptr;
#endif
}
