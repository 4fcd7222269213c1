#pragma once
// Model and training configuration, read from and written to JSON. Unknown keys and
// impossible values are errors that name the key and the value.
#include <cstdint>
#include <string>

#include <nlohmann/json.hpp>

namespace gmlp {

struct ModelConfig {
  std::string task = "causal_lm";   // the only task of the foundation
  int vocab_size = 256;
  int d_model = 128;
  int d_ffn = 512;                  // even: Z splits into two halves
  int n_layers = 4;
  int seq_len = 128;                // n: the spatial projection is [n, n]
  std::string gelu = "erf";         // "erf" (exact) or "tanh"
  std::string pos_embedding = "none";  // "none" or "sinusoidal"
  float spatial_init = 0.01f;       // W ~ U(-s, s); b = 1
  float norm_eps = 1e-5f;
  nlohmann::json tokenizer = {{"kind", "byte"}};  // {"kind":"byte"} or {"kind":"char","chars":"..."}

  void validate() const;  // throws Error naming the field
  nlohmann::json to_json() const;
  // Unknown keys are errors; absent keys keep their defaults. `where` names the source
  // (a file, "checkpoint metadata") in error messages.
  static ModelConfig from_json(const nlohmann::json& j, const std::string& where);
};

struct TrainConfig {
  int batch_size = 16;
  int64_t steps = 2400;
  std::string schedule = "cosine";  // "cosine" (linear warmup + cosine), "noam", "constant"
  float lr = 3e-3f;                 // peak lr (cosine, constant); Noam uses noam_factor
  float min_lr = 3e-4f;             // cosine floor
  int64_t warmup = 100;
  float noam_factor = 1.0f;         // Noam: factor * d^-0.5 * min(s^-0.5, s * warmup^-1.5)
  float weight_decay = 0.1f;
  float beta1 = 0.9f, beta2 = 0.95f, eps = 1e-8f;
  float clip = 1.0f;                // global-norm clip; 0 disables
  float val_fraction = 0.05f;       // tail of the corpus held out for validation
  int64_t eval_every = 200;         // steps between validation passes
  int eval_batches = 8;             // batches per validation pass
  int64_t ckpt_every = 500;         // steps between checkpoints
  int64_t log_every = 10;
  uint64_t seed = 1337;

  void validate() const;
  nlohmann::json to_json() const;
  static TrainConfig from_json(const nlohmann::json& j, const std::string& where);
};

// A config file: {"model": {...}, "train": {...}}; either section may be absent.
struct RunConfig {
  ModelConfig model;
  TrainConfig train;
  static RunConfig load(const std::string& path);  // Error names the file and key
  nlohmann::json to_json() const;
};

// Learning rate for the s-th update (1-based).
float learning_rate(const TrainConfig& t, int d_model, int64_t step);

}  // namespace gmlp
