// The spatial gating unit and its s(Z) ablations (docs/variants.md):
//   G = LayerNorm(gate), F = spatial(G) + b (+ extra), S = combine(Z, F)
// with gate = Z2 and S = Z1 * F for the split form, gate = Z for the others.
// Several heads mix their own channel groups with their own W and b; padded rows of
// a bidirectional batch are zeroed in G (the columns of W they would feed are masked).
#include <omp.h>

#include <algorithm>
#include <vector>

#include "gmlp/error.h"
#include "ops/fast_math.h"
#include "ops/layernorm_rows.h"
#include "ops/ops.h"
#include "ops/parallel.h"
#include "ops/prefetch.h"
#include "ops/reduce.h"

namespace gmlp::ops {
namespace {

struct Dims {
  int g, goff;  // gate channels and their offset inside Z
  int gh;       // channels per head
};
Dims dims(const SguParams& p, int f) {
  const int g = p.kind == Sgu::split ? f / 2 : f;
  return {g, p.kind == Sgu::split ? f / 2 : 0, g / p.heads};
}

// Zeroes rows t >= lengths[b] of X [T, B, C] (no-op without lengths).
void zero_padding(const int32_t* lengths, int T, int B, int C, float* X) {
  if (!lengths) return;
#pragma omp parallel for schedule(static)
  for (int t = 0; t < T; ++t)
    for (int b = 0; b < B; ++b)
      if (t >= lengths[b]) std::fill(X + (int64_t(t) * B + b) * C, X + (int64_t(t) * B + b + 1) * C, 0.f);
}

// Runs fn(W_k, dW_k (or null), column offset) for every head k and, with several heads,
// every batch row b: the head's [T, gh] slice of one row is a strided matrix.
template <typename Fn>
void for_each_slice(const SguParams& p, float* dW, int B, const Dims& d, Fn fn) {
  if (p.heads == 1) {
    fn(p.W, dW, 0, B * d.g);
    return;
  }
  for (int k = 0; k < p.heads; ++k)
    for (int b = 0; b < B; ++b)
      fn(p.W + k * p.w_head_stride, dW ? dW + k * p.w_head_stride : nullptr, b * d.g + k * d.gh, d.gh);
}

// put(c, u[c] + b[c]) (or put(c, u[c]) without a bias) for the n values of a row, the
// row `ahead` floats on (the next row this thread reads) requested meanwhile. u + b
// rounds as the sum stored in U did when the forward added the bias in place: the same
// bits.
template <typename Put>
inline void row_values(const float* u, const float* b, int n, int64_t ahead, Put put) {
  if (b)
    row_ahead(n, u + ahead, [=](int c) { put(c, u[c] + b[c]); });
  else
    row_ahead(n, u + ahead, [=](int c) { put(c, u[c]); });
}

// n values of Z from channel off on of a row of what the op was given (ops.h's ZInput):
// the row itself, or U + bias, or GELU(U + bias) (the same function, so the same bits,
// as gelu.cpp's), computed into buf.
const float* z_of(const ZInput& zin, const float* row, int off, int n, float* buf, int64_t ahead) {
  const float *u = row + off, *b = zin.bias ? zin.bias + off : nullptr;
  if (!zin.gelu) {
    if (!b) return u;
    row_values(u, b, n, ahead, [=](int c, float v) { buf[c] = v; });
  } else if (zin.form == Gelu::tanh) {
    row_values(u, b, n, ahead, [=](int c, float v) { buf[c] = fast::gelu_tanh(v); });
  } else {
    row_values(u, b, n, ahead, [=](int c, float v) { buf[c] = fast::gelu_erf(v); });
  }
  return buf;
}

// Z = GELU(U + bias) and dZ/dU = GELU'(U + bias) over n values from channel off on of a
// row, into z and dzdu (an op given U).
void z_and_dz_du_of(const ZInput& zin, const float* row, int off, int n, float* z, float* dzdu, int64_t ahead) {
  const float *u = row + off, *b = zin.bias ? zin.bias + off : nullptr;
  if (zin.form == Gelu::tanh)
    row_values(u, b, n, ahead, [=](int c, float v) {
      const auto [y, dy] = fast::gelu_tanh_and_grad(v);
      z[c] = y;
      dzdu[c] = dy;
    });
  else
    row_values(u, b, n, ahead, [=](int c, float v) {
      const auto [y, dy] = fast::gelu_erf_and_grad(v);
      z[c] = y;
      dzdu[c] = dy;
    });
}

// A row buffer of this thread's, at least n floats. Asked for once a row (or a tile of
// rows): a plain array (static TLS, an offset from the thread pointer) up to 4096
// floats, since a thread_local vector's every access calls its TLS initialiser (tiny
// inference was 4% slower with it).
float* row_buffer(int slot, int n) {
  constexpr int kRow = 4096;
  alignas(64) thread_local float rows[2][kRow];
  if (n <= kRow) return rows[slot];
  thread_local std::vector<float> wide[2];
  if (wide[slot].size() < size_t(n)) wide[slot].resize(size_t(n));
  return wide[slot].data();
}

// dL/d(U's bias) over g of U's columns from off on (ZInput::dbias): each thread adds the
// dU rows it writes into a slice of its own, and the slices are added in thread order
// at the end (the bits depend on the thread count only). Summed as the rows are written,
// dU is not read again for them: linear_backward's column sums over the annotated
// model's dU took 1.9 ms a layer. Without a dbias the sums go nowhere.
class BiasGrad {
 public:
  BiasGrad(float* dbias, int off, int g)
      : dbias_(dbias), off_(off), g_(g), partial_(size_t(omp_get_max_threads()) * g, 0.f) {}
  float* mine() { return partial_.data() + size_t(omp_get_thread_num()) * g_; }
  ~BiasGrad() {
    if (!dbias_) return;
    for (size_t t = 0; t < partial_.size() / size_t(g_); ++t)
      for (int c = 0; c < g_; ++c) dbias_[off_ + c] += partial_[t * g_ + c];
  }
  BiasGrad(const BiasGrad&) = delete;
  BiasGrad& operator=(const BiasGrad&) = delete;

