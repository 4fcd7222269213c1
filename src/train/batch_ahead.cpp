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
  if ((!next_.images && !next_.image_bytes) || be_.host_memory()) return;
  const DataParallel::Rows rows = dp_.rows(next_.B);
  // Floats or bytes, as the task holds its images: a byte set sends a quarter of the bytes.
  const size_t per_image = size_t(cfg_.image_channels) * cfg_.image_height * cfg_.image_width *
                           (next_.images ? sizeof(float) : sizeof(uint8_t));
  const size_t n = size_t(rows.count) * per_image;
  if (images_[0].size() < n) {
    for (DeviceBuffer<uint8_t>& buf : images_) buf = DeviceBuffer<uint8_t>(be_, n);
    // alloc() zeroes them on the device's own queue, which an upload beside does not wait
    // for: on a GPU the zeros could land after the images.
    be_.synchronize();
  }
  DeviceBuffer<uint8_t>& buf = images_[turn_];
  turn_ ^= 1;
  const auto* all = next_.images ? static_cast<const void*>(next_.images) : next_.image_bytes;
  be_.upload_beside(buf.data(), static_cast<const uint8_t*>(all) + size_t(rows.first) * per_image, n);
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
    if (mine.images)
      mine.images = reinterpret_cast<const float*>(staged_);
    else
      mine.image_bytes = staged_;
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
