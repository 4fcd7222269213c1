#pragma once
// Where a model's memory lives and its ops run. The block (model/block.cpp), the model
// around it (model/model.cpp) and the optimizer are written once over this interface;
// the CPU backend (cpu_backend.cpp) forwards to the ops of src/ops/, the CUDA backend
// (src/ops/cuda/) runs the same ops, with the same shapes, on device pointers.
//
// Every pointer a backend op takes is backend memory: host memory for the CPU, device
// memory for CUDA (alloc() below). Only upload/download cross between the two. Shapes,
// strides and the meaning of every argument are those of the op of the same name in
// ops/ops.h, which documents them.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "gmlp/device.h"
#include "gmlp/error.h"
#include "ops/ops.h"

namespace gmlp {

class Backend {
 public:
  virtual ~Backend() = default;
  virtual Device device() const = 0;
  // What runs the ops, for the run's header: "cpu", or the GPU's name, compute
  // capability and memory.
  virtual std::string device_name() const = 0;
  // True when backend memory is host memory (the CPU): then a model keeps no mirror.
  virtual bool host_memory() const = 0;

  // ---- memory. alloc returns zero-filled memory (nullptr for 0 bytes).
  virtual void* alloc(size_t bytes) = 0;
  virtual void release(void* p) = 0;
  virtual void upload(void* dst, const void* host_src, size_t bytes) = 0;
  virtual void download(void* host_dst, const void* src, size_t bytes) = 0;
  virtual void copy(void* dst, const void* src, size_t bytes) = 0;
  virtual void zero(void* p, size_t bytes) = 0;
  // Waits until the work queued so far has finished (timing; the CPU runs synchronously).
  virtual void synchronize() = 0;

  // ---- host memory to upload from, and uploads beside the device's work (the next
  // training batch's images while this step runs: src/train/batch_ahead.h). A GPU's host
  // memory is page-locked, which its copy engine reads while the GPU computes; the
  // CPU's is the heap. alloc_host's memory is not zeroed.
  virtual void* alloc_host(size_t bytes) { return bytes ? std::malloc(bytes) : nullptr; }
  virtual void release_host(void* p) { std::free(p); }
  // Queues an upload from alloc_host memory that runs beside the work queued before it
  // rather than after it. The work queued from here on sees dst only after
  // await_uploads(); the host may write host_src again only after finish_uploads() (or
  // synchronize()): a GPU copies whenever it gets to it. The CPU copies at once.
  virtual void upload_beside(void* dst, const void* host_src, size_t bytes) { upload(dst, host_src, bytes); }
  // The work queued from now on waits for every upload beside queued before.
  virtual void await_uploads() {}
  // Returns when every upload beside queued so far has read its source.
  virtual void finish_uploads() {}
  // Queues an upload from alloc_host memory in line with the work: dst is written after
  // the work queued before it and before the work queued after it, and the host does not
  // wait (upload() does: a GPU's copy from pageable memory first waits for the queue to
  // drain, with the device idle from then until the next launch). The host may write
  // host_src again only after finish_queued_uploads() (or synchronize(), or a download).
  // The CPU copies at once. A forward's token ids, targets, lengths and masks go so.
  virtual void upload_queued(void* dst, const void* host_src, size_t bytes) { upload(dst, host_src, bytes); }
  // Returns when every upload queued in line so far has read its source.
  virtual void finish_queued_uploads() {}
  // Queues a read-back into alloc_host memory in line with the work: host_dst receives
  // src as the work queued before it leaves it, unchanged by the work queued after, and
  // the host does not wait (download() does, for everything queued). host_dst holds the
  // bytes only once finish_queued_downloads() has returned. A training step's loss and
  // gradient norm come back so while the next step's forward runs (src/train/trainer.cpp).
  // The CPU copies at once.
  virtual void download_queued(void* host_dst, const void* src, size_t bytes) { download(host_dst, src, bytes); }
  // Returns when every read-back queued in line so far has landed; the device may still
  // be running the work queued after them.
  virtual void finish_queued_downloads() {}
  // GMLP_CUDA_PROFILE's window (docs/gpu.md "Profiling"): under the variable a device
  // times its ops from the start; on discards what it timed so far and times from here,
  // off stops timing. `gmlp bench` times its timed steps alone. Nothing on the CPU.
  virtual void profile_ops(bool /*on*/) {}
  // The most memory this backend has held at once, in bytes, since the process started
  // (a device's: what torch.cuda.max_memory_allocated reports for PyTorch). 0 on the
  // CPU, whose memory is the process's resident set.
  virtual size_t peak_bytes() const { return 0; }
  // The memory this backend holds now, counted as peak_bytes counts it (0 on the CPU).
  virtual size_t bytes_in_use() const { return 0; }
  // The matrix products' precision (gmlp/device.h); error when the backend has no such
  // path. Set before a model is built; the default is fp32.
  virtual void set_precision(Precision p) = 0;
  // True when a training arena made now holds the SGU's U and F in bf16 (block.h): the
  // CUDA backend under bf16, as PyTorch's autocast keeps bf16 activations. The CPU keeps
  // floats in either precision.
  virtual bool stores_bf16() const { return false; }
  // How many batch rows' T x T attention scores the tiny attention's backward takes at
  // once, so its dP scratch holds that many: the CPU goes a row at a time, a GPU takes
  // the batch in one product each.
  virtual int attention_rows_at_once(int B) const {
    (void)B;
    return 1;
  }

