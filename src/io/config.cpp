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

int64_t ModelConfig::spatial_weight_size() const {
  if (spatial == "full") return int64_t(seq_len) * seq_len;
  return causal() ? seq_len : 2 * int64_t(seq_len) - 1;
}

namespace {
void require_one_of(const std::string& v, std::initializer_list<const char*> options, const char* key) {
  std::string list;
  for (const char* o : options) {
    if (v == o) return;
    list += std::string(list.empty() ? "" : ", ") + "\"" + o + "\"";
  }
  throw Error(std::string("config: '") + key + "' must be one of " + list + ", got \"" + v + "\"");
}
}  // namespace

void ModelConfig::validate() const {
  require_one_of(task, {"causal_lm", "mlm", "classify", "vision"}, "task");
  check_positive(d_model, "d_model");
  check_positive(d_ffn, "d_ffn");
  require(d_ffn % 2 == 0, "config: 'd_ffn' must be even (Z splits into two halves), got " + std::to_string(d_ffn));
  check_positive(n_layers, "n_layers");
  require(seq_len >= 2, "config: 'seq_len' (n) must be at least 2, got " + std::to_string(seq_len));
  // Bounds far above any model this engine can hold, so that an absurd config (or a
  // tampered checkpoint) is an error instead of an attempt to allocate terabytes.
  constexpr int kMaxDim = 1 << 20, kMaxLayers = 4096;
  for (auto [key, v] : {std::pair<const char*, int>{"vocab_size", vocab_size}, {"d_model", d_model}, {"d_ffn", d_ffn},
                        {"seq_len", seq_len}, {"n_classes", n_classes}, {"d_attn", d_attn}, {"sgu_heads", sgu_heads},
                        {"image_channels", image_channels}, {"image_height", image_height},
                        {"image_width", image_width}, {"patch_height", patch_height}, {"patch_width", patch_width}}) {
    require(v >= 0, std::string("config: '") + key + "' must be >= 0, got " + std::to_string(v));
    require(v <= kMaxDim, std::string("config: '") + key + "' must be at most " + std::to_string(kMaxDim) +
                              ", got " + std::to_string(v));
  }
  require(n_layers <= kMaxLayers,
          "config: 'n_layers' must be at most " + std::to_string(kMaxLayers) + ", got " + std::to_string(n_layers));
  require_one_of(gelu, {"erf", "tanh"}, "gelu");
  require_one_of(pos_embedding, {"none", "sinusoidal"}, "pos_embedding");
  require_one_of(sgu, {"split", "none", "linear", "additive", "multiplicative"}, "sgu");
  require_one_of(spatial, {"full", "toeplitz"}, "spatial");
  require(std::isfinite(spatial_init) && spatial_init >= 0,
          "config: 'spatial_init' must be >= 0, got " + std::to_string(spatial_init));
  require(std::isfinite(norm_eps) && norm_eps > 0, "config: 'norm_eps' must be positive, got " + std::to_string(norm_eps));
  require(std::isfinite(sgu_norm_eps) && sgu_norm_eps > 0,
          "config: 'sgu_norm_eps' must be positive, got " + std::to_string(sgu_norm_eps));
  require(sgu_heads >= 1, "config: 'sgu_heads' must be at least 1, got " + std::to_string(sgu_heads));
  require(gate_channels() % sgu_heads == 0,
          "config: the gate's " + std::to_string(gate_channels()) + " channels (d_ffn" +
              (sgu == "split" ? "/2" : "") + ") do not split into 'sgu_heads' = " + std::to_string(sgu_heads) +
              " equal groups");
  require(sgu != "none" || sgu_heads == 1, "config: 'sgu_heads' needs a spatial gating unit, but 'sgu' is \"none\"");
  require(d_attn == 0 || sgu == "split",
          "config: aMLP ('d_attn' > 0) adds its attention to the split SGU's gate; 'sgu' must be \"split\", got \"" +
              sgu + "\"");
  require(std::isfinite(survival_prob) && survival_prob > 0 && survival_prob <= 1,
          "config: 'survival_prob' must be in (0, 1], got " + std::to_string(survival_prob));
  const bool classes = task == "classify" || task == "vision";
  require(class_names.empty() || int(class_names.size()) == n_classes,
          "config: 'class_names' has " + std::to_string(class_names.size()) + " names for 'n_classes' = " +
              std::to_string(n_classes));
  require(normalization.is_null() || task == "vision", "config: 'normalization' is for vision models only");
  if (classes)
    require(n_classes >= 2, "config: task \"" + task + "\" needs 'n_classes' >= 2, got " + std::to_string(n_classes));
  else
    require(n_classes == 0, "config: 'n_classes' is for classify and vision; task \"" + task + "\" needs 0, got " +
                                std::to_string(n_classes));
  // Positive for vision, zero (absent) for every other task.
  const std::pair<const char*, int> image_keys[] = {{"image_channels", image_channels}, {"image_height", image_height},
                                                    {"image_width", image_width}, {"patch_height", patch_height},
                                                    {"patch_width", patch_width}};
  if (task == "vision") {
    require(vocab_size == 0, "config: a vision model has no vocabulary; 'vocab_size' must be 0, got " +
                                 std::to_string(vocab_size));
    require(tokenizer.is_null(), "config: a vision model takes no 'tokenizer'");
    require(pos_embedding == "none", "config: vision models use no position embedding ('pos_embedding' \"none\")");
    for (auto [key, v] : image_keys) check_positive(v, key);
    // "do not tile" names the problem; the keys name where it is.
    require(image_height % patch_height == 0,
            "config: patches do not tile the image: 'patch_height' = " + std::to_string(patch_height) +
                " does not divide 'image_height' = " + std::to_string(image_height));
    require(image_width % patch_width == 0,
            "config: patches do not tile the image: 'patch_width' = " + std::to_string(patch_width) +
                " does not divide 'image_width' = " + std::to_string(image_width));
    const int grid = (image_height / patch_height) * (image_width / patch_width);
    require(seq_len == grid, "config: a " + std::to_string(image_height) + "x" + std::to_string(image_width) +
                                 " image in " + std::to_string(patch_height) + "x" + std::to_string(patch_width) +
                                 " patches has " + std::to_string(grid) + " patches, but 'seq_len' is " +
                                 std::to_string(seq_len));
    return;
  }
  for (auto [key, v] : image_keys) require(v == 0, std::string("config: '") + key + "' is for vision models only");
  check_positive(vocab_size, "vocab_size");
  require(tokenizer.is_object() && tokenizer.contains("kind") && tokenizer["kind"].is_string(),
          "config: 'tokenizer' must be an object with a string 'kind', got " + tokenizer.dump());
  // A char tokenizer without its characters gets them from the corpus at training time.
  const bool open_chars = tokenizer["kind"] == "char" && !tokenizer.contains("chars");
  if (!open_chars) {
    const int n = tokenizer_vocab_size(tokenizer);
    require(vocab_size == n, "config: the " + tokenizer["kind"].get<std::string>() + " tokenizer has " +
                                 std::to_string(n) + " tokens, but 'vocab_size' is " + std::to_string(vocab_size));
  }
}

