// Using classifiers: padded text batches, class probabilities, names, normalisation.
#include "gmlp/classify.h"

#include <algorithm>
#include <cmath>

#include "gmlp/error.h"

namespace gmlp {

Batch PaddedBatcher::make(const size_t* idx, int n) {
  tokens.resize(size_t(n) * p.T);
  lengths.resize(size_t(n));
  gather_rows(p, idx, n, tokens.data(), lengths.data());
  Batch b;
  b.B = n;
  b.T = *std::max_element(lengths.begin(), lengths.end());
  b.stride = p.T;
  b.tokens = tokens.data();
  b.lengths = lengths.data();
  return b;
}

std::string class_name(const ModelConfig& cfg, int i) {
  return i < int(cfg.class_names.size()) ? cfg.class_names[size_t(i)] : std::to_string(i);
}

void normalize_for_model(const ModelConfig& cfg, ImageSet& set) {
  if (cfg.normalization.is_null()) return;
  normalize(set, Normalization::from_json(cfg.normalization, "model config 'normalization'"));
}

namespace {
std::vector<float> softmax_row(const float* logits, int k) {
  std::vector<float> p(logits, logits + k);
  const float mx = *std::max_element(p.begin(), p.end());
  double s = 0.0;
  for (auto& v : p) s += (v = std::exp(v - mx));
  for (auto& v : p) v = float(v / s);
  return p;
}
}  // namespace

std::vector<float> classify_text(Model& model, const Tokenizer& tok, const std::string& text) {
  LabelledSet one;
  one.texts = {text};
  one.labels = {0};
  NoGrad no_grad(model);
  PaddedBatcher tb;
  tb.p = encode_padded(one.texts, tok, model.config().seq_len);
  const size_t idx = 0;
  model.forward(tb.make(&idx, 1));
  return softmax_row(model.logits(), model.config().n_classes);
}

std::vector<float> classify_image(Model& model, const float* image) {
  NoGrad no_grad(model);
  Batch b;
  b.B = 1;
  b.T = model.config().seq_len;
  b.images = image;
  model.forward(b);
  return softmax_row(model.logits(), model.config().n_classes);
}

}  // namespace gmlp