  // ---- the ops of ops.h.
  virtual void gemm(bool trans_a, bool trans_b, int M, int N, int K, float alpha, const float* A, int lda,
                    const float* B, int ldb, float beta, float* C, int ldc) = 0;
  // Operands held as bf16 bits (ops/bf16.h), where stores_bf16(): C = alpha op(A) op(B) +
  // beta C summed in float into float C, or op(A) op(B) rounded into bf16 C; x rounded
  // into y (n values); the block LayerNorm's output into bf16 y16 (and float y too
  // where given). Errors on a backend that does not store bf16.
  virtual void gemm_bf16(bool, bool, int, int, int, float, const uint16_t*, int, const uint16_t*, int, float, float*,
                         int) {
    no_bf16("gemm_bf16");
  }
  virtual void gemm_bf16(bool, bool, int, int, int, const uint16_t*, int, const uint16_t*, int, uint16_t*, int) {
    no_bf16("gemm_bf16");
  }
  virtual void to_bf16(const float*, size_t, uint16_t*) { no_bf16("to_bf16"); }
  // Several such roundings, count of them, as one pass where the device can (a step's
  // projection weights, every layer's: one launch instead of two a layer).
  virtual void to_bf16_many(const ops::Bf16Copy* copies, int count) {
    for (int i = 0; i < count; ++i) to_bf16(copies[i].x, copies[i].n, copies[i].y);
  }
  // Every layer's spatial W rounded into the bf16 copies its products read (ops.h's
  // spatial_w16_head(T) values a head): layer l's W[l] dense, rows ldw apart, heads
  // head_stride apart; its copies at out + l * layer_stride. One launch where the device
  // can. Errors on a backend that does not store bf16.
  virtual void spatial_w_bf16_many(const float* const* /*W*/, int /*layers*/, int /*ldw*/, int64_t /*head_stride*/,
                                   int /*heads*/, int /*T*/, bool /*causal*/, uint16_t* /*out*/,
                                   int64_t /*layer_stride*/) {
    no_bf16("spatial_w_bf16_many");
  }
  // M rows of N floats rounded into y, their column sums added to sums as they are read:
  // dY rounded for the out-projection's products, its bias gradient in the same pass.
  // Where row_scale is given, row r is taken times row_scale[r % B] (stochastic depth's
  // keep[b], the rows time-major): dY = keep * dx without a pass of its own.
  virtual void to_bf16_summing_columns(const float* /*x*/, int /*M*/, int /*N*/, uint16_t* /*y*/, float* /*sums*/,
                                       const float* /*row_scale*/, int /*B*/) {
    no_bf16("to_bf16_summing_columns");
  }
  // linear_forward and linear_backward over x, dy and W in bf16 (the bias's gradient
  // from dy, the same gradient in float).
  virtual void linear_forward_bf16(const uint16_t*, int, int, const uint16_t*, const float*, int, float*) {
    no_bf16("linear_forward_bf16");
  }
  // y = r + x W^T + b (the block's output: residual, projection and bias, with no pass
  // seeding y where the device can add them in the product).
  virtual void linear_residual_bf16(const uint16_t*, int, int, const uint16_t*, const float*, int, const float*,
                                    float*) {
    no_bf16("linear_residual_bf16");
  }
  virtual void linear_backward_bf16(const uint16_t*, const float*, const uint16_t*, int, int, const uint16_t*, int,
                                    float*, bool, float*, float*) {
    no_bf16("linear_backward_bf16");
  }
  virtual void layernorm_forward_bf16(const float*, int, int, int, const float*, const float*, float, float*,
                                      uint16_t*, int, float*, float*) {
    no_bf16("layernorm_forward_bf16");
  }
  // residual_keep's out = x + keep[r % B] h, then layernorm_forward_bf16 of out [M, d]
  // into y16 (rows d apart): stochastic depth's residual taken as the next block's
  // LayerNorm reads it (block.h's BlockCall::x_before), one pass over the rows fewer.
  virtual void residual_keep_layernorm_bf16(const float* /*x*/, const float* /*keep*/, const float* /*h*/, int /*M*/,
                                            int /*B*/, int /*d*/, float* /*out*/, const float* /*w*/,
                                            const float* /*b*/, float /*eps*/, uint16_t* /*y16*/, float* /*mean*/,
                                            float* /*rstd*/) {
    no_bf16("residual_keep_layernorm_bf16");
  }
  virtual void layernorm_apply_bf16(const float*, int, int, int, const float*, const float*, const float*,
                                    const float*, float*, uint16_t*, int) {
    no_bf16("layernorm_apply_bf16");
  }
  virtual void linear_forward(const float* x, int M, int in, const float* W, const float* b, int out, float* y) = 0;
  virtual void linear_backward(const float* dy, const float* x, int M, int in, const float* W, int out, float* dx,
                               bool accumulate_dx, float* dW, float* db) = 0;
  virtual void layernorm_forward(const float* x, int ldx, int M, int C, const float* w, const float* b, float eps,
                                 float* y, int ldy, float* mean, float* rstd) = 0;
  virtual void layernorm_apply(const float* x, int ldx, int M, int C, const float* w, const float* b,
                               const float* mean, const float* rstd, float* y, int ldy) = 0;
  virtual void layernorm_backward(const float* dy, int lddy, const float* x, int ldx, const float* mean,
                                  const float* rstd, const float* w, int M, int C, float* dx, int lddx,
                                  bool accumulate_dx, float* dw, float* db) = 0;
  virtual void gelu_forward(const float* x, float* y, int64_t n, bool tanh_approx) = 0;
  virtual void bias_gelu_forward(float* u, const float* b, int M, int n, float* y,
                                 bool tanh_approx) = 0;  // y may be u
  virtual void gelu_backward(const float* x, const float* dy, float* dx, int64_t n, bool tanh_approx) = 0;
  virtual void toeplitz_materialize(const float* w, int n, bool causal, int T, float* W) = 0;
  virtual void toeplitz_fold(const float* dW, int T, int n, bool causal, float* dw) = 0;
  virtual void sgu_forward(const ops::SguParams& p, const float* Z, int T, int B, int f, float* S, float* gmean,
                           float* grstd, float* F, float* G, const float* extra) = 0;
  virtual void sgu_combine(Sgu kind, const float* Z, int ldz, const float* F, int M, int g, float* S) = 0;
  // The SGU's backward in its two parts (ops.h): the pass over the rows that also
  // rebuilds S, then the rest.
  virtual void sgu_backward_gate(const ops::SguParams& p, const float* dS, const float* Z, int T, int B, int f,
                                 const float* F, float* S, float* dF, float* dZ) = 0;
  virtual void sgu_backward_mix(const ops::SguParams& p, const ops::SguGrads& g, const float* dS, const float* Z,
                                int T, int B, int f, const float* gmean, const float* grstd, const float* F,
                                float* dZ, float* G, float* dF, float* dG) = 0;
  virtual void tiny_attention_forward(const ops::AttnParams& p, const float* H, int T, int B, float* qkv, float* P,
                                      float* O, float* A) = 0;
  virtual void tiny_attention_backward(const ops::AttnParams& p, const ops::AttnGrads& g, const float* dA,
                                       const float* H, int T, int B, const float* qkv, const float* P,
                                       const float* O, float* dH, float* dO, float* dP, float* dqkv) = 0;
  // images: this backend's memory, and so is a byte image's table.
  virtual void extract_patches(ops::Pixels images, int B, int C, int Hi, int Wi, int ph, int pw, float* out) = 0;
  // The same patches rounded into bf16, the operand of the patch embedding's bf16
  // products (a training forward in an arena that holds bf16, model.cpp). Errors on a
  // backend that does not store bf16.
  virtual void extract_patches_bf16(ops::Pixels /*images*/, int /*B*/, int /*C*/, int /*Hi*/, int /*Wi*/, int /*ph*/,
                                    int /*pw*/, uint16_t* /*out*/) {
    no_bf16("extract_patches_bf16");
  }
  virtual void embedding_forward(const float* E, int d, const int32_t* tokens, int M, int B, const float* pe,
                                 float* x) = 0;
  // dE [V, d] += each row of dx at its token's row, every row of dE summed in the order
  // of the rows of dx (so the same bits on every backend and every run).
  virtual void embedding_backward(const float* dx, int d, const int32_t* tokens, int M, int V, float* dE) = 0;
  // The mean loss over the targets >= 0, written to *loss in backend memory (added to it
  // with add): a training step reads it back once, after its update is queued
  // (Model::read_step). mean_over > 0: the mean (and dlogits) over that many targets,
  // not this call's own (ops::cross_entropy; a piece of a batch, gradient accumulation).
  // soft: label smoothing and mixed rows' second targets and weights (this backend's
  // memory), ops::SoftTargets.
  virtual void cross_entropy(const float* logits, int M, int V, const int32_t* targets, float* dlogits, double* loss,
                             int64_t mean_over, bool add, const ops::SoftTargets& soft) = 0;

