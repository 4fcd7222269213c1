#include "train/batch_ahead.h"

namespace gmlp {

void BatchAhead::draw_from(Rng& rng) {
  // The task's memory is about to be written: the upload that read it last must be done.
  be_.finish_uploads();
  next_ = task_.next_batch(rng);
  // The dropout masks' seed comes from the run's RNG after the batch's draws, the same on
  // every rank (the masks go by global batch row): a resumed run, and any number of ranks,
  // drop the same. Evaluation batches never carry any.
  draw_dropout(cfg_, rng, next_);
  staged_ = nullptr;
  if (!next_.images || be_.host_memory()) return;
  const DataParallel::Rows rows = dp_.rows(next_.B);
  const size_t per_image = size_t(cfg_.image_channels) * cfg_.image_height * cfg_.image_width;
  const size_t n = size_t(rows.count) * per_image;
  if (images_[0].size() < n) {
    for (DeviceBuffer<float>& buf : images_) buf = DeviceBuffer<float>(be_, n);
    // alloc() zeroes them on the device's own queue, which an upload beside does not wait
    // for: on a GPU the zeros could land after the images.
    be_.synchronize();
  }
  DeviceBuffer<float>& buf = images_[turn_];
  turn_ ^= 1;
  be_.upload_beside(buf.data(), next_.images + size_t(rows.first) * per_image, sizeof(float) * n);
  staged_ = buf.data();
}

Batch BatchAhead::take(Rng& rng) {
  if (ready_)
    rng = after_;
  else
    draw_from(rng);  // the run's first step, or its first after a resume: drawn now
  ready_ = false;
  be_.await_uploads();
  Batch mine = dp_.shard(next_);
  if (staged_) {
    mine.images = staged_;
    mine.images_on_backend = true;
  }
  return mine;
}

void BatchAhead::draw(const Rng& rng) {
  after_ = rng;
  draw_from(after_);
  ready_ = true;
}

}  // namespace gmlp