json ModelConfig::to_json() const {
  json j = {{"task", task},         {"vocab_size", vocab_size}, {"d_model", d_model},
            {"d_ffn", d_ffn},       {"n_layers", n_layers},     {"seq_len", seq_len},
            {"gelu", gelu},         {"pos_embedding", pos_embedding},
            {"spatial_init", float_json(spatial_init)}, {"norm_eps", float_json(norm_eps)},
            {"sgu_norm_eps", float_json(sgu_norm_eps)}, {"sgu", sgu},           {"sgu_heads", sgu_heads},   {"spatial", spatial},
            {"d_attn", d_attn},     {"survival_prob", float_json(survival_prob)}, {"n_classes", n_classes}};
  if (!class_names.empty()) j["class_names"] = class_names;
  if (!normalization.is_null()) j["normalization"] = normalization;
  if (task == "vision") {
    j.update({{"image_channels", image_channels}, {"image_height", image_height}, {"image_width", image_width},
              {"patch_height", patch_height}, {"patch_width", patch_width}});
  } else {
    j["tokenizer"] = tokenizer;
  }
  return j;
}

ModelConfig ModelConfig::from_json(const json& j, const std::string& where) {
  reject_unknown(j, {"task", "vocab_size", "d_model", "d_ffn", "n_layers", "seq_len", "gelu", "pos_embedding",
                     "spatial_init", "norm_eps", "sgu_norm_eps", "tokenizer", "sgu", "sgu_heads", "spatial", "d_attn",
                     "survival_prob", "n_classes", "image_channels", "image_height", "image_width", "patch_height",
                     "patch_width", "class_names", "normalization"},
                 where);
  ModelConfig c;
  get(j, "task", c.task, where);
  if (c.task == "vision") {  // no vocabulary or tokenizer unless the file insists
    c.vocab_size = 0;
    c.tokenizer = nullptr;
  }
  get(j, "vocab_size", c.vocab_size, where);
  get(j, "n_classes", c.n_classes, where);
  get(j, "d_model", c.d_model, where);
  get(j, "d_ffn", c.d_ffn, where);
  get(j, "n_layers", c.n_layers, where);
  get(j, "seq_len", c.seq_len, where);
  get(j, "gelu", c.gelu, where);
  get(j, "pos_embedding", c.pos_embedding, where);
  get(j, "spatial_init", c.spatial_init, where);
  get(j, "norm_eps", c.norm_eps, where);
  get(j, "sgu_norm_eps", c.sgu_norm_eps, where);
  get(j, "sgu", c.sgu, where);
  get(j, "sgu_heads", c.sgu_heads, where);
  get(j, "spatial", c.spatial, where);
  get(j, "d_attn", c.d_attn, where);
  get(j, "survival_prob", c.survival_prob, where);
  get(j, "image_channels", c.image_channels, where);
  get(j, "image_height", c.image_height, where);
  get(j, "image_width", c.image_width, where);
  get(j, "patch_height", c.patch_height, where);
  get(j, "patch_width", c.patch_width, where);
  get(j, "tokenizer", c.tokenizer, where);
  get(j, "normalization", c.normalization, where);
  if (j.contains("class_names")) {
    const json& names = j["class_names"];
    require(names.is_array(), where + ": 'class_names' must be an array of strings");
    for (const auto& x : names) {
      require(x.is_string(), where + ": 'class_names' must be an array of strings, got " + x.dump());
      c.class_names.push_back(x.get<std::string>());
    }
  }
  if (c.task == "vision" && !j.contains("seq_len") && c.patch_height > 0 && c.patch_width > 0)
    c.seq_len = (c.image_height / c.patch_height) * (c.image_width / c.patch_width);
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
  require(eval_batches >= 0, "config: 'eval_batches' must be >= 0 (0 = the whole held-out set), got " +
                                 std::to_string(eval_batches));
  require(std::isfinite(mask_prob) && mask_prob > 0 && mask_prob < 1,
          "config: 'mask_prob' must be in (0, 1), got " + std::to_string(mask_prob));
  require(augment_shift >= 0 && augment_shift <= 64,
          "config: 'augment_shift' must be in [0, 64] pixels, got " + std::to_string(augment_shift));
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
          {"ckpt_every", ckpt_every}, {"log_every", log_every}, {"seed", seed},
          {"mask_prob", float_json(mask_prob)}, {"augment_shift", augment_shift}};
}

TrainConfig TrainConfig::from_json(const json& j, const std::string& where) {
  reject_unknown(j, {"batch_size", "steps", "schedule", "lr", "min_lr", "warmup", "noam_factor", "weight_decay",
                     "beta1", "beta2", "eps", "clip", "val_fraction", "eval_every", "eval_batches", "ckpt_every",
                     "log_every", "seed", "mask_prob", "augment_shift"}, where);
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
  get(j, "mask_prob", c.mask_prob, where);
  get(j, "augment_shift", c.augment_shift, where);
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
