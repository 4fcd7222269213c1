#pragma once
// The processes that train one model together (docs/distributed.md): rank, size and
// the collectives data-parallel training needs, over MPI when the program was built
// with it and started by an MPI launcher (mpirun, srun), else this process alone.
//
// Buffers are host pointers here. A GPU communicator (NCCL) takes the same calls over
// one contiguous device gradient buffer; the trainer only ever passes contiguous
// slices of the parameter layout.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <string>

namespace gmlp {

class Communicator {
 public:
  virtual ~Communicator() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  // "single process", "MPI (Open MPI 4.1.4)", ...
  virtual std::string describe() const = 0;

  // Elementwise sum across ranks, in place; every rank gets the same result.
  virtual void allreduce_sum(float* buf, size_t n) = 0;
  virtual void allreduce_sum(double* buf, size_t n) = 0;
  virtual void allreduce_sum(int64_t* buf, size_t n) = 0;
  // Copies root's `bytes` bytes at buf to every rank.
  virtual void broadcast(void* buf, size_t bytes, int root) = 0;

  // Sharded optimizer state (ZeRO-1): a buffer of n floats is cut into one contiguous
  // block per rank, block_of(n, rank, size). allgather_blocks: in place, every rank
  // contributes its block of buf and receives the others'. gather_blocks: root
  // receives every rank's block (mine: this rank's, block-sized) into full (n floats;
  // ignored on the other ranks).
  virtual void allgather_blocks(float* buf, size_t n) = 0;
  virtual void gather_blocks(float* full, const float* mine, size_t n, int root) = 0;

  // Non-blocking sum in place: starts it and returns at once. buf must stay untouched
  // until wait_all(). progress() lets started reductions advance (MPI moves them only
  // inside MPI calls); wait_all() completes every one started.
  virtual void start_allreduce_sum(float* buf, size_t n) = 0;
  virtual void progress() = 0;
  virtual void wait_all() = 0;

  // Ends every rank of the job at once with this exit code (a failure on one rank
  // would otherwise leave the others waiting in a collective).
  [[noreturn]] virtual void abort(int code) = 0;
};

// The block [begin, end) of n items that rank r of P holds: P nearly equal, contiguous
// pieces in rank order.
struct Block {
  size_t begin, end;
  size_t size() const { return end - begin; }
};
// Inline: the MPI module (libgmlp_mpi.so) uses it too.
inline Block block_of(size_t n, int rank, int size) {
  // The first n % size blocks are one longer.
  const size_t q = n / size_t(size), r = n % size_t(size);
  return {q * size_t(rank) + std::min(size_t(rank), r), q * size_t(rank + 1) + std::min(size_t(rank + 1), r)};
}

// This run's communicator. The first call starts MPI when this gmlp was built with
// MPI and an MPI launcher started the process (its environment says so); a plain
// `gmlp train` never touches MPI and gets the single-process communicator. Error
// when a launcher started several processes but this build has no MPI.
Communicator& world();
// This process alone, every collective the identity: what world() is outside a
// launcher, for a caller that takes no part in a job's collectives even under one
// (bench_model's default, where it is given no communicator).
Communicator& this_process();
// Whether world() has been called (so tools can tell, after an error, whether other
// ranks may be waiting on this one).
bool world_started();
// The job size the launcher's environment announces (1 outside a launcher).
int launcher_world_size();
// Whether an MPI launcher started this process (its environment says so).
bool launched_by_mpi();

}  // namespace gmlp
