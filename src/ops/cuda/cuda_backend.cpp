// The CUDA backend, built as the module libgmlp_cuda.so: device memory from cudaMalloc,
// and the ops of ops/cuda/, which take the same shapes as the CPU ops. Everything runs on the default stream, in issue
// order, but the uploads beside (a stream of their own); reading a result back (a download, the loss, the gradient
// norm) waits for it.
#include <cuda_runtime_api.h>

#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <string>
#include <unordered_map>

#include "backend/backend.h"
#include "gmlp/error.h"
#include "ops/cuda/cuda_ops.h"
#include "ops/cuda/op_profile.h"

namespace gmlp {
namespace {

// The devices the CUDA runtime sees; 0 with `error` set when it cannot say (a driver
// older than this runtime, a device in a prohibited compute mode, ...): a fault to
// report, where cudaErrorNoDevice is only an absence.
int cuda_runtime_device_count(std::string* error = nullptr) {
  int n = 0;
  const cudaError_t e = cudaGetDeviceCount(&n);
  if (e == cudaSuccess) return n;
  cudaGetLastError();
  if (e != cudaErrorNoDevice && error)
    *error = std::string("the CUDA runtime cannot list the devices: ") + cudaGetErrorString(e) + " (" +
             std::to_string(int(e)) + ")";
  return 0;
}

using cuda::check;

size_t g_live_bytes = 0, g_peak_bytes = 0;  // counted under the backend's lock (g_one_thread)

// Which of the machine's GPUs this process drives: its rank among the job's processes on
// this machine, as the launcher announces it, modulo the GPUs it sees (0 for a single
// process). One process per GPU is the supported layout for data-parallel runs.
int local_rank() {
  for (const char* v : {"OMPI_COMM_WORLD_LOCAL_RANK", "MPI_LOCALRANKID", "SLURM_LOCALID", "LOCAL_RANK"})
    if (const char* s = std::getenv(v)) return std::atoi(s);
  return 0;
}

// The device this process drives (local_rank() modulo the devices), set when the
// backend is made. The current device is per host thread: an op called from a thread
// other than the one that made the backend (a Python thread: the extension releases
// the GIL) would otherwise run on device 0 with this device's memory and cuBLAS handle.
int g_device = 0;
cudaError_t select_device() {
  thread_local int current = -1;
  if (current == g_device) return cudaSuccess;
  const cudaError_t e = cudaSetDevice(g_device);
  if (e == cudaSuccess) current = g_device;
  return e;
}
void use_device() { check(int(select_device()), "cudaSetDevice"); }

// One host thread in the backend at a time. What the backend holds is the process's,
// not a model's: the scratch areas an op's kernels write and its later kernels read
// back, cuBLAS's plans, the allocation table, the uploads beside. Two runs in two
// threads (two Python threads: the module releases the GIL) once mixed their steps'
// numbers through them (CudaTrain.RunsInTwoThreadsAtOnce...). A whole op is queued
// under the lock, so another thread's op comes before or after it, never between its
// kernels; two models' ops may still interleave, each over its own buffers.
std::recursive_mutex g_one_thread;
using Hold = std::lock_guard<std::recursive_mutex>;

// Every op's first line: the lock, the device made current on the calling thread, then
// the op timed under GMLP_CUDA_PROFILE (op_profile.h).
struct Entry {
  explicit Entry(const char* op) : timer((use_device(), op)) {}
  Hold hold{g_one_thread};
  cuda::OpTimer timer;
};

class CudaBackend final : public Backend {
 public:
  Device device() const override { return Device::cuda; }
  std::string device_name() const override {
    int dev = 0;
    cudaDeviceProp p{};
    if (cudaGetDevice(&dev) != cudaSuccess || cudaGetDeviceProperties(&p, dev) != cudaSuccess) {
      cudaGetLastError();
      return "cuda";
    }
    char text[400];
    std::snprintf(text, sizeof text, "%s (device %d, sm_%d%d, %d SMs, %.1f GiB)", p.name, dev, p.major, p.minor,
                  p.multiProcessorCount, double(p.totalGlobalMem) / (1 << 30));
    return text;
  }
  bool host_memory() const override { return false; }

