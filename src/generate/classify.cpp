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
  if (cfg.normalization.is_null() || set.as_bytes) return;  // bytes: the model normalises them
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

std::vector<float> classify_texts(Model& model, const Tokenizer& tok, const std::vector<std::string>& texts,
                                  int batch) {
  const ModelConfig& c = model.config();
  require(c.task == Task::classify, "classify_texts: the model's task is \"" + name_of(c.task) + "\", not \"classify\"");
  require(batch >= 1, "classify_texts: batch must be >= 1");
  const int k = c.n_classes;
  NoGrad no_grad(model);
  PaddedBatcher tb;
  tb.p = encode_padded(texts, tok, c.window(), c.long_text);
  std::vector<float> probs(texts.size() * size_t(k), 0.f);
  std::vector<int> windows(texts.size(), 0);
  std::vector<size_t> idx;
  for (size_t s = 0; s < size_t(tb.p.rows); s += size_t(batch)) {
    const int n = int(std::min(size_t(tb.p.rows) - s, size_t(batch)));
    idx.resize(size_t(n));
    for (int i = 0; i < n; ++i) idx[size_t(i)] = s + size_t(i);
    model.forward(tb.make(idx.data(), n));
    for (int i = 0; i < n; ++i) {
      const size_t text = size_t(tb.p.owner[s + size_t(i)]);
      const auto p = softmax_row(model.logits() + size_t(i) * k, k);
      for (int j = 0; j < k; ++j) probs[text * k + size_t(j)] += p[size_t(j)];
      ++windows[text];
    }
  }
  // A chunked text's probabilities are the mean over its windows.
  for (size_t t = 0; t < texts.size(); ++t)
    if (windows[t] > 1)
      for (int j = 0; j < k; ++j) probs[t * k + size_t(j)] /= float(windows[t]);
  return probs;
}

std::vector<float> classify_text(Model& model, const Tokenizer& tok, const std::string& text) {
  return classify_texts(model, tok, {text}, 64);
}

std::vector<float> classify_image(Model& model, const float* image) { return classify_images(model, image, nullptr, 1, 1); }

std::vector<float> classify_images(Model& model, const float* images, const uint8_t* bytes, size_t n, int batch) {
  const ModelConfig& c = model.config();
  require(c.task == Task::vision, "classify_images: the model's task is \"" + name_of(c.task) + "\", not \"vision\"");
  require(batch >= 1, "classify_images: batch must be >= 1");
  const size_t per = size_t(c.image_channels) * c.image_height * c.image_width;
  const int k = c.n_classes;
  NoGrad no_grad(model);
  std::vector<float> probs(n * size_t(k));
  for (size_t s = 0; s < n; s += size_t(batch)) {
    Batch b;
    b.B = int(std::min(n - s, size_t(batch)));
    b.T = c.seq_len;
    if (images)
      b.images = images + s * per;
    else
      b.image_bytes = bytes + s * per;
    model.forward(b);
    const float* logits = model.logits();
    for (int i = 0; i < b.B; ++i) {
      const std::vector<float> p = softmax_row(logits + size_t(i) * k, k);
      std::copy(p.begin(), p.end(), probs.begin() + (s + size_t(i)) * k);
    }
  }
  return probs;
}

}  // namespace gmlp
