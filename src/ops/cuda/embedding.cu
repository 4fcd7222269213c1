// The inputs on the device: token embedding (with sinusoidal positions) and its
// backward, and images cut into patch rows (embedding.cpp and patch.cpp).
#include "ops/cuda/common.cuh"
#include "ops/fast_div.h"

namespace gmlp::cuda {
namespace {

__global__ void k_embed(const float* E, int d, const int32_t* tokens, int M, int B, const float* pe, float* x) {
  const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= int64_t(M) * d) return;
  const int64_t r = i / d;
  const int c = int(i % d);
  x[i] = E[int64_t(tokens[r]) * d + c] + (pe ? pe[(r / B) * d + c] : 0.f);
}

// The backward adds each row of dx into its token's row of dE, and tokens repeat. Atomic
// adds would sum a row's contributions in whatever order the blocks ran, so a run would
// not repeat its own last bits. Instead the rows are sorted by token, stably (a counting
// sort: ranks within chunks of rows, counts per chunk and token, their prefix sums), and
// each row of dE is summed over its rows in row order: the CPU op's order, so the CPU's
// bits, on every run. No atomics anywhere.
constexpr int kMaxChunk = 2048;  // rows ranked against each other in shared memory, at most

// How many rows a chunk ranks. Each row is compared with its chunk's earlier rows (and a
// token's first row with the later ones), so the work is about M times the chunk, in a
// block per chunk: the annotated LM's 8,192 rows in chunks of 2,048 took 84.5 µs in 4
// blocks on an H100, 2.4% of its step's device time (session 42's ncu). But the counts
// are chunks x V: the smallest chunk from 256 rows up whose counts stay within 2^21
// entries (8 MB). On the CUDA emulator within 2^14, so that its tests reach larger chunks.
int chunk_rows(int M, int V) {
#if defined(GMLP_CUDA_EMULATED)
  constexpr int64_t kCountBudget = int64_t(1) << 14;
#else
  constexpr int64_t kCountBudget = int64_t(1) << 21;
#endif
  int chunk = 256;
  while (chunk < kMaxChunk && int64_t((M + chunk - 1) / chunk) * V > kCountBudget) chunk *= 2;
  return chunk;
}

// Per chunk: each row's rank among the chunk's earlier rows of its token, and the first
// such row writes how many rows of its token the chunk holds (count [chunks, V], zeroed).
__global__ void k_rank_in_chunk(const int32_t* tokens, int M, int V, int chunk, int32_t* rank, int32_t* count) {
  __shared__ int32_t t[kMaxChunk];
  const int r0 = int(blockIdx.x) * chunk, n = min(chunk, M - r0);
  for (int i = threadIdx.x; i < n; i += blockDim.x) t[i] = tokens[r0 + i];
  __syncthreads();
  for (int i = threadIdx.x; i < n; i += blockDim.x) {
    const int32_t v = t[i];
    int before = 0;
    for (int j = 0; j < i; ++j) before += t[j] == v;
    rank[r0 + i] = before;
    if (before == 0) {
      int all = 1;
      for (int j = i + 1; j < n; ++j) all += t[j] == v;
      count[int64_t(blockIdx.x) * V + v] = all;
    }
  }
}

// Per token, down the chunks: each count becomes the token's rows in earlier chunks, and
// start[v] the token's rows in all.
__global__ void k_chunk_offsets(int chunks, int V, int32_t* count, int32_t* start) {
  const int v = int(blockIdx.x) * blockDim.x + threadIdx.x;
  if (v >= V) return;
  int32_t sum = 0;
  for (int c = 0; c < chunks; ++c) {
    const int32_t n = count[int64_t(c) * V + v];
    count[int64_t(c) * V + v] = sum;
    sum += n;
  }
  start[v] = sum;
}

// start[0, V) from the tokens' row counts to where each token's rows begin in the sorted
// order, start[V] = M: one block, each thread a run of tokens, thread 0 the runs' prefix.
__global__ void k_token_starts(int V, int32_t* start) {
  __shared__ int32_t run[1024];
  const int per = (V + int(blockDim.x) - 1) / int(blockDim.x), b = int(threadIdx.x) * per, e = min(V, b + per);
  int32_t sum = 0;
  for (int v = b; v < e; ++v) sum += start[v];
  run[threadIdx.x] = sum;
  __syncthreads();
  if (threadIdx.x == 0) {
    int32_t at = 0;
    for (unsigned i = 0; i < blockDim.x; ++i) {
      const int32_t n = run[i];
      run[i] = at;
      at += n;
    }
    start[V] = at;
  }
  __syncthreads();
  int32_t at = run[threadIdx.x];
  for (int v = b; v < e; ++v) {
    const int32_t n = start[v];
    start[v] = at;
    at += n;
  }
}

__global__ void k_sort_rows(const int32_t* tokens, int M, int V, int chunk, const int32_t* rank,
                            const int32_t* count, const int32_t* start, int32_t* order) {
  const int r = int(blockIdx.x) * blockDim.x + threadIdx.x;
  if (r >= M) return;
  const int32_t v = tokens[r];
  order[start[v] + count[int64_t(r / chunk) * V + v] + rank[r]] = r;
}

// A block per (token, 256 channels): the token's rows of dx added to its row of dE in
// row order; a token absent from the batch leaves its row alone.
__global__ void k_embed_backward(const float* dx, int d, const int32_t* start, const int32_t* order, float* dE) {
  const int v = int(blockIdx.x), c = int(blockIdx.y) * blockDim.x + threadIdx.x;
  const int32_t b = start[v], e = start[v + 1];
  if (b == e || c >= d) return;
  float* out = dE + int64_t(v) * d + c;
  float sum = *out;
  for (int32_t k = b; k < e; ++k) sum += dx[int64_t(order[k]) * d + c];
  *out = sum;
}

// Patch row t * B + b, entry e = (c, py, px): image b's channel c at the patch's pixel.
// A thread per entry, its rows in turn (columns_by_rows): the entry's pixel found once,
// each row's t and b by RowWalk's additions and the patch's place by a FastDiv multiply,
// where a thread per value divided a 64-bit index and then its parts, nine divisions a
// value copied. Into floats, or rounded into bf16 (under bf16 the patch embedding's
// products read them so: half the bytes written, and no rounding pass per product).
// From floats, or from bytes through the entry's channel's row of the table (TI uint8_t,
// ops::Pixels): a thread's channel is fixed, so its 256 values stay in L1.
template <typename TI, typename TO>
__global__ void k_patches(const TI* images, const float* lut, int B, int C, int Hi, int Wi, int ph, int pw, int n,
                          ops::FastDiv by_gw, TO* out) {
  const int P = C * ph * pw;
  const int e = column();
  if (e >= P) return;
  const int c = e / (ph * pw), py = (e / pw) % ph, px = e % pw;
  const TI* pixel = images + (int64_t(c) * Hi + py) * Wi + px;
  const float* table = lut ? lut + c * 256 : nullptr;
  for (RowWalk w(B); w.row < int64_t(n) * B; w.next()) {  // patch t = w.quot of image b = w.rem
    const uint32_t t = uint32_t(w.quot), gy = by_gw.div(t), gx = by_gw.mod(t);
    const TI p = pixel[w.rem * C * Hi * Wi + int64_t(gy * ph) * Wi + gx * pw];
    float v;
    if constexpr (std::is_same_v<TI, uint8_t>)
      v = table[p];
    else
      v = p;
    if constexpr (std::is_same_v<TO, uint16_t>)
      out[w.row * P + e] = ops::to_bf16(v);
    else
      out[w.row * P + e] = v;
  }
}

}  // namespace

