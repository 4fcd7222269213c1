#pragma once
// Using classifiers: sentence classification (task "classify") and image
// classification (task "vision"): padded text batches, class probabilities, class
// names and the model's image normalisation.
#include <cstdint>
#include <string>
#include <vector>

#include "gmlp/image.h"
#include "gmlp/model.h"
#include "gmlp/labelled.h"
#include "gmlp/tokenizer.h"

namespace gmlp {

// Padded batches of labelled texts for a bidirectional model: each batch's T is cut to
// its longest row (the model is padding-aware, so the padding does not change results).
struct PaddedBatcher {
  PaddedTokens p;  // every text, encoded and padded to the window
  std::vector<int32_t> tokens, lengths;
  // The batch of rows idx[0..n) (tokens and lengths point into this batcher).
  Batch make(const size_t* idx, int n);
};

// Class probabilities [n_classes] for one text / one image [C, H, W] (normalised).
// Texts are read as the model's config says: windows of text_window (or seq_len) tokens,
// a longer text by long_text (chunks: the mean of its windows' probabilities).
std::vector<float> classify_text(Model& model, const Tokenizer& tok, const std::string& text);
// The same for many texts, in batches of `batch` windows: probabilities [texts.size() * k].
std::vector<float> classify_texts(Model& model, const Tokenizer& tok, const std::vector<std::string>& texts,
                                  int batch);
std::vector<float> classify_image(Model& model, const float* image);
// Class probabilities [n, n_classes] of n images [n, C, H, W] of the model's shape, `batch`
// a forward: floats (normalised as the model takes them), or, images null, bytes (pixel
// values, which the model normalises as it reads them: Batch::image_bytes).
std::vector<float> classify_images(Model& model, const float* images, const uint8_t* bytes, size_t n, int batch);

// Applies the model's stored normalisation (config "normalization") in place; a set of bytes
// is left as it is, the model normalising bytes as it reads them.
void normalize_for_model(const ModelConfig& cfg, ImageSet& set);

// "name" of class i from the config's class_names, else its index.
std::string class_name(const ModelConfig& cfg, int i);

}  // namespace gmlp