  // ---- the glue of ops/rows.h: residuals, stochastic depth, pooling, row selection.
  virtual void residual_bias(const float* x, const float* b, int M, int d, float* out) = 0;
  virtual void residual_keep(const float* x, const float* keep, const float* h, int M, int B, int d,
                             float* out) = 0;
  virtual void scale_rows(const float* keep, const float* dx, int M, int B, int d, float* out) = 0;
  // Dropout (ops/ops.h): out = x + keep[b] * mask * h (keep may be null, the mask
  // inactive), its branch's backward, and y = x * mask over B rows of d. The masks are
  // computed from their counters where they are read (ops/dropout_mask.h).
  virtual void residual_dropout(const float* x, const float* h, const float* keep, const ops::DropMask& mask, int M,
                                int B, int d, float* out) = 0;
  virtual void residual_dropout_backward(const float* dout, const float* keep, const ops::DropMask& mask, int M, int B,
                                         int d, float* dh) = 0;
  virtual void dropout_apply(const float* x, const ops::DropMask& mask, int B, int d, float* y) = 0;
  virtual void mean_pool_forward(const float* h, int T, int B, int d, const int32_t* lengths, float* pooled) = 0;
  virtual void mean_pool_backward(const float* dpooled, int T, int B, int d, const int32_t* lengths, float* dh) = 0;
  virtual void gather_rows(const float* src, const int32_t* rows, int K, int d, float* dst) = 0;
  virtual void scatter_rows(const float* src, const int32_t* rows, int K, int M, int d, float* dst) = 0;