void embedding_forward(const float* E, int d, const int32_t* tokens, int M, int B, const float* pe, float* x) {
  GMLP_LAUNCH(k_embed, blocks_for(int64_t(M) * d), kThreads)(E, d, tokens, M, B, pe, x);
  check_launch("embedding");
}

void embedding_backward(const float* dx, int d, const int32_t* tokens, int M, int V, float* dE) {
  if (M == 0 || d == 0) return;
  const int chunk = chunk_rows(M, V), chunks = (M + chunk - 1) / chunk;
  // The sort's integers, in the shared scratch (the op's inputs are arena or parameter
  // memory): count [chunks, V], start [V + 1], rank [M], order [M].
  const size_t n_count = size_t(chunks) * V;
  int32_t* count = static_cast<int32_t*>(scratch(sizeof(int32_t) * (n_count + size_t(V) + 1 + 2 * size_t(M))));
  int32_t *start = count + n_count, *rank = start + V + 1, *order = rank + M;
  check(int(cudaMemset(count, 0, sizeof(int32_t) * n_count)), "cudaMemset (embedding backward)");
  GMLP_LAUNCH(k_rank_in_chunk, chunks, kThreads)(tokens, M, V, chunk, rank, count);
  GMLP_LAUNCH(k_chunk_offsets, blocks_for(V), kThreads)(chunks, V, count, start);
  GMLP_LAUNCH(k_token_starts, 1, 1024)(V, start);
  GMLP_LAUNCH(k_sort_rows, blocks_for(M), kThreads)(tokens, M, V, chunk, rank, count, start, order);
  GMLP_LAUNCH(k_embed_backward, dim3(unsigned(V), blocks_for(d)), kThreads)(dx, d, start, order, dE);
  check_launch("embedding backward");
}

namespace {
template <typename TO>
void extract_patches_as(ops::Pixels images, int B, int C, int Hi, int Wi, int ph, int pw, TO* out) {
  const int n = (Hi / ph) * (Wi / pw);
  if (n <= 0 || B <= 0) return;
  const Launch l = columns_by_rows_batched(C * ph * pw, int64_t(n) * B);
  const ops::FastDiv by_gw(uint32_t(Wi / pw));
  if (images.bytes)
    GMLP_LAUNCH((k_patches<uint8_t, TO>), l.grid, l.block)(images.bytes, images.lut, B, C, Hi, Wi, ph, pw, n, by_gw, out);
  else
    GMLP_LAUNCH((k_patches<float, TO>), l.grid, l.block)(images.values, static_cast<const float*>(nullptr), B, C, Hi, Wi, ph, pw, n, by_gw, out);
  check_launch("patches");
}
}  // namespace

void extract_patches(ops::Pixels images, int B, int C, int Hi, int Wi, int ph, int pw, float* out) {
  extract_patches_as(images, B, C, Hi, Wi, ph, pw, out);
}
void extract_patches(ops::Pixels images, int B, int C, int Hi, int Wi, int ph, int pw, uint16_t* out) {
  extract_patches_as(images, B, C, Hi, Wi, ph, pw, out);
}

}  // namespace gmlp::cuda
