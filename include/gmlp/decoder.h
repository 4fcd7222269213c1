#pragma once
// Incremental (cached) decoding for the causal gMLP LM.
//
// The causal SGU's output at position i depends only on the normalised gates at
// positions <= i, so each layer keeps those gate rows. A new token then costs one
// token's channel work plus, per layer, F_i = b_i + sum_{j<=i} W[i,j] g_j: a product of
// row i of W with the cached gates, instead of a forward over the whole window.
#include <cstdint>
#include <vector>

#include "gmlp/model.h"

namespace gmlp {

class Decoder {
 public:
  // Reads the model's weights (not copied): the model must outlive the decoder and not
  // change while it is used.
  explicit Decoder(const Model& model);

  void reset();
  int length() const { return len_; }  // tokens in the context (<= seq_len)
  // Runs a whole context at once (batched, like training) and fills the caches;
  // returns the logits [V] of its last token. 1 <= count <= seq_len; resets first.
  const float* prefill(const int32_t* tokens, int count);
  // Appends one token (length() < seq_len) and returns its logits [V].
  const float* step(int32_t token);

 private:
  const Model& model_;
  ModelConfig cfg_;
  ParamViews w_;
  std::vector<float> pe_;
  std::vector<std::vector<float>> gates_;  // per layer [n, dh]: the normalised gate rows
  int len_ = 0;
  // Scratch: prefill uses [n, ...] buffers, step uses their first row.
  std::vector<float> x_, h_, u_, z_, F_, S_, logits_;
  std::vector<float> gstats_;  // the gate LayerNorm's mean and rstd per row (unused after)
};

}  // namespace gmlp
