// y = x W^T + b on the device: the bias seeds y, then the GEMM adds (as linear.cpp).
#include "ops/bf16.h"
#include "ops/cuda/common.cuh"
#include "ops/fast_div.h"

namespace gmlp::cuda {
namespace {

// The partials as a matrix of chunks rows and K x N columns (col = k * N + c), summed
// down its columns in one chunk of rows (gridDim.y 1): a term that loads, then adds
// (column_sums_in_lanes: kRowBatch rows' loads in flight, added in the same order).
// Added as each was loaded, a thread's 64 chunks (512 over 8 lanes) went one load at a
// time: 6.7 µs a launch of 16 to 72 blocks, 123 launches a gMLP-S/16 step (H100); now
// kFinishLanes lanes a block (common.cuh), a thread's 32 of the gate's 1,024 chunks.
struct PartColumn {
  const float* part;
  int width;
  __device__ float load(int j, int col) const { return part[int64_t(j) * width + col]; }
  __device__ void apply(float v, int, int, float* s) const { s[0] += v; }
};
__global__ void GMLP_BOUNDS(kColTile * kFinishLanes, 1)
    finish_column_sums_k(const float* part, int chunks, int K, int N, float* o0, float* o1, float* o2) {
  const int width = K * N;
  column_sums_in_lanes<1, kFinishLanes>(
      chunks, width, chunks, PartColumn{part, width},
      [&](int, int col, float t) {
        const int k = col / N;
        (k == 0 ? o0 : k == 1 ? o1 : o2)[col - k * N] += t;
      });
}

}  // namespace

void finish_column_sums(const float* part, int chunks, int K, int N, float* o0, float* o1, float* o2) {
  GMLP_LAUNCH(finish_column_sums_k, blocks_for(int64_t(K) * N, kColTile), column_sum_block(kFinishLanes))(
      part, chunks, K, N, o0, o1, o2);
}

namespace {

__global__ void seed_rows(float* y, const float* b, int M, int out) {
  const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= int64_t(M) * out) return;
  y[i] = b ? b[i % out] : 0.f;
}

// out[c] += sum over rows of x[r, c] (floats, or bf16 bits widened): partial sums per
// chunk of rows, then the chunks' sums (common.cuh). Where y16 is given, x is
// rounded into it as it is read (rows ld apart too): dY for the bf16 products, its
// float sums the out-projection's bias gradient, in one pass over it. Where row_scale
// is given, row r is read times row_scale[r % B] (stochastic depth's keep[b]). A term
// that loads, then applies, as PartColumn above.
template <typename T>
struct ColumnOf {
  const T* x;
  int ld;
  uint16_t* y16;
  const float* row_scale = nullptr;
  ops::FastDiv B;
  __device__ T load(int r, int c) const { return x[int64_t(r) * ld + c]; }
  __device__ void apply(T held, int r, int c, float* s) const {
    float v = value(held);
    if (row_scale) v = row_scale[B.mod(uint32_t(r))] * v;
    if (y16) y16[int64_t(r) * ld + c] = ops::to_bf16(v);
    s[0] += v;
  }
};
template <typename T>
__global__ void colsum_partial(ColumnOf<T> col, int M, int N, int rows_per, float* part, ColumnFinish out) {
  column_sums_finished<1>(M, N, rows_per, col, part, out);
}

template <typename T>
void colsum_add_as(const T* x, int M, int N, int ld, float* out, uint16_t* y16 = nullptr,
                   const float* row_scale = nullptr, int B = 1) {
  if (M <= 0 || N <= 0) return;
  const int rows_per = rows_per_chunk(M), chunks = (M + rows_per - 1) / rows_per;
  float* part = static_cast<float*>(scratch(sizeof(float) * size_t(chunks) * N));
  const ColumnOf<T> col{x, ld, y16, row_scale, ops::FastDiv(uint32_t(B))};
  const dim3 grid = column_sum_grid(N, chunks);
  GMLP_LAUNCH(colsum_partial, grid, column_sum_block())(col, M, N, rows_per, part, column_finish(int(grid.x), out));
  check_launch("colsum");
}

}  // namespace

void colsum_add(const float* x, int M, int N, int ld, float* out) { colsum_add_as(x, M, N, ld, out); }
void colsum_add(const uint16_t* x, int M, int N, int ld, float* out) { colsum_add_as(x, M, N, ld, out); }
void to_bf16_summing_columns(const float* x, int M, int N, uint16_t* y, float* sums, const float* row_scale,
                             int B) {
  colsum_add_as(x, M, N, N, sums, y, row_scale, B);
}

namespace {
// The ops over float or bf16 operands (gemm's overloads).
template <typename T>
void linear_forward_as(const T* x, int M, int in, const T* W, const float* b, int out, float* y) {
  GMLP_LAUNCH(seed_rows, blocks_for(int64_t(M) * out), kThreads)(y, b, M, out);
  check_launch("linear bias");
  gemm(false, true, M, out, in, 1.f, x, in, W, in, 1.f, y, out);
}

template <typename T>
void linear_backward_as(const T* dy, const float* dyf, const T* x, int M, int in, const T* W, int out, float* dx,
                        bool accumulate_dx, float* dW, float* db) {
  if (dx) gemm(false, false, M, in, out, 1.f, dy, out, W, in, accumulate_dx ? 1.f : 0.f, dx, in);
  gemm(true, false, out, in, M, 1.f, dy, out, x, in, 1.f, dW, in);
  if (db) colsum_add(dyf, M, out, out, db);
}
}  // namespace

void linear_forward(const float* x, int M, int in, const float* W, const float* b, int out, float* y) {
  linear_forward_as(x, M, in, W, b, out, y);
}
// Over bf16 operands the bias goes into the product's epilogue where cuBLASLt can:
// no pass seeds y.
void linear_forward_bf16(const uint16_t* x, int M, int in, const uint16_t* W, const float* b, int out, float* y) {
  if (!lt_linear_bf16(x, M, in, W, b, out, nullptr, y)) linear_forward_as(x, M, in, W, b, out, y);
}
void linear_residual_bf16(const uint16_t* x, int M, int in, const uint16_t* W, const float* b, int out,
                          const float* r, float* y) {
  if (lt_linear_bf16(x, M, in, W, b, out, r, y)) return;
  residual_bias(r, b, M, out, y);  // y = r + b, then the product adds
  gemm(false, true, M, out, in, 1.f, x, in, W, in, 1.f, y, out);
}

void linear_backward(const float* dy, const float* x, int M, int in, const float* W, int out, float* dx,
                     bool accumulate_dx, float* dW, float* db) {
  linear_backward_as(dy, dy, x, M, in, W, out, dx, accumulate_dx, dW, db);
}
void linear_backward_bf16(const uint16_t* dy16, const float* dy, const uint16_t* x, int M, int in, const uint16_t* W,
                          int out, float* dx, bool accumulate_dx, float* dW, float* db) {
  linear_backward_as(dy16, dy, x, M, in, W, out, dx, accumulate_dx, dW, db);
}

}  // namespace gmlp::cuda