  // ---- the cached decoder's one-token ops (ops.h, decode.cpp). Index arrays are
  // backend memory too.
  virtual void decode_embed(const float* E, int d, const int32_t* tokens, const int32_t* pos, int R,
                            const float* pe, float* x) = 0;
  virtual void decode_linear(const float* W, int out, int in, const float* X, int R, const float* b, float* Y,
                             bool accumulate) = 0;
  virtual void decode_layernorm(const float* x, int ldx, int R, int C, const float* w, const float* b, float eps,
                                float* y, int ldy, const int32_t* rows) = 0;
  virtual void decode_mix(const float* G, int n, int g, int heads, const float* W, int64_t wsz, bool toeplitz,
                          const float* bias, const int32_t* stream, const int32_t* pos, int R, float* F) = 0;
  virtual void decode_attention(const ops::AttnParams& p, const float* h, const int32_t* stream, const int32_t* pos,
                                int R, int n, float* qkv, float* P, float* O, float* A, float* F) = 0;

  // ---- the optimizer (ops/adamw.cpp, ops/step_guard.h): one AdamW update of n values
  // (none where s.guard says the step is not finite); global-norm clipping as a sum of
  // squares written to *sum_squares and a scaling that reads it, both in backend memory,
  // so that a device clips and updates without the host waiting for the norm; scaling.
  virtual void adamw_update(float* p, const float* g, float* m, float* v, size_t n, const ops::AdamWStep& s) = 0;
  virtual void sum_squares(const float* x, size_t n, double* sum_squares) = 0;
  virtual void clip_scale(float* x, size_t n, const double* sum_squares, float max_norm) = 0;
  virtual void scale(float* x, size_t n, float c) = 0;
  // An exponential moving average's step (train.model_ema): avg = fma(rest, x, avg * decay).
  virtual void ema_update(float* avg, const float* x, size_t n, float decay, float rest) = 0;

