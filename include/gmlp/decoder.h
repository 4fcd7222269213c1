#pragma once
// Incremental (cached) decoding for the causal gMLP LM, every variant of
// docs/variants.md.
//
// The causal SGU's output at position i depends only on the normalised gates at
// positions <= i, so each layer keeps those gate rows. A new token then costs one
// token's channel work plus, per layer and head k, F_i = b_k[i] + sum_{j<=i} W_k[i,j] g_j
// (W_k[i,j] = w_k[i-j] for Toeplitz W): a product of row i of W with the cached gates,
// instead of a forward over the whole window. aMLP layers also keep the tiny attention's
// q/k/v rows, so the new token attends to the cached keys and values. `sgu: none`
// blocks mix nothing and keep nothing.
#include <cstdint>
#include <memory>
#include <vector>

#include "gmlp/model.h"

namespace gmlp {

//
// A decoder holds one or more streams (independent contexts, each with its own caches).
// step() advances several streams by one token each at once: the channel projections
// then read each weight row once for all of them (a small matrix product instead of
// one matrix-vector product per stream), which is where batched generation gains.
// Every stream's arithmetic is that of a one-stream decoder, in the same order, so a
// stream's logits do not depend on which others run beside it (on the CPU; a device's
// matrix products may round differently with the number of rows).
//
// The decoder runs where its model lives: on a device, its caches and scratch are
// device memory, and a step copies only the token ids in and the logits out.
class Decoder {
 public:
  // Reads the model's weights (not copied): the model must outlive the decoder and not
  // change while it is used.
  explicit Decoder(const Model& model, int streams = 1);
  ~Decoder();
  Decoder(Decoder&&) noexcept;
  Decoder& operator=(Decoder&&) noexcept;
  // The configurations it handles: every causal LM (any sgu kind, heads, full or
  // Toeplitz W, aMLP). generate() recomputes the window for the others (there are none
  // among causal models today).
  static bool supports(const ModelConfig& c);

  int streams() const { return streams_; }
  void reset();                                                // every stream
  int length(int stream = 0) const { return len_.at(size_t(stream)); }  // tokens in its context (<= seq_len)
  // Runs a whole context of one stream at once (batched, like training) and fills its
  // caches; returns the logits [V] of its last token. 1 <= count <= seq_len; resets the
  // stream first.
  const float* prefill(const int32_t* tokens, int count, int stream = 0);
  // Appends one token to a one-stream decoder (length() < seq_len); returns its logits [V].
  const float* step(int32_t token);
  // Appends tokens[k] to stream which[k] for k < count (distinct streams, each shorter
  // than seq_len). Returns logits [streams, V]: row s is stream s's latest logits
  // (rows of streams not stepped keep what they had).
  const float* step(const int32_t* tokens, const int* which, int count);

 private:
  struct State;  // the caches and scratch, in the model's backend memory
  ModelConfig cfg_;
  int streams_ = 1;
  std::vector<int> len_;  // per stream
  std::unique_ptr<State> st_;
};

}  // namespace gmlp
