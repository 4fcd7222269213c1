#pragma once
// Held-out evaluation of every task: language-model loss and bits per byte, masked-LM
// perplexity on a fixed masking, and classifiers' loss, top-1 and confusion matrix.
// With a communicator of several ranks, each rank scores every size()-th batch and
// the sums are reduced: every rank returns the whole set's figures (a classifier's
// `predictions` then hold this rank's batches only).
#include <cstdint>
#include <vector>

#include "gmlp/comm.h"
#include "gmlp/image.h"
#include "gmlp/labelled.h"
#include "gmlp/model.h"
#include "gmlp/tokenizer.h"

namespace gmlp {

struct EvalResult {
  double loss = 0.0;          // mean nats per token
  double bits_per_byte = 0.0;
  int64_t tokens = 0;
  int64_t bytes = 0;
};

// Mean loss and bits/byte of `model` over the validation windows of `tokens`
// (at most max_batches batches of `batch` windows; <= 0 means all).
EvalResult evaluate(Model& model, const Tokenizer& tok, const std::vector<int32_t>& tokens, int batch,
                    int64_t max_batches, Communicator* comm = nullptr);

// Masked-LM loss (nats per chosen token) and perplexity over windows of n tokens of
// `tokens`, masked with a fixed seed so every call corrupts the same positions.
struct MaskedLmEval {
  double loss = 0.0, perplexity = 0.0;
  int64_t masked = 0;  // chosen positions scored
};
MaskedLmEval evaluate_masked_lm(Model& model, const Tokenizer& tok, const std::vector<int32_t>& tokens, int batch,
                                int64_t max_batches, float mask_prob = 0.15f, Communicator* comm = nullptr);

struct ClassEval {
  int64_t examples = 0;
  double loss = 0.0;       // mean cross-entropy (nats)
  double accuracy = 0.0;   // top-1
  std::vector<int64_t> confusion;  // k x k, row = true class
  std::vector<int32_t> predictions;
};

// Texts are encoded, truncated to the model's window and padded per batch to their
// longest row.
ClassEval evaluate_texts(Model& model, const Tokenizer& tok, const LabelledSet& set, int batch,
                         Communicator* comm = nullptr);
// Images must already be normalised as the model expects (see vision_inputs).
ClassEval evaluate_images(Model& model, const ImageSet& set, int batch, Communicator* comm = nullptr);

}  // namespace gmlp
