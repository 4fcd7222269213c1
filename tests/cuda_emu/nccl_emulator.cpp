// The CUDA emulator's NCCL (nccl.h beside this file): the ranks of a job on one machine
// meet in a POSIX shared-memory segment named by the unique id. An all-reduce is each
// rank copying its part into its slot, a barrier, every rank adding the slots in rank
// order (so every rank holds the same sum, bit for bit), and a barrier before the slots
// are reused; a broadcast goes through the root's slot the same way. Large buffers go
// through in chunks of a slot's size. The buffers must be the emulator's device memory,
// as NCCL's must be the GPU's. A barrier that waits over two minutes (a rank gone) fails
// the call instead of hanging. (A rank 0 killed between creating the segment and every
// rank joining leaves its name in /dev/shm.)
#include <fcntl.h>
#include <sched.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <new>
#include <random>
#include <string>
#include <thread>

#include "nccl.h"

namespace {

constexpr size_t kSlotFloats = size_t(1) << 18;  // 1 MiB per rank: /dev/shm is small in containers
constexpr auto kPatience = std::chrono::seconds(120);

struct Header {
  std::atomic<int> ready;  // set by rank 0 once the segment is sized
  std::atomic<int> arrived;
  std::atomic<int> generation;
};
static_assert(std::atomic<int>::is_always_lock_free, "the barrier's atomics must work across processes");
constexpr size_t kHeaderBytes = 64;
static_assert(sizeof(Header) <= kHeaderBytes);

size_t segment_bytes(int nranks) { return kHeaderBytes + sizeof(float) * kSlotFloats * size_t(nranks); }

}  // namespace

struct ncclComm {
  Header* header = nullptr;
  float* slots = nullptr;  // nranks slots of kSlotFloats
  size_t bytes = 0;
  int rank = 0, nranks = 0;
};

namespace {

void pause_briefly(int& spins) {
  if (++spins < 1000)
    sched_yield();
  else
    std::this_thread::sleep_for(std::chrono::microseconds(100));
}

// Every rank of the communicator arrives before any leaves; false after kPatience.
bool barrier(ncclComm* c) {
  Header* h = c->header;
  const int gen = h->generation.load(std::memory_order_acquire);
  if (h->arrived.fetch_add(1, std::memory_order_acq_rel) == c->nranks - 1) {
    h->arrived.store(0, std::memory_order_relaxed);
    h->generation.fetch_add(1, std::memory_order_release);
    return true;
  }
  const auto deadline = std::chrono::steady_clock::now() + kPatience;
  for (int spins = 0; h->generation.load(std::memory_order_acquire) == gen;) {
    if (std::chrono::steady_clock::now() > deadline) return false;
    pause_briefly(spins);
  }
  return true;
}

}  // namespace

