// The MPI communicator (gmlp/comm.h): MPI_COMM_WORLD, started on first use and
// finalised at exit. Built only when CMake found MPI, as a module of its own
// (libgmlp_mpi.so) that src/train/comm.cpp opens only under an MPI launcher. It shares
// no code with the library beyond the inline parts of gmlp/comm.h and gmlp/error.h.
#include <mpi.h>

#include <algorithm>
#include <cstdlib>
#include <memory>
#include <vector>

#include "gmlp/comm.h"
#include "gmlp/error.h"

namespace gmlp {
namespace {

void check(int rc, const char* what) {
  if (rc == MPI_SUCCESS) return;
  char msg[MPI_MAX_ERROR_STRING];
  int len = 0;
  MPI_Error_string(rc, msg, &len);
  throw Error(std::string(what) + " failed: " + std::string(msg, size_t(len)));
}

class MpiWorld final : public Communicator {
 public:
  MpiWorld() {
    int started = 0;
    MPI_Initialized(&started);
    if (!started) {
      // Only the main thread calls MPI; OpenMP threads never do.
      int provided = 0;
      check(MPI_Init_thread(nullptr, nullptr, MPI_THREAD_FUNNELED, &provided), "MPI_Init_thread");
      owned_ = true;
    }
    MPI_Comm_rank(MPI_COMM_WORLD, &rank_);
    MPI_Comm_size(MPI_COMM_WORLD, &size_);
    char version[MPI_MAX_LIBRARY_VERSION_STRING];
    int len = 0;
    MPI_Get_library_version(version, &len);
    library_ = std::string(version, size_t(len));
    if (auto nl = library_.find_first_of(",\n"); nl != std::string::npos) library_.resize(nl);
  }
  ~MpiWorld() override {
    int done = 0;
    MPI_Finalized(&done);
    if (owned_ && !done) {
      // A rank leaving with reductions in flight would hang the others in Finalize.
      if (!requests_.empty()) MPI_Abort(MPI_COMM_WORLD, 1);
      MPI_Finalize();
    }
  }
  int rank() const override { return rank_; }
  int size() const override { return size_; }
  std::string describe() const override { return "MPI (" + library_ + "), " + std::to_string(size_) + " ranks"; }

  void allreduce_sum(float* buf, size_t n) override { reduce(buf, n, MPI_FLOAT); }
  void allreduce_sum(double* buf, size_t n) override { reduce(buf, n, MPI_DOUBLE); }
  void allreduce_sum(int64_t* buf, size_t n) override { reduce(buf, n, MPI_INT64_T); }
  void broadcast(void* buf, size_t bytes, int root) override {
    for (size_t off = 0; off < bytes; off += kMaxCount) {
      const int c = int(std::min(kMaxCount, bytes - off));
      check(MPI_Bcast(static_cast<char*>(buf) + off, c, MPI_BYTE, root, MPI_COMM_WORLD), "MPI_Bcast");
    }
  }
  void allgather_blocks(float* buf, size_t n) override {
    std::vector<int> counts, displs;
    layout(n, counts, displs);
    check(MPI_Allgatherv(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, buf, counts.data(), displs.data(), MPI_FLOAT,
                         MPI_COMM_WORLD),
          "MPI_Allgatherv");
  }
  void gather_blocks(float* full, const float* mine, size_t n, int root) override {
    std::vector<int> counts, displs;
    layout(n, counts, displs);
    check(MPI_Gatherv(mine, counts[size_t(rank_)], MPI_FLOAT, full, counts.data(), displs.data(), MPI_FLOAT, root,
                      MPI_COMM_WORLD),
          "MPI_Gatherv");
  }
  void start_allreduce_sum(float* buf, size_t n) override {
    for (size_t off = 0; off < n; off += kMaxCount) {
      requests_.emplace_back();
      check(MPI_Iallreduce(MPI_IN_PLACE, buf + off, int(std::min(kMaxCount, n - off)), MPI_FLOAT, MPI_SUM,
                           MPI_COMM_WORLD, &requests_.back()),
            "MPI_Iallreduce");
    }
  }
  void progress() override {
    if (requests_.empty()) return;
    int done = 0;
    check(MPI_Testall(int(requests_.size()), requests_.data(), &done, MPI_STATUSES_IGNORE), "MPI_Testall");
    if (done) requests_.clear();
  }
  void wait_all() override {
    if (requests_.empty()) return;
    check(MPI_Waitall(int(requests_.size()), requests_.data(), MPI_STATUSES_IGNORE), "MPI_Waitall");
    requests_.clear();
  }
  [[noreturn]] void abort(int code) override {
    MPI_Abort(MPI_COMM_WORLD, code);
    std::_Exit(code);  // MPI_Abort does not return; this is for the compiler
  }

 private:
  // MPI counts are ints: larger buffers go in pieces.
  static constexpr size_t kMaxCount = size_t(1) << 30;
  // The ranks' blocks as MPI's counts and displacements (ints: a sharded buffer is
  // bounded by 2^31 floats, far above any model this engine trains on CPUs).
  void layout(size_t n, std::vector<int>& counts, std::vector<int>& displs) const {
    require(n < (size_t(1) << 31), "a sharded buffer of " + std::to_string(n) + " floats exceeds MPI's int counts");
    for (int r = 0; r < size_; ++r) {
      const Block b = block_of(n, r, size_);
      counts.push_back(int(b.size()));
      displs.push_back(int(b.begin));
    }
  }
  void reduce(void* buf, size_t n, MPI_Datatype type) {
    int bytes = 0;
    MPI_Type_size(type, &bytes);
    for (size_t off = 0; off < n; off += kMaxCount)
      check(MPI_Allreduce(MPI_IN_PLACE, static_cast<char*>(buf) + off * size_t(bytes), int(std::min(kMaxCount, n - off)),
                          type, MPI_SUM, MPI_COMM_WORLD),
            "MPI_Allreduce");
  }
  int rank_ = 0, size_ = 1;
  bool owned_ = false;
  std::string library_;
  std::vector<MPI_Request> requests_;
};

}  // namespace

}  // namespace gmlp

// The module's entry point (an exception from MPI's start-up passes through to the
// caller, which owns the communicator made).
extern "C" __attribute__((visibility("default"))) gmlp::Communicator* gmlp_mpi_world() { return new gmlp::MpiWorld(); }