 private:
  float* dbias_;
  int off_, g_;
  std::vector<float> partial_;
};

// G = LayerNorm(gate) rebuilt and written transposed, Gt[(b*g + c) * T + t] = G[t*B + b,
// c] (zero at padded rows), so that a head's slice of a batch row is Gt's rows from its
// column offset on, and the spatial weight gradient multiplies A·B (spatial.cpp). Each
// item is 16 positions of one sequence: their rows go into a tile, which is written out
// 16 floats (a cache line) per channel. This costs about 1 ms over writing G's rows for
// the annotated model (each layer's 8.4 M values), against 2.5-3 ms saved in its product.
void gate_transposed(const SguParams& p, const Dims& d, const float* Z, int T, int B, int f, const float* gmean,
                     const float* grstd, float* Gt) {
  constexpr int kTile = 16;
  const int blocks = (T + kTile - 1) / kTile;
#pragma omp parallel for schedule(static)
  for (int item = 0; item < B * blocks; ++item) {
    const int b = item / blocks, t0 = (item % blocks) * kTile, nt = std::min(kTile, T - t0);
    float* tile = row_buffer(1, kTile * d.g);  // slot 0 is z_of's, below
    for (int j = 0; j < nt; ++j) {
      const int t = t0 + j;
      const int64_t r = int64_t(t) * B + b;
      float* out = tile + size_t(j) * d.g;
      if (p.lengths && t >= p.lengths[b])
        std::fill(out, out + d.g, 0.f);
      else  // the next row this thread reads is the sequence's next position, B rows on
        layernorm_apply_row(z_of(p.z, Z + r * f, d.goff, d.g, row_buffer(0, d.g), int64_t(B) * f), d.g, p.norm_w,
                            p.norm_b, gmean[r], grstd[r], out);
    }
    float* gt = Gt + int64_t(b) * d.g * T + t0;
    const float* in = tile;
    if (nt == kTile) {  // a constant trip count: one loop for both took 0.3-0.5 ms a layer more
      for (int c = 0; c < d.g; ++c) {
#pragma omp simd
        for (int j = 0; j < kTile; ++j) gt[int64_t(c) * T + j] = in[j * d.g + c];
      }
    } else {
      for (int c = 0; c < d.g; ++c)
        for (int j = 0; j < nt; ++j) gt[int64_t(c) * T + j] = in[j * d.g + c];
    }
  }
}

}  // namespace

namespace {
// ops.h's Bf16Store is the CUDA backend's path; these ops keep U and F in float.
void floats_only(const SguParams& p) {
  require(!p.store.on(), "the CPU's SGU keeps U and F in float; bf16 storage is the CUDA backend's");
}
}  // namespace

void sgu_forward(const SguParams& p, const float* Z, int T, int B, int f, float* S, float* gmean, float* grstd,
                 float* F, float* G, const float* extra) {
  floats_only(p);
  const Dims d = dims(p, f);
  const int M = T * B, ld = B * d.g;
  // The gate's LayerNorm of Z (GELU(U + bias) when so given, never stored).
#pragma omp parallel for schedule(static)
  for (int r = 0; r < M; ++r)
    layernorm_row(z_of(p.z, Z + int64_t(r) * f, d.goff, d.g, row_buffer(0, d.g), f), d.g, p.norm_w, p.norm_b, p.eps,
                  G + int64_t(r) * d.g, gmean + r, grstd + r);
  zero_padding(p.lengths, T, B, d.g, G);
  // Rows are t-major, so G is a [T, B*g] matrix and one head's mixing is one product.
  for_each_slice(p, nullptr, B, d, [&](const float* W, float*, int off, int cols) {
    spatial_mix_forward(W, p.ldw, p.causal, T, cols, G + off, ld, F + off);
  });
#pragma omp parallel for schedule(static)
  for (int r = 0; r < M; ++r) {
    const int t = r / B, bi = std::min(t, p.n - 1);  // Toeplitz runs past n on the last bias
    const float* z = Z + int64_t(r) * f;
    float* fr = F + int64_t(r) * d.g;
    float* s = S + int64_t(r) * d.g;
    for (int k = 0; k < p.heads; ++k) {  // per head: one bias, no division per channel
      const float bk = p.bias[k * p.n + bi];
      float* fk = fr + k * d.gh;
      if (extra) {
        const float* ek = extra + int64_t(r) * d.g + k * d.gh;
#pragma omp simd
        for (int c = 0; c < d.gh; ++c) fk[c] += bk + ek[c];
      } else {
#pragma omp simd
        for (int c = 0; c < d.gh; ++c) fk[c] += bk;
      }
    }
    sgu_combine_row(p.kind, z_of(p.z, z, 0, d.g, row_buffer(0, d.g), f), fr, s, d.g);
  }
}

void sgu_combine(Sgu kind, const float* Z, int ldz, const float* F, int M, int g, float* S) {
  // A few rows (the cached decoder's) stay off the OpenMP runtime (parallel.h).
  parallel_for_if(M, int64_t(M) * g, kParallelValues, [&](int r) {
    sgu_combine_row(kind, Z + int64_t(r) * ldz, F + int64_t(r) * g, S + int64_t(r) * g, g);
  });
}

void sgu_backward_gate(const SguParams& p, const float* dS, const float* Z, int T, int B, int f, const float* F,
                       float* S, float* dF, float* dZ) {
  floats_only(p);
  const Dims d = dims(p, f);
  const int M = T * B;
  const bool split = p.kind == Sgu::split, mult = p.kind == Sgu::multiplicative;
  BiasGrad db(split ? p.z.dbias : nullptr, 0, d.g);  // dZ1's columns (the split form's)
#pragma omp parallel for schedule(static)
  for (int r = 0; r < M; ++r) {
    const float* u = Z + int64_t(r) * f;
    const float* fr = F + int64_t(r) * d.g;
    const float* ds = dS + int64_t(r) * d.g;
    float* dz = dZ + int64_t(r) * f;
    float* df = dF + int64_t(r) * d.g;
    float* sr = S ? S + int64_t(r) * d.g : nullptr;
    // Split and given U: GELU and GELU' of Z1 from one evaluation.
    float *zbuf = row_buffer(0, d.g), *dzdu = split && p.z.gelu ? row_buffer(1, d.g) : nullptr;
    if (dzdu) z_and_dz_du_of(p.z, u, 0, d.g, zbuf, dzdu, f);
    const float* z = dzdu ? zbuf : z_of(p.z, u, 0, d.g, zbuf, f);
    if (sr) sgu_combine_row(p.kind, z, fr, sr, d.g);
    // Split: Z1 is not the gate, so dZ1 is written here with dF. Each element of Z1 and
    // F is read before its place is written, so dZ may alias Z and dF may alias F.
    float* acc = db.mine();
    if (dzdu) {
#pragma omp simd
      for (int c = 0; c < d.g; ++c) {
        const float dsc = ds[c], du = dsc * fr[c] * dzdu[c];
        df[c] = dsc * z[c];
        dz[c] = du;
        acc[c] += du;
      }
    } else if (split) {
#pragma omp simd
      for (int c = 0; c < d.g; ++c) {
        const float dsc = ds[c], zc = z[c], du = dsc * fr[c];
        df[c] = dsc * zc;
        dz[c] = du;
        acc[c] += du;
      }
    } else if (mult) {
      for (int c = 0; c < d.g; ++c) df[c] = ds[c] * z[c];
    } else {
      for (int c = 0; c < d.g; ++c) df[c] = ds[c];
    }
  }
}

void sgu_backward(const SguParams& p, const SguGrads& g, const float* dS, const float* Z, int T, int B, int f,
                  const float* gmean, const float* grstd, const float* F, float* dZ, float* G, float* dF,
                  float* dG) {
  sgu_backward_gate(p, dS, Z, T, B, f, F, nullptr, dF, dZ);
  sgu_backward_mix(p, g, dS, Z, T, B, f, gmean, grstd, F, dZ, G, dF, dG);
}

void sgu_backward_mix(const SguParams& p, const SguGrads& g, const float* dS, const float* Z, int T, int B, int f,
                      const float* gmean, const float* grstd, const float* F, float* dZ, float* G, float* dF,
                      float* dG) {
  floats_only(p);
  const Dims d = dims(p, f);
  const int M = T * B, ld = B * d.g;
  const bool mult = p.kind == Sgu::multiplicative;
  // The normalised gate was not kept: recompute it from the gate (cheaper than storing
  // it), transposed into G's buffer (Gt [B*g, T]) for the spatial weight gradient.
  gate_transposed(p, d, Z, T, B, f, gmean, grstd, G);
  for_each_slice(p, g.W, B, d, [&](const float* W, float* dW, int off, int cols) {
    spatial_mix_backward(W, p.ldw, p.causal, T, cols, G + int64_t(off) * T, dF + off, ld, dG + off, dW);
  });
  zero_padding(p.lengths, T, B, d.g, dG);  // the mask's own derivative
  // Bias: per head and row, summed over a fixed order; rows past n share the last bias.
  std::vector<double> rows(size_t(T) * p.heads);
#pragma omp parallel for schedule(static)
  for (int t = 0; t < T; ++t)
    for (int b = 0; b < B; ++b) {
      const float* df = dF + (int64_t(t) * B + b) * d.g;
      for (int k = 0; k < p.heads; ++k)
        rows[size_t(t) * p.heads + k] += lane_sum<double>(d.gh, [df, k, &d](int c) { return df[k * d.gh + c]; });
    }
  for (int t = 0; t < T; ++t)
    for (int k = 0; k < p.heads; ++k) g.bias[k * p.n + std::min(t, p.n - 1)] += float(rows[size_t(t) * p.heads + k]);
  // LayerNorm backward into the gate's part of dZ; for the non-split forms (the gate is
  // all of Z) the direct path of S = Z + F or Z * F is added, and with U given the sum
  // is multiplied by GELU'(U). Each row of the gate is read whole (into this thread's
  // buffers) before its dZ is written, so dZ may alias Z.
  const bool direct = p.kind == Sgu::additive || mult;
  const auto gate_row = [&](int r, float* buf) {
    const float* row = Z + int64_t(r) * f;
    if (!p.z.gelu) return z_of(p.z, row, d.goff, d.g, buf, f);
    z_and_dz_du_of(p.z, row, d.goff, d.g, buf, row_buffer(1, d.g), f);
    return static_cast<const float*>(buf);
  };
  BiasGrad db(p.z.dbias, d.goff, d.g);  // the gate's columns of dZ, as they are stored
  if (!direct && p.z.gelu) {  // split (as the block runs it) and linear
    layernorm_backward_rows(dG, d.g, gmean, grstd, p.norm_w, M, d.g, g.norm_w, g.norm_b, gate_row, [&](int r) {
      return [dz = dZ + int64_t(r) * f + d.goff, q = row_buffer(1, d.g), acc = db.mine()](int c, float v) {
        const float du = v * q[c];
        dz[c] = du;
        acc[c] += du;
      };
    });
    return;
  }
  layernorm_backward_rows(dG, d.g, gmean, grstd, p.norm_w, M, d.g, g.norm_w, g.norm_b, gate_row, [&](int r) {
    return [=, dz = dZ + int64_t(r) * f + d.goff, q = p.z.gelu ? row_buffer(1, d.g) : nullptr,
            ds = dS + int64_t(r) * d.g, fr = F + int64_t(r) * d.g, acc = db.mine()](int c, float v) {
      if (direct) v += mult ? ds[c] * fr[c] : ds[c];
      const float du = q ? v * q[c] : v;
      dz[c] = du;
      acc[c] += du;
    };
  });
}

}  // namespace gmlp::ops