 private:
  [[noreturn]] void no_bf16(const char* op) const {
    // Inline, as the whole class: the CUDA module links none of the library's code.
    throw Error(std::string(op) + ": the " + (device() == Device::cpu ? "CPU" : "CUDA") +
                " backend holds no activations in bf16");
  }
};

// The process's backend for a device (one per device; they live until exit). Error
// naming the reason when the device cannot be used.
Backend& backend_for(Device device);
Backend& cpu_backend();

// Sums of gradient buffers in device memory across the ranks of a job (NCCL for CUDA),
// for models whose memory is not host memory. A reduction is queued behind the work
// already issued to the device and runs beside what is issued after it; wait_all()
// makes the work issued after it wait for every reduction started. Nothing here blocks
// the host.
class DeviceReducer {
 public:
  virtual ~DeviceReducer() = default;
  virtual std::string describe() const = 0;  // "NCCL 2.28.3, 2 ranks"
  virtual void start_allreduce_sum(float* buf, size_t n) = 0;
  virtual void wait_all() = 0;
  // The sharded optimizer's exchange (ZeRO-1; Communicator::allgather_blocks): in place,
  // every rank's block of buf, block_of(n, rank, size), to every rank; after the work
  // issued before it, and before the work issued after it.
  virtual void allgather_blocks(float* buf, size_t n) = 0;
};
class Communicator;
// The job's reducer for `device` (made on first use, collectively: every rank of `host`
// must call it). `host` carries the reducer's rendezvous. Error naming what is missing
// (no CUDA build, a CUDA module without NCCL, no libnccl on the machine).
DeviceReducer& device_reducer(Device device, Communicator& host);

// A buffer of one of a backend's two memories, freed with its owner: its own memory
// (Host false: alloc, release) or its host memory for uploads (Host true: alloc_host,
// release_host).
template <typename T, bool Host>
class BackendBuffer {
 public:
  BackendBuffer() = default;
  BackendBuffer(Backend& be, size_t n)
      : be_(&be), n_(n), p_(static_cast<T*>(Host ? be.alloc_host(n * sizeof(T)) : be.alloc(n * sizeof(T)))) {
    require(p_ || n == 0, [&] { return "cannot allocate " + std::to_string(n * sizeof(T)) + " bytes"; });
  }
  ~BackendBuffer() { free(); }
  BackendBuffer(BackendBuffer&& o) noexcept : be_(o.be_), n_(o.n_), p_(o.p_) { o.p_ = nullptr; }
  BackendBuffer& operator=(BackendBuffer&& o) noexcept {
    if (this != &o) {
      free();
      be_ = o.be_;
      n_ = o.n_;
      p_ = o.p_;
      o.p_ = nullptr;
    }
    return *this;
  }
  T* data() const { return p_; }
  size_t size() const { return n_; }
  bool empty() const { return n_ == 0; }

 private:
  void free() {
    if (!be_ || !p_) return;
    if (Host)
      be_->release_host(p_);
    else
      be_->release(p_);
  }
  Backend* be_ = nullptr;
  size_t n_ = 0;
  T* p_ = nullptr;
};

// A buffer of backend memory.
template <typename T>
class DeviceBuffer : public BackendBuffer<T, false> {
  using BackendBuffer<T, false>::BackendBuffer;
};
// A buffer of a backend's host memory for uploads: page-locked on a GPU.
template <typename T>
class HostBuffer : public BackendBuffer<T, true> {
  using BackendBuffer<T, true>::BackendBuffer;
};

// A float buffer in backend memory with a host copy, and which of the two is newer: a
// device model's weights and gradients, the optimizer's moments. to_host/to_device
// copy only when the other side is newer; writers set `state` after writing.
struct HostMirror {
  DeviceBuffer<float> dev;
  enum State { same, host_newer, device_newer } state = same;
  void to_host(Backend& be, std::vector<float>& host) {
    if (state != device_newer) return;
    be.download(host.data(), dev.data(), host.size() * sizeof(float));
    state = same;
  }
  void to_device(Backend& be, const std::vector<float>& host) {
    if (state != host_newer) return;
    be.upload(dev.data(), host.data(), host.size() * sizeof(float));
    state = same;
  }
};

}  // namespace gmlp
