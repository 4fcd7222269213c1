#pragma once
// Data parallelism over a Communicator (docs/distributed.md). Every rank draws the
// whole global batch from the same seeded RNG (data, masking, augmentation, stochastic
// depth and the dropout seed alike) and trains on its own contiguous rows, whose dropout
// masks go by their global row numbers. A rank's mean loss times its
// share of the global batch's targets sums, over the ranks, to the one-process loss;
// so do the gradients, which are scaled by that share and summed with all-reduces
// started layer by layer during backward. Every rank then applies the same clipping
// and AdamW step to the same gradients and keeps identical weights.
//
// Gradient accumulation (train.grad_accum) is the same split in time: a rank's rows are
// taken in pieces, each a mean over the rank's targets, whose gradients add up to the
// rank's; the reductions start in the last piece's backward.
#include <cstdint>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "gmlp/comm.h"
#include "gmlp/model.h"

namespace gmlp {

class DataParallel {
 public:
  // Installs the model's gradient hook when there are several ranks. A model in host
  // memory is reduced through comm (MPI); a model on a GPU through the device reducer
  // (NCCL), whose rendezvous comm carries. reduce_alone: reduce also when comm has one
  // rank (the tests' way to run the NCCL path on a single GPU against no reduction).
  DataParallel(Communicator& comm, Model& model, bool reduce_alone = false);
  ~DataParallel();
  DataParallel(const DataParallel&) = delete;
  DataParallel& operator=(const DataParallel&) = delete;

  Communicator& comm() { return comm_; }
  bool lead() const { return comm_.rank() == 0; }  // the rank that prints and writes

  // This rank's rows of the global batch (the batch itself on one process); sets
  // share(). The global batch's rows must divide among the ranks.
  const Batch& shard(const Batch& global);
  // The rank's rows, as shard() returned them, in `count` pieces of equal rows (the
  // batch itself for one): each a mean over all of the rank's targets, every piece's
  // loss after the first added to the first's (Batch::mean_over, add_loss). Valid until
  // the next shard(); the model's backwards of the first count - 1 are not reduced.
  const std::vector<Batch>& pieces(const Batch& mine, int count);
  // This rank's rows of a global batch of B rows (all of them on one process).
  struct Rows {
    int first, count;
  };
  Rows rows(int B) const { return {comm_.rank() * (B / comm_.size()), B / comm_.size()}; }
  // This rank's fraction of the global batch's targets.
  double share() const { return share_; }

  // After backward: completes the gradient reductions backward started. Returns the
  // seconds spent waiting for them (communication not hidden behind the backward; 0 on
  // a GPU, where later work waits on the device and the host never does).
  double finish_backward();
  // "MPI (Open MPI 4.1.4), 2 ranks; gradients over NCCL 2.28.3" and the like.
  std::string describe() const;

  // One small collective per step: the global loss (sum of local loss x share, the
  // share() of that step's batch: the trainer may have taken the next batch since) and
  // whether any rank was asked to stop, so that every rank stops after the same step.
  struct Vote {
    double loss;
    bool stop;
  };
  Vote agree(double local_loss, double share, bool stop);

  // ZeRO-1, after each rank has updated its block of the weights (block_of): every
  // block to every rank, where the weights live (MPI on the host, NCCL on GPUs).
  void allgather_weights();

  // Error naming the step when the ranks' weights are not bit-identical (they must
  // be: the same reduced gradients, the same update).
  void check_in_sync(int64_t step);

 private:
  void grads_ready(size_t offset, size_t count);
  Communicator& comm_;
  Model& model_;
  bool reducing_;                     // the hook is installed
  DeviceReducer* reducer_ = nullptr;  // a GPU model's gradients go through it
  double share_ = 1.0;
  size_t pending_end_ = 0;  // grads [offset, pending_end_) scaled, not yet being reduced
  int backwards_left_ = 1;  // of this step's pieces; the last one's gradients are reduced
  Batch shard_;
  std::vector<float> keep_;  // this rank's columns of the stochastic-depth masks
  std::vector<Batch> pieces_;
  std::vector<std::vector<float>> piece_keep_;  // each piece's columns of them
};

}  // namespace gmlp
