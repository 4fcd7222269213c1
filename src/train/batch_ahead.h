#pragma once
// The next training step's batch, drawn while the device runs this one. A step waits for
// its device once, for its loss (train_step); whatever the host does between that wait and
// the next step's first launch, the GPU sits idle through (unless that step's forward is
// already queued: the trainer's pipeline, trainer.cpp). Drawing a batch is such work,
// and on image files it is the most of it (gMLP-S/16 at batch 64: 1.7 ms of copies and
// shifts a step, docs/bench-gpu.md), with a pageable upload after it. So the trainer draws
// step t+1's batch after step t's update is queued, before step t's wait, and on a
// device sends its images up beside step t's kernels (Backend::upload_beside, from the
// task's page-locked memory: TrainTask::place_batches).
//
// The draws are the ones a step-by-step loop makes, in the same order: the batch ahead is
// drawn from a copy of the run's RNG, which takes the copy's state only when the batch is
// taken. A checkpoint written in between saves the RNG a resumed run must start from, and
// a batch drawn ahead of a step that never comes (the run stopped) draws nothing from it.
#include "backend/backend.h"
#include "gmlp/config.h"
#include "gmlp/model.h"
#include "gmlp/rng.h"
#include "train/data_parallel.h"
#include "train/tasks.h"

namespace gmlp {

class BatchAhead {
 public:
  BatchAhead(TrainTask& task, const ModelConfig& cfg, DataParallel& dp, Backend& be)
      : task_(task), cfg_(cfg), dp_(dp), be_(be) {}
  // This step's batch, this rank's rows of it: the batch drawn ahead if there is one,
  // else one drawn now. On a device its images are in device memory, and the step's work
  // queued from here waits for their upload (the model's own input buffer is then made
  // only by evaluations). rng: the run's, left as the batch's draws leave it.
  Batch take(Rng& rng);
  // Draws the next step's batch from a copy of rng (the run's, which stays as it is until
  // take()), and on a device queues its images' upload beside the work queued so far.
  void draw(const Rng& rng);

 private:
  void draw_from(Rng& rng);  // into next_ and, on a device, staged_
  TrainTask& task_;
  const ModelConfig& cfg_;
  DataParallel& dp_;
  Backend& be_;
  bool ready_ = false;
  Batch next_;                     // the batch drawn last, the whole of it
  Rng after_;                      // the run's RNG after its draws
  const uint8_t* staged_ = nullptr;  // this rank's rows of its images (floats or bytes), on the device
  // Two, taken in turn: the upload for step t+1 may run while step t's kernels still
  // read step t's images, and step t-1's finished before step t was queued. Made
  // together, with one wait, when the first batch is drawn.
  DeviceBuffer<uint8_t> images_[2];  // sized in bytes
  int turn_ = 0;
};

}  // namespace gmlp