  void* alloc(size_t bytes) override {
    if (bytes == 0) return nullptr;
    const Hold hold(g_one_thread);
    use_device();
    void* p = nullptr;
    const cudaError_t e = cudaMalloc(&p, bytes);
    if (e != cudaSuccess) {
      char size[32];
      std::snprintf(size, sizeof size, "%.1f MiB", double(bytes) / double(1 << 20));
      throw Error(std::string("CUDA: cannot allocate ") + size + " on the device: " + cudaGetErrorString(e));
    }
    sizes_[p] = bytes;
    cuda::count_device_bytes(int64_t(bytes));
    check(int(cudaMemset(p, 0, bytes)), "cudaMemset");
    return p;
  }
  void release(void* p) override {
    if (!p) return;
    const Hold hold(g_one_thread);
    // Never throws (called from destructors). cudaFree only *may* wait for the work that
    // could still read p (the runtime API's documentation): wait first.
    if (select_device() != cudaSuccess || cudaDeviceSynchronize() != cudaSuccess) cudaGetLastError();
    cudaFree(p);
    const auto it = sizes_.find(p);
    if (it == sizes_.end()) return;
    cuda::count_device_bytes(-int64_t(it->second));
    sizes_.erase(it);
  }
  size_t peak_bytes() const override {
    const Hold hold(g_one_thread);
    return cuda::peak_device_bytes();
  }
  size_t bytes_in_use() const override {
    const Hold hold(g_one_thread);
    return cuda::live_device_bytes();
  }
  // bf16: every product through the tensor cores (gemm.cu), the causal mixing's too,
  // and a training arena's U and F held in bf16 (block.h).
  void set_precision(Precision p) override {
    const Hold hold(g_one_thread);
    cuda::set_bf16_products(p == Precision::bf16);
    cuda::warp_columns();  // a bad GMLP_CUDA_LN_WARP_COLUMNS fails here, not in a step
    cuda::spatial_combine_on();  // and a bad GMLP_CUDA_SPATIAL_COMBINE
    bf16_ = p == Precision::bf16;
  }
  bool stores_bf16() const override { return bf16_; }
  int attention_rows_at_once(int B) const override { return B; }
  void upload(void* dst, const void* src, size_t bytes) override {
    const Entry entry("upload");
    if (bytes) check(int(cudaMemcpy(dst, src, bytes, cudaMemcpyHostToDevice)), "upload");
  }
  void download(void* dst, const void* src, size_t bytes) override {
    const Entry entry("download");
    if (bytes) check(int(cudaMemcpy(dst, src, bytes, cudaMemcpyDeviceToHost)), "download");
  }
  void copy(void* dst, const void* src, size_t bytes) override {
    const Entry entry("copy");
    if (bytes && dst != src) check(int(cudaMemcpy(dst, src, bytes, cudaMemcpyDeviceToDevice)), "device copy");
  }
  void zero(void* p, size_t bytes) override {
    const Entry entry("zero");
    if (bytes) check(int(cudaMemset(p, 0, bytes)), "cudaMemset");
  }
  void synchronize() override {
    const Hold hold(g_one_thread);
    use_device();
    check(int(cudaDeviceSynchronize()), "synchronize");
  }

