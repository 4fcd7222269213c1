// JSON (de)serialisation and validation of ModelConfig / TrainConfig.
#include "gmlp/config.h"

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <limits>
#include <set>

#include "gmlp/error.h"
#include "gmlp/tokenizer.h"

namespace gmlp {
namespace {

using nlohmann::json;

// Reads j[key] into out when present, with a type check that names the key.
template <typename T>
void get(const json& j, const char* key, T& out, const std::string& where) {
  auto it = j.find(key);
  if (it == j.end()) return;
  try {
    if constexpr (std::is_same_v<T, json>) {
      out = *it;
    } else if constexpr (std::is_integral_v<T>) {
      require(it->is_number_integer(), where + ": '" + key + "' must be an integer, got " + it->dump());
      // Range-check before narrowing: a bare get<int> wraps 4294967312 to 16.
      const bool fits = it->is_number_unsigned()
                            ? it->get<uint64_t>() <= uint64_t(std::numeric_limits<T>::max())
                            : (std::is_signed_v<T> && it->get<int64_t>() >= int64_t(std::numeric_limits<T>::min()) &&
                               it->get<int64_t>() <= int64_t(std::numeric_limits<T>::max()));
      require(fits, where + ": '" + key + "' is out of range: " + it->dump());
      out = it->get<T>();
    } else if constexpr (std::is_floating_point_v<T>) {
      require(it->is_number(), where + ": '" + key + "' must be a number, got " + it->dump());
      out = it->get<T>();
    } else {
      require(it->is_string(), where + ": '" + key + "' must be a string, got " + it->dump());
      out = it->get<T>();
    }
  } catch (const json::exception& e) {
    throw Error(where + ": '" + key + "': " + e.what());
  }
}

void reject_unknown(const json& j, const std::set<std::string>& known, const std::string& where) {
  require(j.is_object(), where + ": expected a JSON object, got " + j.dump());
  for (auto it = j.begin(); it != j.end(); ++it)
    require(known.count(it.key()) != 0, where + ": unknown key '" + it.key() + "'");
}

// The shortest decimal that reads back as the same float, so 1e-5f is written as
// 1e-05 and not as its double widening 9.999999747378752e-06.
json float_json(float v) {
  char buf[32];
  for (int prec = 6; prec <= 9; ++prec) {
    std::snprintf(buf, sizeof buf, "%.*g", prec, double(v));
    if (std::strtof(buf, nullptr) == v) break;
  }
  return std::strtod(buf, nullptr);
}

// Runs c.validate() with `where` (the file or source) in front of any message.
template <typename C>
C validated(const C& c, const std::string& where) {
  try {
    c.validate();
  } catch (const Error& e) {
    throw Error(where + ": " + e.what());
  }
  return c;
}

template <typename T>
void check_positive(T v, const char* key) {
  require(v > 0, std::string("config: '") + key + "' must be positive, got " + std::to_string(v));
}

}  // namespace

void ModelConfig::validate() const {
  require(task == "causal_lm", "config: 'task' must be \"causal_lm\", got \"" + task + "\"");
  check_positive(vocab_size, "vocab_size");
  check_positive(d_model, "d_model");
  check_positive(d_ffn, "d_ffn");
  require(d_ffn % 2 == 0, "config: 'd_ffn' must be even (Z splits into two halves), got " + std::to_string(d_ffn));
  check_positive(n_layers, "n_layers");
  require(seq_len >= 2, "config: 'seq_len' (n) must be at least 2, got " + std::to_string(seq_len));
  // Bounds far above any model this engine can hold, so that an absurd config (or a
  // tampered checkpoint) is an error instead of an attempt to allocate terabytes.
  constexpr int kMaxDim = 1 << 20, kMaxLayers = 4096;
  for (auto [key, v] : {std::pair<const char*, int>{"vocab_size", vocab_size}, {"d_model", d_model}, {"d_ffn", d_ffn},
                        {"seq_len", seq_len}})
    require(v <= kMaxDim, std::string("config: '") + key + "' must be at most " + std::to_string(kMaxDim) + ", got " +
                              std::to_string(v));
  require(n_layers <= kMaxLayers,
          "config: 'n_layers' must be at most " + std::to_string(kMaxLayers) + ", got " + std::to_string(n_layers));
  require(gelu == "erf" || gelu == "tanh", "config: 'gelu' must be \"erf\" or \"tanh\", got \"" + gelu + "\"");
  require(pos_embedding == "none" || pos_embedding == "sinusoidal",
          "config: 'pos_embedding' must be \"none\" or \"sinusoidal\", got \"" + pos_embedding + "\"");
  require(std::isfinite(spatial_init) && spatial_init >= 0,
          "config: 'spatial_init' must be >= 0, got " + std::to_string(spatial_init));
  require(std::isfinite(norm_eps) && norm_eps > 0, "config: 'norm_eps' must be positive, got " + std::to_string(norm_eps));
  require(tokenizer.is_object() && tokenizer.contains("kind") && tokenizer["kind"].is_string(),
          "config: 'tokenizer' must be an object with a string 'kind', got " + tokenizer.dump());
  const std::string kind = tokenizer["kind"].get<std::string>();
  require(kind == "byte" || kind == "char", "config: tokenizer kind must be \"byte\" or \"char\", got \"" + kind + "\"");
  if (kind == "byte")
    require(vocab_size == 256, "config: the byte tokenizer has 256 tokens, but 'vocab_size' is " +
                                   std::to_string(vocab_size));
  if (kind == "char" && tokenizer.contains("chars")) {
    // A stored character set fixes the vocabulary; the embedding must match it.
    const int n = tokenizer_from_json(tokenizer)->vocab_size();
    require(vocab_size == n, "config: the char tokenizer has " + std::to_string(n) + " characters, but 'vocab_size' is " +
                                 std::to_string(vocab_size));
  }
}

json ModelConfig::to_json() const {
  return {{"task", task},         {"vocab_size", vocab_size}, {"d_model", d_model},
          {"d_ffn", d_ffn},       {"n_layers", n_layers},     {"seq_len", seq_len},
          {"gelu", gelu},         {"pos_embedding", pos_embedding},
          {"spatial_init", float_json(spatial_init)}, {"norm_eps", float_json(norm_eps)}, {"tokenizer", tokenizer}};
}

ModelConfig ModelConfig::from_json(const json& j, const std::string& where) {
  reject_unknown(j, {"task", "vocab_size", "d_model", "d_ffn", "n_layers", "seq_len", "gelu", "pos_embedding",
                     "spatial_init", "norm_eps", "tokenizer"}, where);
  ModelConfig c;
  get(j, "task", c.task, where);
  get(j, "vocab_size", c.vocab_size, where);
  get(j, "d_model", c.d_model, where);
  get(j, "d_ffn", c.d_ffn, where);
  get(j, "n_layers", c.n_layers, where);
  get(j, "seq_len", c.seq_len, where);
  get(j, "gelu", c.gelu, where);
  get(j, "pos_embedding", c.pos_embedding, where);
  get(j, "spatial_init", c.spatial_init, where);
  get(j, "norm_eps", c.norm_eps, where);
  get(j, "tokenizer", c.tokenizer, where);
  return validated(c, where);
}

void TrainConfig::validate() const {
  check_positive(batch_size, "batch_size");
  require(steps >= 0, "config: 'steps' must be >= 0, got " + std::to_string(steps));
  require(schedule == "cosine" || schedule == "noam" || schedule == "constant",
          "config: 'schedule' must be \"cosine\", \"noam\" or \"constant\", got \"" + schedule + "\"");
  require(std::isfinite(lr) && lr > 0, "config: 'lr' must be positive, got " + std::to_string(lr));
  require(std::isfinite(min_lr) && min_lr >= 0 && min_lr <= lr,
          "config: 'min_lr' must be in [0, lr], got " + std::to_string(min_lr));
  require(warmup >= 0, "config: 'warmup' must be >= 0, got " + std::to_string(warmup));
  require(schedule != "noam" || warmup > 0, "config: the noam schedule needs 'warmup' > 0");
  require(noam_factor > 0, "config: 'noam_factor' must be positive");
  require(weight_decay >= 0, "config: 'weight_decay' must be >= 0, got " + std::to_string(weight_decay));
  require(beta1 >= 0 && beta1 < 1, "config: 'beta1' must be in [0, 1), got " + std::to_string(beta1));
  require(beta2 >= 0 && beta2 < 1, "config: 'beta2' must be in [0, 1), got " + std::to_string(beta2));
  require(eps > 0, "config: 'eps' must be positive");
  require(clip >= 0, "config: 'clip' must be >= 0 (0 disables), got " + std::to_string(clip));
  require(val_fraction >= 0 && val_fraction < 1,
          "config: 'val_fraction' must be in [0, 1), got " + std::to_string(val_fraction));
  check_positive(eval_every, "eval_every");
  check_positive(eval_batches, "eval_batches");
  check_positive(ckpt_every, "ckpt_every");
  check_positive(log_every, "log_every");
}

json TrainConfig::to_json() const {
  return {{"batch_size", batch_size}, {"steps", steps},   {"schedule", schedule},
          {"lr", float_json(lr)},                 {"min_lr", float_json(min_lr)}, {"warmup", warmup},
          {"noam_factor", float_json(noam_factor)}, {"weight_decay", float_json(weight_decay)},
          {"beta1", float_json(beta1)},           {"beta2", float_json(beta2)},   {"eps", float_json(eps)},
          {"clip", float_json(clip)},             {"val_fraction", float_json(val_fraction)},
          {"eval_every", eval_every}, {"eval_batches", eval_batches},
          {"ckpt_every", ckpt_every}, {"log_every", log_every}, {"seed", seed}};
}

TrainConfig TrainConfig::from_json(const json& j, const std::string& where) {
  reject_unknown(j, {"batch_size", "steps", "schedule", "lr", "min_lr", "warmup", "noam_factor", "weight_decay",
                     "beta1", "beta2", "eps", "clip", "val_fraction", "eval_every", "eval_batches", "ckpt_every",
                     "log_every", "seed"}, where);
  TrainConfig c;
  get(j, "batch_size", c.batch_size, where);
  get(j, "steps", c.steps, where);
  get(j, "schedule", c.schedule, where);
  get(j, "lr", c.lr, where);
  get(j, "min_lr", c.min_lr, where);
  get(j, "warmup", c.warmup, where);
  get(j, "noam_factor", c.noam_factor, where);
  get(j, "weight_decay", c.weight_decay, where);
  get(j, "beta1", c.beta1, where);
  get(j, "beta2", c.beta2, where);
  get(j, "eps", c.eps, where);
  get(j, "clip", c.clip, where);
  get(j, "val_fraction", c.val_fraction, where);
  get(j, "eval_every", c.eval_every, where);
  get(j, "eval_batches", c.eval_batches, where);
  get(j, "ckpt_every", c.ckpt_every, where);
  get(j, "log_every", c.log_every, where);
  get(j, "seed", c.seed, where);
  return validated(c, where);
}

RunConfig RunConfig::load(const std::string& path) {
  std::ifstream f(path);
  require(f.good(), "cannot open config file '" + path + "'");
  json j;
  try {
    j = json::parse(f);
  } catch (const json::exception& e) {
    throw Error("config file '" + path + "' is not valid JSON: " + e.what());
  }
  reject_unknown(j, {"model", "train"}, "config file '" + path + "'");
  RunConfig rc;
  if (j.contains("model")) rc.model = ModelConfig::from_json(j["model"], "config file '" + path + "' [model]");
  if (j.contains("train")) rc.train = TrainConfig::from_json(j["train"], "config file '" + path + "' [train]");
  return rc;
}

json RunConfig::to_json() const { return {{"model", model.to_json()}, {"train", train.to_json()}}; }

float learning_rate(const TrainConfig& t, int d_model, int64_t step) {
  const double s = double(std::max<int64_t>(step, 1));
  if (t.schedule == "constant") return t.lr;
  if (t.schedule == "noam")
    return float(t.noam_factor * std::pow(double(d_model), -0.5) *
                 std::min(std::pow(s, -0.5), s * std::pow(double(t.warmup), -1.5)));
  if (t.warmup > 0 && s <= double(t.warmup)) return float(double(t.lr) * s / double(t.warmup));
  const double p = (s - double(t.warmup)) / double(std::max<int64_t>(1, t.steps - t.warmup));
  const double c = 0.5 * (1.0 + std::cos(M_PI * std::min(p, 1.0)));
  return float(double(t.min_lr) + (double(t.lr) - double(t.min_lr)) * c);
}

}  // namespace gmlp
