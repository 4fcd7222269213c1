#pragma once
// Test-only oracles: straightforward forms of fast ops, which the tests hold the fast
// paths against. Not part of the library.
#include <cstdint>
#include <vector>

#include "ops/dropout_mask.h"

namespace gmlp::test {

// A dropout mask's values [T, B, d] (sequence-major, as the ops read them), through the
// op that applies it: 0 + 1 * mask * 1.
std::vector<float> materialised(const ops::DropMask& m, int B, int T, int d);

// G [T, cols] (rows ld apart) transposed: Gt [cols, T], the form the spatial mix's
// backward takes G in (ops.h).
std::vector<float> transposed(const float* G, int T, int64_t cols, int64_t ld);

// GELU with libm's erf/exp/tanh.
void gelu_forward_reference(const float* x, float* y, int64_t n, bool tanh_approx);
void gelu_backward_reference(const float* x, const float* dy, float* dx, int64_t n, bool tanh_approx);

// The causal token mixing with its bias, through the fast op:
// F[i, :] = sum_{j <= i} W[i, j] G[j, :] + b[i] for i < T; G and F are [T, cols];
// W is read as W[:T, :T] with row stride ldw. The backward overwrites dG and
// accumulates dW (lower triangle) and db.
void spatial_causal_forward(const float* W, int ldw, const float* b, int T, int64_t cols, const float* G, float* F);
void spatial_causal_backward(const float* W, int ldw, int T, int64_t cols, const float* G, const float* dF,
                             float* dG, float* dW, float* db);
// The same as plain loops in double.
void spatial_causal_forward_naive(const float* W, int ldw, const float* b, int T, int64_t cols, const float* G,
                                  float* F);
void spatial_causal_backward_naive(const float* W, int ldw, int T, int64_t cols, const float* G, const float* dF,
                                   float* dG, float* dW, float* db);

}  // namespace gmlp::test
