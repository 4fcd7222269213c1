#include "train/batch_ahead.h"

namespace gmlp {

Batch BatchAhead::take(Rng& rng) {
  Batch global;
  const float* staged = nullptr;
  if (ready_) {
    ready_ = false;
    global = next_;
    rng = after_;
    staged = staged_;
    be_.await_uploads();
  } else {  // the run's first step, or its first after a resume
    global = task_.next_batch(rng);
    // The dropout masks' seed comes from the run's RNG after the batch's draws, the same
    // on every rank (the masks go by global batch row): a resumed run, and any number of
    // ranks, drop the same. Evaluation batches never carry any.
    draw_dropout(cfg_, rng, global);
  }
  Batch mine = dp_.shard(global);
  if (staged) {
    mine.images = staged;
    mine.images_on_backend = true;
  }
  return mine;
}

void BatchAhead::draw(const Rng& rng) {
  // The task's memory is about to be written: the upload that read it last must be done.
  be_.finish_uploads();
  after_ = rng;
  next_ = task_.next_batch(after_);
  draw_dropout(cfg_, after_, next_);
  staged_ = nullptr;
  if (next_.images && !be_.host_memory()) {
    const DataParallel::Rows rows = dp_.rows(next_.B);
    const size_t per_image = size_t(cfg_.image_channels) * cfg_.image_height * cfg_.image_width;
    const size_t n = size_t(rows.count) * per_image;
    DeviceBuffer<float>& buf = images_[turn_];
    turn_ ^= 1;
    if (buf.size() < n) buf = DeviceBuffer<float>(be_, n);
    be_.upload_beside(buf.data(), next_.images + size_t(rows.first) * per_image, sizeof(float) * n);
    staged_ = buf.data();
  }
  ready_ = true;
}

}  // namespace gmlp