extern "C" {

ncclResult_t ncclGetVersion(int* version) {
  if (!version) return ncclInvalidArgument;
  *version = 0;  // not a NCCL release (nccl.cpp says the emulator's stand-in)
  return ncclSuccess;
}

ncclResult_t ncclGetUniqueId(ncclUniqueId* id) {
  if (!id) return ncclInvalidArgument;
  std::random_device rd;
  std::memset(id, 0, sizeof *id);
  std::snprintf(id->internal, sizeof id->internal, "/gmlp-nccl-emu-%d-%08x%08x", int(getpid()), rd(), rd());
  return ncclSuccess;
}

ncclResult_t ncclCommInitRank(ncclComm_t* out, int nranks, ncclUniqueId id, int rank) {
  if (!out || nranks < 1 || rank < 0 || rank >= nranks) return ncclInvalidArgument;
  id.internal[sizeof id.internal - 1] = '\0';
  const std::string name = id.internal;
  if (name.rfind("/gmlp-nccl-emu-", 0) != 0) return ncclInvalidArgument;
  const size_t bytes = segment_bytes(nranks);
  int fd = -1;
  const auto deadline = std::chrono::steady_clock::now() + kPatience;
  if (rank == 0) {
    fd = shm_open(name.c_str(), O_CREAT | O_EXCL | O_RDWR, 0600);
    if (fd < 0 || ftruncate(fd, off_t(bytes)) != 0) {
      if (fd >= 0) close(fd), shm_unlink(name.c_str());
      return ncclSystemError;
    }
  } else {
    // Wait for rank 0 to create and size the segment.
    for (int spins = 0;; pause_briefly(spins)) {
      if (std::chrono::steady_clock::now() > deadline) return ncclRemoteError;
      if (fd < 0) fd = shm_open(name.c_str(), O_RDWR, 0600);
      struct stat st {};
      if (fd >= 0 && fstat(fd, &st) == 0 && size_t(st.st_size) == bytes) break;
    }
  }
  void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  close(fd);
  if (p == MAP_FAILED) {
    if (rank == 0) shm_unlink(name.c_str());
    return ncclSystemError;
  }
  auto* c = new ncclComm;
  c->header = static_cast<Header*>(p);  // zero-filled by ftruncate: every atomic starts at 0
  c->slots = reinterpret_cast<float*>(static_cast<char*>(p) + kHeaderBytes);
  c->bytes = bytes;
  c->rank = rank;
  c->nranks = nranks;
  if (rank == 0) c->header->ready.store(1, std::memory_order_release);
  for (int spins = 0; c->header->ready.load(std::memory_order_acquire) == 0; pause_briefly(spins))
    if (std::chrono::steady_clock::now() > deadline) {
      ncclCommAbort(c);
      return ncclRemoteError;
    }
  const bool joined = barrier(c);
  if (rank == 0) shm_unlink(name.c_str());  // every rank has it mapped: the name can go
  if (!joined) {
    ncclCommAbort(c);
    return ncclRemoteError;
  }
  *out = c;
  return ncclSuccess;
}

ncclResult_t ncclAllReduce(const void* sendbuff, void* recvbuff, size_t count,
                                            ncclDataType_t datatype, ncclRedOp_t op, ncclComm_t c, cudaStream_t) {
  if (!c || datatype != ncclFloat32 || op != ncclSum) return ncclInvalidArgument;
  if (count == 0) return ncclSuccess;
  if (!gmlp::emu::on_device(sendbuff, count * sizeof(float)) || !gmlp::emu::on_device(recvbuff, count * sizeof(float)))
    gmlp::emu::fail("ncclAllReduce given memory that is not the device's, or past the end of an allocation");
  const float* send = static_cast<const float*>(sendbuff);
  float* recv = static_cast<float*>(recvbuff);
  for (size_t off = 0; off < count; off += kSlotFloats) {
    const size_t n = std::min(kSlotFloats, count - off);
    std::memcpy(c->slots + size_t(c->rank) * kSlotFloats, send + off, n * sizeof(float));
    if (!barrier(c)) return ncclRemoteError;
    for (size_t i = 0; i < n; ++i) {
      float s = c->slots[i];
      for (int r = 1; r < c->nranks; ++r) s += c->slots[size_t(r) * kSlotFloats + i];
      recv[off + i] = s;
    }
    if (!barrier(c)) return ncclRemoteError;
  }
  return ncclSuccess;
}

// root's slot carries each chunk to the others.
ncclResult_t ncclBroadcast(const void* sendbuff, void* recvbuff, size_t count,
                                            ncclDataType_t datatype, int root, ncclComm_t c, cudaStream_t) {
  if (!c || datatype != ncclFloat32 || root < 0 || root >= c->nranks) return ncclInvalidArgument;
  if (count == 0) return ncclSuccess;
  if ((c->rank == root && !gmlp::emu::on_device(sendbuff, count * sizeof(float))) ||
      !gmlp::emu::on_device(recvbuff, count * sizeof(float)))
    gmlp::emu::fail("ncclBroadcast given memory that is not the device's, or past the end of an allocation");
  float* slot = c->slots + size_t(root) * kSlotFloats;
  for (size_t off = 0; off < count; off += kSlotFloats) {
    const size_t n = std::min(kSlotFloats, count - off);
    if (c->rank == root) std::memcpy(slot, static_cast<const float*>(sendbuff) + off, n * sizeof(float));
    if (!barrier(c)) return ncclRemoteError;
    std::memcpy(static_cast<float*>(recvbuff) + off, slot, n * sizeof(float));  // root: its own again
    if (!barrier(c)) return ncclRemoteError;
  }
  return ncclSuccess;
}

// Every call above completes when it is made, on every rank in the same order: a
// group has nothing to hold back.
ncclResult_t ncclGroupStart() { return ncclSuccess; }
ncclResult_t ncclGroupEnd() { return ncclSuccess; }

ncclResult_t ncclCommAbort(ncclComm_t c) {
  if (!c) return ncclSuccess;
  munmap(c->header, c->bytes);
  delete c;
  return ncclSuccess;
}

const char* ncclGetErrorString(ncclResult_t r) {
  switch (r) {
    case ncclSuccess:
      return "no error";
    case ncclSystemError:
      return "a system call failed (the emulator's shared memory)";
    case ncclInvalidArgument:
      return "invalid argument";
    case ncclRemoteError:
      return "a peer did not arrive within two minutes";
    default:
      return "unhandled error";
  }
}

}  // extern "C"
