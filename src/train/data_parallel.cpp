// Data parallelism over a Communicator (src/train/data_parallel.h).
#include "train/data_parallel.h"

#include <chrono>
#include <cstring>

#include "gmlp/error.h"

namespace gmlp {
namespace {
// Gradient ranges are gathered into buckets of at least this many floats (1 MiB)
// before a reduction starts: per-call latency would dominate tiny layers.
constexpr size_t kBucketFloats = size_t(1) << 18;

// What rows [first, first + count) of a batch weigh in its mean loss: their targets >= 0,
// or the rows themselves (a label a row, or no targets).
int64_t weight_of(const Batch& g, const ModelConfig& c, int first, int count) {
  if (!g.targets || !c.per_token_output()) return count;
  int64_t n = 0;
  for (int b = first; b < first + count; ++b)
    for (int t = 0; t < g.T; ++t) n += g.targets[int64_t(b) * g.stride + t] >= 0;
  return n;
}

// Rows [first, first + count) of a batch, as a batch; keep: where its columns of the
// stochastic-depth masks are put.
Batch rows_of(const Batch& g, const ModelConfig& c, int first, int count, std::vector<float>& keep) {
  Batch s = g;
  s.B = count;
  if (g.tokens) s.tokens = g.tokens + int64_t(first) * g.stride;
  const int64_t image = int64_t(c.image_channels) * c.image_height * c.image_width;
  if (g.images) s.images = g.images + int64_t(first) * image;
  if (g.image_bytes) s.image_bytes = g.image_bytes + int64_t(first) * image;
  if (g.lengths) s.lengths = g.lengths + first;
  if (g.targets) s.targets = g.targets + (c.per_token_output() ? int64_t(first) * g.stride : int64_t(first));
  if (g.mix_targets) s.mix_targets = g.mix_targets + first;  // a classifier's: one a row
  if (g.mix_weights) s.mix_weights = g.mix_weights + first;
  if (g.keep) {
    // keep is [L, B]: these rows' columns of every layer.
    const int L = c.n_layers;
    keep.resize(size_t(L) * count);
    for (int l = 0; l < L; ++l)
      std::memcpy(keep.data() + size_t(l) * count, g.keep + size_t(l) * g.B + first, sizeof(float) * size_t(count));
    s.keep = keep.data();
  }
  s.row_offset = g.row_offset + first;  // the dropout masks go by global row
  return s;
}
}  // namespace

DataParallel::DataParallel(Communicator& comm, Model& model, bool reduce_alone)
    : comm_(comm), model_(model), reducing_(comm.size() > 1 || reduce_alone) {
  if (!reducing_) return;
  if (!model_.backend().host_memory()) reducer_ = &device_reducer(model_.device(), comm_);
  model_.set_grad_ready_hook([this](size_t off, size_t n) { grads_ready(off, n); });
}

DataParallel::~DataParallel() {
  if (reducing_) model_.set_grad_ready_hook(nullptr);
}

std::string DataParallel::describe() const {
  return comm_.describe() + (reducer_ ? "; gradients over " + reducer_->describe() : "");
}

const Batch& DataParallel::shard(const Batch& g) {
  const int P = comm_.size();
  pending_end_ = model_.num_params();
  backwards_left_ = 1;
  if (P == 1) return g;
  require(g.B % P == 0, "a batch of " + std::to_string(g.B) + " rows does not divide among " + std::to_string(P) +
                            " ranks");
  const ModelConfig& c = model_.config();
  const Rows mine = rows(g.B);
  // Targets per rank, from the whole batch that every rank holds: no communication.
  const int64_t total = weight_of(g, c, 0, g.B);
  share_ = total > 0 ? double(weight_of(g, c, mine.first, mine.count)) / double(total) : 0.0;
  shard_ = rows_of(g, c, mine.first, mine.count, keep_);
  return shard_;
}

const std::vector<Batch>& DataParallel::pieces(const Batch& mine, int count) {
  require(count >= 1 && mine.B % count == 0,
          "a batch of " + std::to_string(mine.B) + " rows does not divide into " + std::to_string(count) + " pieces");
  backwards_left_ = count;
  pieces_.clear();
  if (count == 1) {
    pieces_.push_back(mine);
    return pieces_;
  }
  const ModelConfig& c = model_.config();
  const int n = mine.B / count;
  // Each piece's loss and gradient a mean over all of this rank's targets (0: none, and
  // none in any piece either).
  const int64_t over = weight_of(mine, c, 0, mine.B);
  piece_keep_.resize(size_t(count));
  for (int j = 0; j < count; ++j) {
    Batch p = rows_of(mine, c, j * n, n, piece_keep_[size_t(j)]);
    p.mean_over = over;
    p.add_loss = j > 0;
    pieces_.push_back(p);
  }
  return pieces_;
}

// Ranges arrive from the end of the buffer towards its start, each adjacent to the
// previous one; they are scaled to this rank's share and reduced in buckets.
// The gradients are the backend's copy: host memory on the CPU, device memory on a GPU.
void DataParallel::grads_ready(size_t offset, size_t count) {
  if (backwards_left_ > 1) {  // a piece before the last: its gradients are not all in yet
    if (offset == 0) --backwards_left_;
    return;
  }
  float* g = model_.device_grads(true);
  model_.backend().scale(g + offset, count, float(share_));
  if (pending_end_ - offset >= kBucketFloats || offset == 0) {
    if (reducer_)
      reducer_->start_allreduce_sum(g + offset, pending_end_ - offset);
    else
      comm_.start_allreduce_sum(g + offset, pending_end_ - offset);
    pending_end_ = offset;
  }
  if (!reducer_) comm_.progress();
}

double DataParallel::finish_backward() {
  if (!reducing_) return 0.0;
  require(pending_end_ == 0, "internal: gradients left unreduced after backward");
  if (reducer_) {
    reducer_->wait_all();
    return 0.0;
  }
  const auto t0 = std::chrono::steady_clock::now();
  comm_.wait_all();
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

void DataParallel::allgather_weights() {
  if (comm_.size() == 1) return;
  if (reducer_)
    reducer_->allgather_blocks(model_.device_weights(true), model_.num_params());
  else
    comm_.allgather_blocks(model_.weights(), model_.num_params());
}

DataParallel::Vote DataParallel::agree(double local_loss, double share, bool stop) {
  if (comm_.size() == 1) return {local_loss, stop};
  double v[2] = {local_loss * share, stop ? 1.0 : 0.0};
  comm_.allreduce_sum(v, 2);
  return {v[0], v[1] > 0};
}

void DataParallel::check_in_sync(int64_t step) {
  if (comm_.size() == 1) return;
  // FNV-1a over the weights' bytes: equal hashes for bit-identical weights.
  uint64_t h = 1469598103934665603ull;
  const auto* p = reinterpret_cast<const unsigned char*>(model_.weights());
  for (size_t i = 0; i < model_.num_params() * sizeof(float); ++i) h = (h ^ p[i]) * 1099511628211ull;
  uint64_t lead_hash = h;
  comm_.broadcast(&lead_hash, sizeof lead_hash, 0);
  int64_t differ = lead_hash != h;
  comm_.allreduce_sum(&differ, 1);
  require(differ == 0, "the weights of " + std::to_string(differ) + " of " + std::to_string(comm_.size()) +
                           " ranks differ from rank 0's after step " + std::to_string(step) +
                           " (the ranks must apply identical updates; was the run resumed from different files?)");
}

}  // namespace gmlp