  void* alloc_host(size_t bytes) override {
    if (!bytes) return nullptr;
    const Hold hold(g_one_thread);
    use_device();
    void* p = nullptr;
    const cudaError_t e = cudaMallocHost(&p, bytes);
    if (e != cudaSuccess) {
      cudaGetLastError();
      throw Error("CUDA: cannot allocate " + std::to_string(bytes >> 20) +
                  " MiB of page-locked host memory: " + cudaGetErrorString(e));
    }
    return p;
  }
  void release_host(void* p) override {
    if (!p) return;
    const Hold hold(g_one_thread);
    // Never throws (called from destructors); an upload from p may still be queued.
    if (select_device() != cudaSuccess || cudaDeviceSynchronize() != cudaSuccess) cudaGetLastError();
    cudaFreeHost(p);
  }
  // The uploads beside go on a stream of their own that waits for nothing (non-blocking:
  // the legacy stream's work neither waits for it nor makes it wait), so the copy engine
  // takes them while the kernels run; one event, recorded behind the latest, stands for
  // them all (a stream runs its copies in order). The two flags are the process's, as the
  // legacy stream is: when a thread's await finds nothing unawaited, another thread's
  // await came after its latest upload and already made the one stream wait for it (and
  // likewise a finish for the host).
  void upload_beside(void* dst, const void* src, size_t bytes) override {
    if (!bytes) return;
    const Hold hold(g_one_thread);
    use_device();
    if (!copies_) {
      check(int(cudaStreamCreateWithFlags(&copies_, cudaStreamNonBlocking)), "cudaStreamCreate (uploads)");
      check(int(cudaEventCreateWithFlags(&uploaded_, cudaEventDisableTiming)), "cudaEventCreate (uploads)");
    }
    check(int(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, copies_)), "upload beside");
    check(int(cudaEventRecord(uploaded_, copies_)), "cudaEventRecord (uploads)");
    unawaited_ = unfinished_ = true;
  }
  void await_uploads() override {
    const Hold hold(g_one_thread);
    if (!unawaited_) return;
    use_device();
    check(int(cudaStreamWaitEvent(cudaStreamLegacy, uploaded_, 0)), "cudaStreamWaitEvent (uploads)");
    unawaited_ = false;
  }
  void finish_uploads() override { host_waits(uploaded_, unfinished_, "waiting for the uploads"); }
  // In line: on the legacy stream, behind one event as the uploads beside are (and their
  // flag the process's, by the same argument).
  void upload_queued(void* dst, const void* src, size_t bytes) override {
    const Entry entry("upload_queued");
    if (!bytes) return;
    if (!queued_) check(int(cudaEventCreateWithFlags(&queued_, cudaEventDisableTiming)), "cudaEventCreate (queued)");
    check(int(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, cudaStreamLegacy)), "upload in line");
    check(int(cudaEventRecord(queued_, cudaStreamLegacy)), "cudaEventRecord (queued)");
    queued_unfinished_ = true;
  }
  void finish_queued_uploads() override {
    host_waits(queued_, queued_unfinished_, "waiting for the uploads in line");
  }
  // Likewise behind an event of their own: waiting for it leaves the work queued after
  // the read-back running.
  void download_queued(void* dst, const void* src, size_t bytes) override {
    const Entry entry("download_queued");
    if (!bytes) return;
    if (!downloaded_)
      check(int(cudaEventCreateWithFlags(&downloaded_, cudaEventDisableTiming)), "cudaEventCreate (read-backs)");
    check(int(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, cudaStreamLegacy)), "read-back in line");
    check(int(cudaEventRecord(downloaded_, cudaStreamLegacy)), "cudaEventRecord (read-backs)");
    downloads_unfinished_ = true;
  }
  void finish_queued_downloads() override {
    host_waits(downloaded_, downloads_unfinished_, "waiting for the read-backs in line");
  }
  void profile_ops(bool on) override {
    const Hold hold(g_one_thread);
    cuda::profile_ops(on);
  }

  void gemm(bool ta, bool tb, int M, int N, int K, float alpha, const float* A, int lda, const float* B, int ldb,
            float beta, float* C, int ldc) override {
    const Entry entry("gemm");
    cuda::gemm(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
  }
  void gemm_bf16(bool ta, bool tb, int M, int N, int K, float alpha, const uint16_t* A, int lda, const uint16_t* B,
                 int ldb, float beta, float* C, int ldc) override {
    const Entry entry("gemm_bf16");
    cuda::gemm(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
  }
  void gemm_bf16(bool ta, bool tb, int M, int N, int K, const uint16_t* A, int lda, const uint16_t* B, int ldb,
                 uint16_t* C, int ldc) override {
    const Entry entry("gemm_bf16");
    cuda::gemm(ta, tb, M, N, K, 1.f, A, lda, B, ldb, 0.f, C, ldc);
  }
  void to_bf16(const float* x, size_t n, uint16_t* y) override {
    const Entry entry("to_bf16");
    cuda::to_bf16(x, n, y);
  }
  void spatial_w_bf16_many(const float* const* W, int layers, int ldw, int64_t head_stride, int heads, int T,
                           bool causal, uint16_t* out, int64_t layer_stride) override {
    const Entry entry("spatial_w_bf16_many");
    cuda::spatial_w_bf16_many(W, layers, ldw, head_stride, heads, T, causal, out, layer_stride);
  }
  void to_bf16_many(const ops::Bf16Copy* copies, int count) override {
    const Entry entry("to_bf16");
    cuda::to_bf16_many(copies, count);
  }
  void to_bf16_summing_columns(const float* x, int M, int N, uint16_t* y, float* sums, const float* row_scale,
                               int B) override {
    const Entry entry("to_bf16_summing_columns");
    cuda::to_bf16_summing_columns(x, M, N, y, sums, row_scale, B);
  }
  void linear_forward_bf16(const uint16_t* x, int M, int in, const uint16_t* W, const float* b, int out,
                           float* y) override {
    const Entry entry("linear_forward");
    cuda::linear_forward_bf16(x, M, in, W, b, out, y);
  }
  void linear_residual_bf16(const uint16_t* x, int M, int in, const uint16_t* W, const float* b, int out,
                            const float* r, float* y) override {
    const Entry entry("linear_residual");
    cuda::linear_residual_bf16(x, M, in, W, b, out, r, y);
  }
  void linear_backward_bf16(const uint16_t* dy16, const float* dy, const uint16_t* x, int M, int in,
                            const uint16_t* W, int out, float* dx, bool acc, float* dW, float* db) override {
    const Entry entry("linear_backward");
    cuda::linear_backward_bf16(dy16, dy, x, M, in, W, out, dx, acc, dW, db);
  }
  void layernorm_forward_bf16(const float* x, int ldx, int M, int C, const float* w, const float* b, float eps,
                              float* y, uint16_t* y16, int ldy, float* mean, float* rstd) override {
    const Entry entry("layernorm_forward");
    cuda::layernorm_forward_bf16(x, ldx, M, C, w, b, eps, y, y16, ldy, mean, rstd);
  }
  void residual_keep_layernorm_bf16(const float* x, const float* keep, const float* h, int M, int B, int d, float* out,
                                    const float* w, const float* b, float eps, uint16_t* y16, float* mean,
                                    float* rstd) override {
    const Entry entry("residual_keep_layernorm");
    cuda::residual_keep_layernorm_bf16(x, keep, h, M, B, d, out, w, b, eps, y16, mean, rstd);
  }
  void layernorm_apply_bf16(const float* x, int ldx, int M, int C, const float* w, const float* b, const float* mean,
                            const float* rstd, float* y, uint16_t* y16, int ldy) override {
    const Entry entry("layernorm_apply");
    cuda::layernorm_apply_bf16(x, ldx, M, C, w, b, mean, rstd, y, y16, ldy);
  }
  void linear_forward(const float* x, int M, int in, const float* W, const float* b, int out, float* y) override {
    const Entry entry("linear_forward");
    cuda::linear_forward(x, M, in, W, b, out, y);
  }
  void linear_backward(const float* dy, const float* x, int M, int in, const float* W, int out, float* dx, bool acc,
                       float* dW, float* db) override {
    const Entry entry("linear_backward");
    cuda::linear_backward(dy, x, M, in, W, out, dx, acc, dW, db);
  }
  void layernorm_forward(const float* x, int ldx, int M, int C, const float* w, const float* b, float eps, float* y,
                         int ldy, float* mean, float* rstd) override {
    const Entry entry("layernorm_forward");
    cuda::layernorm_forward(x, ldx, M, C, w, b, eps, y, ldy, mean, rstd);
  }
  void layernorm_apply(const float* x, int ldx, int M, int C, const float* w, const float* b, const float* mean,
                       const float* rstd, float* y, int ldy) override {
    const Entry entry("layernorm_apply");
    cuda::layernorm_apply(x, ldx, M, C, w, b, mean, rstd, y, ldy);
  }
  void layernorm_backward(const float* dy, int lddy, const float* x, int ldx, const float* mean, const float* rstd,
                          const float* w, int M, int C, float* dx, int lddx, bool acc, float* dw,
                          float* db) override {
    const Entry entry("layernorm_backward");
    cuda::layernorm_backward(dy, lddy, x, ldx, mean, rstd, w, M, C, dx, lddx, acc, dw, db);
  }
  void gelu_forward(const float* x, float* y, int64_t n, bool t) override {
    const Entry entry("gelu_forward");
    cuda::gelu_forward(x, y, n, t);
  }
  void bias_gelu_forward(float* u, const float* b, int M, int n, float* y, bool t) override {
    const Entry entry("bias_gelu_forward");
    cuda::bias_gelu_forward(u, b, M, n, y, t);
  }
  void gelu_backward(const float* x, const float* dy, float* dx, int64_t n, bool t) override {
    const Entry entry("gelu_backward");
    cuda::gelu_backward(x, dy, dx, n, t);
  }
  void toeplitz_materialize(const float* w, int n, bool causal, int T, float* W) override {
    const Entry entry("toeplitz_materialize");
    cuda::toeplitz_materialize(w, n, causal, T, W);
  }
  void toeplitz_fold(const float* dW, int T, int n, bool causal, float* dw) override {
    const Entry entry("toeplitz_fold");
    cuda::toeplitz_fold(dW, T, n, causal, dw);
  }
  void sgu_forward(const ops::SguParams& p, const float* Z, int T, int B, int f, float* S, float* gmean,
                   float* grstd, float* F, float* G, const float* extra) override {
    const Entry entry("sgu_forward");
    cuda::sgu_forward(p, Z, T, B, f, S, gmean, grstd, F, G, extra);
  }
  void sgu_combine(Sgu kind, const float* Z, int ldz, const float* F, int M, int g, float* S) override {
    const Entry entry("sgu_combine");
    cuda::sgu_combine(kind, Z, ldz, F, M, g, S);
  }
  void sgu_backward_gate(const ops::SguParams& p, const float* dS, const float* Z, int T, int B, int f,
                         const float* F, float* S, float* dF, float* dZ) override {
    const Entry entry("sgu_backward_gate");
    cuda::sgu_backward_gate(p, dS, Z, T, B, f, F, S, dF, dZ);
  }
  void sgu_backward_mix(const ops::SguParams& p, const ops::SguGrads& g, const float* dS, const float* Z, int T,
                        int B, int f, const float* gmean, const float* grstd, const float* F, float* dZ, float* G,
                        float* dF, float* dG) override {
    const Entry entry("sgu_backward_mix");
    cuda::sgu_backward_mix(p, g, dS, Z, T, B, f, gmean, grstd, F, dZ, G, dF, dG);
  }
  void tiny_attention_forward(const ops::AttnParams& p, const float* H, int T, int B, float* qkv, float* P, float* O,
                              float* A) override {
    const Entry entry("tiny_attention_forward");
    cuda::tiny_attention_forward(p, H, T, B, qkv, P, O, A);
  }
  void tiny_attention_backward(const ops::AttnParams& p, const ops::AttnGrads& g, const float* dA, const float* H,
                               int T, int B, const float* qkv, const float* P, const float* O, float* dH, float* dO,
                               float* dP, float* dqkv) override {
    const Entry entry("tiny_attention_backward");
    cuda::tiny_attention_backward(p, g, dA, H, T, B, qkv, P, O, dH, dO, dP, dqkv);
  }
  void extract_patches(ops::Pixels images, int B, int C, int Hi, int Wi, int ph, int pw, float* out) override {
    const Entry entry("extract_patches");
    cuda::extract_patches(images, B, C, Hi, Wi, ph, pw, out);
  }
  void extract_patches_bf16(ops::Pixels images, int B, int C, int Hi, int Wi, int ph, int pw, uint16_t* out) override {
    const Entry entry("extract_patches");
    cuda::extract_patches(images, B, C, Hi, Wi, ph, pw, out);
  }
  void embedding_forward(const float* E, int d, const int32_t* tokens, int M, int B, const float* pe,
                         float* x) override {
    const Entry entry("embedding_forward");
    cuda::embedding_forward(E, d, tokens, M, B, pe, x);
  }
  void embedding_backward(const float* dx, int d, const int32_t* tokens, int M, int V, float* dE) override {
    const Entry entry("embedding_backward");
    cuda::embedding_backward(dx, d, tokens, M, V, dE);
  }
  void cross_entropy(const float* logits, int M, int V, const int32_t* targets, float* dlogits, double* loss,
                     int64_t mean_over, bool add, const ops::SoftTargets& soft) override {
    const Entry entry("cross_entropy");
    cuda::cross_entropy(logits, M, V, targets, dlogits, loss, mean_over, add, soft);
  }
  void residual_bias(const float* x, const float* b, int M, int d, float* out) override {
    const Entry entry("residual_bias");
    cuda::residual_bias(x, b, M, d, out);
  }
  void residual_keep(const float* x, const float* keep, const float* h, int M, int B, int d, float* out) override {
    const Entry entry("residual_keep");
    cuda::residual_keep(x, keep, h, M, B, d, out);
  }
  void scale_rows(const float* keep, const float* dx, int M, int B, int d, float* out) override {
    const Entry entry("scale_rows");
    cuda::scale_rows(keep, dx, M, B, d, out);
  }
  void residual_dropout(const float* x, const float* h, const float* keep, const ops::DropMask& mask, int M, int B,
                        int d, float* out) override {
    const Entry entry("residual_dropout");
    cuda::residual_dropout(x, h, keep, mask, M, B, d, out);
  }
  void residual_dropout_backward(const float* dout, const float* keep, const ops::DropMask& mask, int M, int B, int d,
                                 float* dh) override {
    const Entry entry("residual_dropout_backward");
    cuda::residual_dropout_backward(dout, keep, mask, M, B, d, dh);
  }
  void dropout_apply(const float* x, const ops::DropMask& mask, int B, int d, float* y) override {
    const Entry entry("dropout_apply");
    cuda::dropout_apply(x, mask, B, d, y);
  }
  void mean_pool_forward(const float* h, int T, int B, int d, const int32_t* lengths, float* pooled) override {
    const Entry entry("mean_pool_forward");
    cuda::mean_pool_forward(h, T, B, d, lengths, pooled);
  }
  void mean_pool_backward(const float* dp, int T, int B, int d, const int32_t* lengths, float* dh) override {
    const Entry entry("mean_pool_backward");
    cuda::mean_pool_backward(dp, T, B, d, lengths, dh);
  }
  void gather_rows(const float* src, const int32_t* rows, int K, int d, float* dst) override {
    const Entry entry("gather_rows");
    cuda::gather_rows(src, rows, K, d, dst);
  }
  void scatter_rows(const float* src, const int32_t* rows, int K, int M, int d, float* dst) override {
    const Entry entry("scatter_rows");
    cuda::scatter_rows(src, rows, K, M, d, dst);
  }
  void decode_embed(const float* E, int d, const int32_t* tokens, const int32_t* pos, int R, const float* pe,
                    float* x) override {
    const Entry entry("decode_embed");
    cuda::decode_embed(E, d, tokens, pos, R, pe, x);
  }
  void decode_linear(const float* W, int out, int in, const float* X, int R, const float* b, float* Y,
                     bool accumulate) override {
    const Entry entry("decode_linear");
    cuda::decode_linear(W, out, in, X, R, b, Y, accumulate);
  }
  void decode_layernorm(const float* x, int ldx, int R, int C, const float* w, const float* b, float eps, float* y,
                        int ldy, const int32_t* rows) override {
    const Entry entry("decode_layernorm");
    cuda::decode_layernorm(x, ldx, R, C, w, b, eps, y, ldy, rows);
  }
  void decode_mix(const float* G, int n, int g, int heads, const float* W, int64_t wsz, bool toeplitz,
                  const float* bias, const int32_t* stream, const int32_t* pos, int R, float* F) override {
    const Entry entry("decode_mix");
    cuda::decode_mix(G, n, g, heads, W, wsz, toeplitz, bias, stream, pos, R, F);
  }
  void decode_attention(const ops::AttnParams& p, const float* h, const int32_t* stream, const int32_t* pos, int R,
                        int n, float* qkv, float* P, float* O, float* A, float* F) override {
    const Entry entry("decode_attention");
    cuda::decode_attention(p, h, stream, pos, R, n, qkv, P, O, A, F);
  }
  void adamw_update(float* p, const float* g, float* m, float* v, size_t n, const ops::AdamWStep& s) override {
    const Entry entry("adamw_update");
    cuda::adamw_update(p, g, m, v, n, s);
  }
  void sum_squares(const float* x, size_t n, double* sum_squares) override {
    const Entry entry("sum_squares");
    cuda::sum_squares(x, n, sum_squares);
  }
  void clip_scale(float* x, size_t n, const double* sum_squares, float max_norm) override {
    const Entry entry("clip_scale");
    cuda::clip_scale(x, n, sum_squares, max_norm);
  }
  void scale(float* x, size_t n, float c) override {
    const Entry entry("scale");
    cuda::scale(x, n, c);
  }
  void ema_update(float* avg, const float* x, size_t n, float decay, float rest) override {
    const Entry entry("ema_update");
    cuda::ema_update(avg, x, n, decay, rest);
  }

 private:
  // The host waits for `event` where `pending` says copies behind it have not been waited for.
  void host_waits(cudaEvent_t event, bool& pending, const char* what) {
    const Hold hold(g_one_thread);
    if (!pending) return;
    use_device();
    check(int(cudaEventSynchronize(event)), what);
    pending = false;
  }
  std::unordered_map<void*, size_t> sizes_;  // what each allocation holds, for the count
  bool bf16_ = false;                        // the precision set last
  cudaStream_t copies_ = nullptr;            // the uploads beside, made on the first
  cudaEvent_t uploaded_ = nullptr;
  bool unawaited_ = false, unfinished_ = false;
  cudaEvent_t queued_ = nullptr;  // behind the latest upload in line
  bool queued_unfinished_ = false;
  cudaEvent_t downloaded_ = nullptr;  // behind the latest read-back in line
  bool downloads_unfinished_ = false;
};

}  // namespace

