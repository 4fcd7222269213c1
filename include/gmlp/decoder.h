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
#include <vector>

#include "gmlp/model.h"

namespace gmlp {

class Decoder {
 public:
  // Reads the model's weights (not copied): the model must outlive the decoder and not
  // change while it is used.
  explicit Decoder(const Model& model);
  // The configurations it handles: every causal LM (any sgu kind, heads, full or
  // Toeplitz W, aMLP). generate() recomputes the window for the others (there are none
  // among causal models today).
  static bool supports(const ModelConfig& c);

  void reset();
  int length() const { return len_; }  // tokens in the context (<= seq_len)
  // Runs a whole context at once (batched, like training) and fills the caches;
  // returns the logits [V] of its last token. 1 <= count <= seq_len; resets first.
  const float* prefill(const int32_t* tokens, int count);
  // Appends one token (length() < seq_len) and returns its logits [V].
  const float* step(int32_t token);

 private:
  ModelConfig cfg_;
  ParamViews w_;
  std::vector<float> pe_;
  int g_ = 0, s_ = 0, goff_ = 0, gh_ = 0;  // gate channels, branch channels, gate offset in Z, per head
  std::vector<std::vector<float>> gates_;  // per layer [n, g]: the normalised gate rows (SGU models)
  std::vector<std::vector<float>> qkv_;    // per layer [n, 3 d_attn]: the attention's q|k|v rows (aMLP)
  int len_ = 0;
  // Scratch: prefill uses [n, ...] buffers, step uses their first row.
  std::vector<float> x_, h_, u_, z_, F_, S_, logits_;
  std::vector<float> gstats_;   // the gate LayerNorm's mean and rstd per row (unused after)
  std::vector<float> Wd_;       // Toeplitz prefill: dense [heads, T, T]; step: one row per head [heads, n]
  std::vector<float> P_, O_, A_;  // aMLP: probabilities [n, n], P.V [n, d_attn], attention output [n, g]
};

}  // namespace gmlp
