#pragma once
// Evaluating and using classifiers: sentence classification (task "classify") over
// labelled lines, and image classification (task "vision") over an ImageSet.
#include <cstdint>
#include <string>
#include <vector>

#include "gmlp/image.h"
#include "gmlp/model.h"
#include "gmlp/text_data.h"
#include "gmlp/tokenizer.h"

namespace gmlp {

struct ClassEval {
  int64_t examples = 0;
  double loss = 0.0;       // mean cross-entropy (nats)
  double accuracy = 0.0;   // top-1
  std::vector<int64_t> confusion;  // k x k, row = true class
  std::vector<int32_t> predictions;
};

// Texts are encoded, truncated to the model's window and padded per batch to their
// longest row (the model is padding-aware, so the padding does not change results).
ClassEval evaluate_texts(Model& model, const Tokenizer& tok, const LabelledSet& set, int batch);
// Images must already be normalised as the model expects (see vision_inputs).
ClassEval evaluate_images(Model& model, const ImageSet& set, int batch);

// Class probabilities [n_classes] for one text / one image [C, H, W] (normalised).
std::vector<float> classify_text(Model& model, const Tokenizer& tok, const std::string& text);
std::vector<float> classify_image(Model& model, const float* image);

// Applies the model's stored normalisation (config "normalization") in place.
void normalize_for_model(const ModelConfig& cfg, ImageSet& set);

// "name" of class i from the config's class_names, else its index.
std::string class_name(const ModelConfig& cfg, int i);

}  // namespace gmlp