void cuda::count_device_bytes(int64_t delta) {
  g_live_bytes = size_t(int64_t(g_live_bytes) + delta);
  if (g_live_bytes > g_peak_bytes) g_peak_bytes = g_live_bytes;
}
size_t cuda::peak_device_bytes() { return g_peak_bytes; }
size_t cuda::live_device_bytes() { return g_live_bytes; }

}  // namespace gmlp

// The module's two entry points, looked up by name (src/backend/device.cpp).
// The device count; where the runtime fails, 0 and its error in err (cap bytes, terminated).
extern "C" __attribute__((visibility("default"))) int gmlp_cuda_device_count(char* err, size_t cap) {
  std::string error;
  const int n = gmlp::cuda_runtime_device_count(&error);
  if (err && cap) std::snprintf(err, cap, "%s", error.c_str());
  return n;
}

extern "C" __attribute__((visibility("default"))) gmlp::Backend* gmlp_cuda_backend() {
  static gmlp::CudaBackend* be = [] {
    // Before the first allocation or cuBLAS handle: they belong to the current device.
    const int n = gmlp::cuda_runtime_device_count();
    gmlp::g_device = n > 0 ? gmlp::local_rank() % n : 0;
    gmlp::use_device();
    gmlp::cuda::start_op_profile();
    return new gmlp::CudaBackend;  // lives until exit, like the device memory it hands out
  }();
  return be;
}
