// JSON (de)serialisation and validation of ModelConfig / TrainConfig. Each config's
// keys are listed once, in its field table (model_fields, train_fields), which drives
// from_json, to_json and the unknown-key check alike.
#include "gmlp/config.h"

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <limits>
#include <set>

#include "gmlp/augment.h"
#include "gmlp/error.h"
#include "gmlp/files.h"
#include "gmlp/image.h"
#include "gmlp/tokenizer.h"

namespace gmlp {
namespace {

using nlohmann::json;

template <typename T>
struct is_enum_setting : std::false_type {};
template <typename T>
  requires requires { EnumNames<T>::items; }
struct is_enum_setting<T> : std::true_type {};

// Reads j[key] into out when present, with a type check that names the key.
template <typename T>
void get(const json& j, const char* key, T& out, const std::string& where) {
  auto it = j.find(key);
  if (it == j.end()) return;
  try {
    if constexpr (std::is_same_v<T, json>) {
      out = *it;
    } else if constexpr (is_enum_setting<T>::value) {
      require(it->is_string(), where + ": '" + key + "' must be a string, got " + it->dump());
      const auto v = enum_from_name<T>(it->get<std::string>());
      require(v.has_value(), where + ": '" + key + "' must be one of " + enum_choices<T>() + ", got " + it->dump());
      out = *v;
    } else if constexpr (std::is_same_v<T, std::string>) {
      require(it->is_string(), where + ": '" + key + "' must be a string, got " + it->dump());
      out = it->get<std::string>();
    } else if constexpr (std::is_same_v<T, std::vector<std::string>>) {
      require(it->is_array(), where + ": '" + key + "' must be an array of strings");
      out.clear();
      for (const auto& x : *it) {
        require(x.is_string(), where + ": '" + key + "' must be an array of strings, got " + x.dump());
        out.push_back(x.get<std::string>());
      }
    } else if constexpr (std::is_same_v<T, bool>) {
      require(it->is_boolean(), where + ": '" + key + "' must be true or false, got " + it->dump());
      out = it->get<bool>();
    } else if constexpr (std::is_integral_v<T>) {
      require(it->is_number_integer(), where + ": '" + key + "' must be an integer, got " + it->dump());
      // Range-check before narrowing: a bare get<int> wraps 4294967312 to 16.
      const bool fits = it->is_number_unsigned()
                            ? it->get<uint64_t>() <= uint64_t(std::numeric_limits<T>::max())
                            : (std::is_signed_v<T> && it->get<int64_t>() >= int64_t(std::numeric_limits<T>::min()) &&
                               it->get<int64_t>() <= int64_t(std::numeric_limits<T>::max()));
      require(fits, where + ": '" + key + "' is out of range: " + it->dump());
      out = it->get<T>();
    } else {
      static_assert(std::is_same_v<T, float>);
      require(it->is_number(), where + ": '" + key + "' must be a number, got " + it->dump());
      // A value past float's range would become inf, be written as null, and make the
      // run's own files unreadable.
      const double v = it->get<double>();
      require(std::isfinite(v) && std::fabs(v) <= double(std::numeric_limits<float>::max()),
              where + ": '" + key + "' must be a finite number within float's range, got " + it->dump());
      out = float(v);
    }
  } catch (const json::exception& e) {
    throw Error(where + ": '" + key + "': " + e.what());
  }
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

// The JSON value of a setting: floats as their shortest decimal, enums by name.
template <typename T>
json put(const T& v) {
  if constexpr (std::is_same_v<T, float>)
    return float_json(v);
  else if constexpr (is_enum_setting<T>::value)
    return name_of(v);
  else
    return v;
}

// When to_json writes a key: always, for one kind of model only, or when set.
enum class Write { always, vision, tokens, when_set };

// The field tables. f(key, member, when) is called for each key in turn; C is the
// config or const config, so one table serves reading and writing.
template <typename C, typename F>
void model_fields(C& c, F&& f) {
  f("task", c.task, Write::always);
  f("vocab_size", c.vocab_size, Write::always);
  f("n_classes", c.n_classes, Write::always);
  f("d_model", c.d_model, Write::always);
  f("d_ffn", c.d_ffn, Write::always);
  f("n_layers", c.n_layers, Write::always);
  f("seq_len", c.seq_len, Write::always);
  f("gelu", c.gelu, Write::always);
  f("pos_embedding", c.pos_embedding, Write::always);
  f("spatial_init", c.spatial_init, Write::always);
  f("norm_eps", c.norm_eps, Write::always);
  f("sgu_norm_eps", c.sgu_norm_eps, Write::always);
  f("sgu", c.sgu, Write::always);
  f("sgu_heads", c.sgu_heads, Write::always);
  f("spatial", c.spatial, Write::always);
  f("d_attn", c.d_attn, Write::always);
  f("survival_prob", c.survival_prob, Write::always);
  f("dropout", c.dropout, Write::always);
  f("head_dropout", c.head_dropout, Write::always);
  f("long_text", c.long_text, Write::always);
  f("text_window", c.text_window, Write::always);
  f("image_channels", c.image_channels, Write::vision);
  f("image_height", c.image_height, Write::vision);
  f("image_width", c.image_width, Write::vision);
  f("patch_height", c.patch_height, Write::vision);
  f("patch_width", c.patch_width, Write::vision);
  f("class_names", c.class_names, Write::when_set);
  f("normalization", c.normalization, Write::when_set);
  f("tokenizer", c.tokenizer, Write::tokens);
}

template <typename C, typename F>
void train_fields(C& c, F&& f) {
  f("batch_size", c.batch_size, Write::always);
  f("grad_accum", c.grad_accum, Write::always);
  f("steps", c.steps, Write::always);
  f("schedule", c.schedule, Write::always);
  f("lr", c.lr, Write::always);
  f("min_lr", c.min_lr, Write::always);
  f("warmup", c.warmup, Write::always);
  f("noam_factor", c.noam_factor, Write::always);
  f("weight_decay", c.weight_decay, Write::always);
  f("beta1", c.beta1, Write::always);
  f("beta2", c.beta2, Write::always);
  f("eps", c.eps, Write::always);
  f("clip", c.clip, Write::always);
  f("val_fraction", c.val_fraction, Write::always);
  f("eval_every", c.eval_every, Write::always);
  f("eval_batches", c.eval_batches, Write::always);
  f("ckpt_every", c.ckpt_every, Write::always);
  f("log_every", c.log_every, Write::always);
  f("seed", c.seed, Write::always);
  f("mask_prob", c.mask_prob, Write::always);
  f("augment_shift", c.augment_shift, Write::always);
  f("augment_crop", c.augment_crop, Write::always);
  f("augment_flip", c.augment_flip, Write::always);
  f("stream_images", c.stream_images, Write::always);
  f("label_smoothing", c.label_smoothing, Write::always);
  f("mixup", c.mixup, Write::always);
  f("cutmix", c.cutmix, Write::always);
  f("random_erase", c.random_erase, Write::always);
  f("auto_augment", c.auto_augment, Write::always);
  f("auto_augment_interpolation", c.auto_augment_interpolation, Write::always);
  f("shuffle", c.shuffle, Write::always);
  f("repeated_aug", c.repeated_aug, Write::always);
  f("model_ema", c.model_ema, Write::always);
  f("patience", c.patience, Write::always);
  f("epochs", c.epochs, Write::always);
}

// Reads every key of the table present in j; any other key in j is an error.
template <typename C, typename Fields>
void read_fields(const json& j, C& c, Fields fields, const std::string& where) {
  require(j.is_object(), where + ": expected a JSON object, got " + j.dump());
  std::set<std::string> known;
  fields(c, [&](const char* key, auto& member, Write) {
    known.insert(key);
    get(j, key, member, where);
  });
  for (auto it = j.begin(); it != j.end(); ++it)
    require(known.count(it.key()) != 0, where + ": unknown key '" + it.key() + "'");
}

template <typename T>
bool is_set(const T& v) {
  if constexpr (std::is_same_v<T, json>)
    return !v.is_null();
  else if constexpr (std::is_same_v<T, std::vector<std::string>>)
    return !v.empty();
  else
    return true;
}

template <typename C, typename Fields>
json write_fields(const C& c, Fields fields, bool vision) {
  json j = json::object();
  fields(c, [&](const char* key, const auto& member, Write when) {
    const bool write = when == Write::always || (when == Write::vision && vision) ||
                       (when == Write::tokens && !vision) || (when == Write::when_set && is_set(member));
    if (write) j[key] = put(member);
  });
  return j;
}

}  // namespace

int64_t ModelConfig::spatial_weight_size() const {
  if (spatial == Spatial::full) return int64_t(seq_len) * seq_len;
  return causal() ? seq_len : 2 * int64_t(seq_len) - 1;
}

double ModelConfig::param_count() const {
  const double d = d_model, f = d_ffn, g = gate_channels(), s = branch_channels(), da = d_attn, n = seq_len,
               h = sgu_heads;
  const double w = spatial == Spatial::full ? n * n : causal() ? n : 2 * n - 1;
  const double sgu_p = has_sgu() ? 2 * g + h * (w + n) : 0.0;
  const double attn_p = da > 0 ? 3 * da * (d + 1) + (f / 2) * (da + 1) : 0.0;
  const double block = 2 * d + f * (d + 1) + sgu_p + attn_p + d * (s + 1);
  const double input = token_input() ? double(vocab_size) * d : d * (double(patch_dim()) + 1);
  return input + n_layers * block + 2 * d + double(out_dim()) * (d + 1);
}

void ModelConfig::validate(bool open) const {
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
  require(std::isfinite(spatial_init) && spatial_init >= 0,
          "config: 'spatial_init' must be >= 0, got " + std::to_string(spatial_init));
  require(std::isfinite(norm_eps) && norm_eps > 0, "config: 'norm_eps' must be positive, got " + std::to_string(norm_eps));
  require(std::isfinite(sgu_norm_eps) && sgu_norm_eps > 0,
          "config: 'sgu_norm_eps' must be positive, got " + std::to_string(sgu_norm_eps));
  require(sgu_heads >= 1, "config: 'sgu_heads' must be at least 1, got " + std::to_string(sgu_heads));
  require(gate_channels() % sgu_heads == 0,
          "config: the gate's " + std::to_string(gate_channels()) + " channels (d_ffn" +
              (sgu == Sgu::split ? "/2" : "") + ") do not split into 'sgu_heads' = " + std::to_string(sgu_heads) +
              " equal groups");
  require(sgu != Sgu::none || sgu_heads == 1, "config: 'sgu_heads' needs a spatial gating unit, but 'sgu' is \"none\"");
  require(d_attn == 0 || sgu == Sgu::split,
          "config: aMLP ('d_attn' > 0) adds its attention to the split SGU's gate; 'sgu' must be \"split\", got \"" +
              name_of(sgu) + "\"");
  require(std::isfinite(survival_prob) && survival_prob > 0 && survival_prob <= 1,
          "config: 'survival_prob' must be in (0, 1], got " + std::to_string(survival_prob));
  require(std::isfinite(dropout) && dropout >= 0 && dropout < 1,
          "config: 'dropout' must be in [0, 1), got " + std::to_string(dropout));
  require(std::isfinite(head_dropout) && head_dropout >= 0 && head_dropout < 1,
          "config: 'head_dropout' must be in [0, 1), got " + std::to_string(head_dropout));
  require(text_window >= 0, "config: 'text_window' must be >= 0 (0 = seq_len), got " + std::to_string(text_window));
  require(text_window <= seq_len || (any_length() && text_window <= 65536),
          "config: 'text_window' = " + std::to_string(text_window) + " is longer than 'seq_len' = " +
              std::to_string(seq_len) + "; only a Toeplitz model (spatial \"toeplitz\") runs longer (up to 65536)");
  require(head_dropout == 0 || task == Task::classify || task == Task::vision,
          "config: 'head_dropout' is dropout on a classifier's input; task \"" + name_of(task) +
              "\" has none (use 'dropout')");
  // Each dimension is bounded above, but their product is not: an engine-sized bound
  // on the whole (2^32 parameters, 16 GiB of weights before gradients and moments).
  constexpr double kMaxParams = 4294967296.0;
  require(param_count() <= kMaxParams, "config: the model would have " + std::to_string(param_count()) +
                                           " parameters, more than the " + std::to_string(int64_t(kMaxParams)) +
                                           " this engine holds");
  const bool classes = task == Task::classify || task == Task::vision;
  require(class_names.empty() || int(class_names.size()) == n_classes,
          "config: 'class_names' has " + std::to_string(class_names.size()) + " names for 'n_classes' = " +
              std::to_string(n_classes));
  // A checkpoint must not smuggle escape sequences into terminals and reports.
  for (const auto& name : class_names) check_class_name(name, "config: 'class_names'");
  require(normalization.is_null() || task == Task::vision, "config: 'normalization' is for vision models only");
  if (classes && !(open && n_classes == 0))
    require(n_classes >= 2, "config: task \"" + name_of(task) + "\" needs 'n_classes' >= 2, got " +
                                std::to_string(n_classes));
  else if (!classes)
    require(n_classes == 0, "config: 'n_classes' is for classify and vision; task \"" + name_of(task) +
                                "\" needs 0, got " + std::to_string(n_classes));
  // Positive for vision, zero (absent) for every other task.
  const std::pair<const char*, int> image_keys[] = {{"image_channels", image_channels}, {"image_height", image_height},
                                                    {"image_width", image_width}, {"patch_height", patch_height},
                                                    {"patch_width", patch_width}};
  if (task == Task::vision) {
    require(vocab_size == 0, "config: a vision model has no vocabulary; 'vocab_size' must be 0, got " +
                                 std::to_string(vocab_size));
    require(tokenizer.is_null(), "config: a vision model takes no 'tokenizer'");
    require(pos_embedding == PosEmbedding::none,
            "config: vision models use no position embedding ('pos_embedding' \"none\")");
    // The shape, or what of it is 0, comes from the data.
    if (open && (image_channels == 0 || image_height == 0 || image_width == 0)) return;
    for (auto [key, v] : image_keys) check_positive(v, key);
    // "do not tile" names the problem; the keys name where it is.
    require(image_height % patch_height == 0,
            "config: patches do not tile the image: 'patch_height' = " + std::to_string(patch_height) +
                " does not divide 'image_height' = " + std::to_string(image_height));
    require(image_width % patch_width == 0,
            "config: patches do not tile the image: 'patch_width' = " + std::to_string(patch_width) +
                " does not divide 'image_width' = " + std::to_string(image_width));
    // A normalisation of another channel count would fail only inside a forward.
    if (!normalization.is_null()) {
      const Normalization norm = Normalization::from_json(normalization, "config");
      require(norm.mean.size() == size_t(image_channels),
              "config: 'normalization' has " + std::to_string(norm.mean.size()) +
                  " channels, but 'image_channels' = " + std::to_string(image_channels));
    }
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

constexpr auto kModelFields = [](auto& c, auto&& f) { model_fields(c, f); };
constexpr auto kTrainFields = [](auto& c, auto&& f) { train_fields(c, f); };

json ModelConfig::to_json() const { return write_fields(*this, kModelFields, task == Task::vision); }
ModelConfig ModelConfig::from_json(const json& j, const std::string& where, bool open) {
  ModelConfig c;
  get(j.is_object() ? j : json::object(), "task", c.task, where);
  if (c.task == Task::vision) {  // no vocabulary or tokenizer unless the file insists
    c.vocab_size = 0;
    c.tokenizer = nullptr;
  }
  read_fields(j, c, kModelFields, where);
  if (c.task == Task::vision && !j.contains("seq_len") && c.patch_height > 0 && c.patch_width > 0)
    c.seq_len = (c.image_height / c.patch_height) * (c.image_width / c.patch_width);
  try {
    c.validate(open);
  } catch (const Error& e) {
    throw Error(where + ": " + e.what());
  }
  return c;
}

void TrainConfig::validate() const {
  check_positive(batch_size, "batch_size");
  check_positive(grad_accum, "grad_accum");
  require(batch_size % grad_accum == 0, "config: 'batch_size' (" + std::to_string(batch_size) +
                                            ") must be a multiple of 'grad_accum' (" + std::to_string(grad_accum) +
                                            "): a step's batch is taken in grad_accum equal pieces");
  require(steps >= 0, "config: 'steps' must be >= 0, got " + std::to_string(steps));
  require(std::isfinite(lr) && lr > 0, "config: 'lr' must be positive, got " + std::to_string(lr));
  require(std::isfinite(min_lr) && min_lr >= 0 && min_lr <= lr,
          "config: 'min_lr' must be in [0, lr], got " + std::to_string(min_lr));
  require(warmup >= 0, "config: 'warmup' must be >= 0, got " + std::to_string(warmup));
  require(schedule != Schedule::noam || warmup > 0, "config: the noam schedule needs 'warmup' > 0");
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
  require(augment_crop == 0.0f || (augment_crop > 0.0f && augment_crop <= 1.0f),
          "config: 'augment_crop' (the smallest share of an image's area a crop takes) must be in (0, 1], or 0 for "
          "no crops, got " +
              std::to_string(augment_crop));
  require(std::isfinite(label_smoothing) && label_smoothing >= 0 && label_smoothing < 1,
          "config: 'label_smoothing' must be in [0, 1), got " + std::to_string(label_smoothing));
  for (const auto& [alpha, key] : {std::pair{mixup, "mixup"}, std::pair{cutmix, "cutmix"}})
    require(std::isfinite(alpha) && alpha >= 0 && alpha <= 100,
            std::string("config: '") + key + "' (the Beta distribution's alpha of its mixing weight) must be in " +
                "(0, 100], or 0 for none, got " + std::to_string(alpha));
  require(std::isfinite(random_erase) && random_erase >= 0 && random_erase <= 1,
          "config: 'random_erase' (the share of images erased in part) must be in [0, 1], got " +
              std::to_string(random_erase));
  parse_augment_policy(auto_augment, parse_augment_interpolation(auto_augment_interpolation));
  require(repeated_aug >= 1 && repeated_aug <= 16,
          "config: 'repeated_aug' (the times an epoch takes each of its images) must be in [1, 16], got " +
              std::to_string(repeated_aug));
  require(std::isfinite(model_ema) && model_ema >= 0 && model_ema < 1,
          "config: 'model_ema' (the weights' average's decay a step) must be in [0, 1), 0 for none, got " +
              std::to_string(model_ema) + (model_ema == 1.f ? " (a decay within 3e-8 of 1 is 1 as a float)" : ""));
  require(repeated_aug == 1 || shuffle,
          "config: 'repeated_aug' repeats the images of train.shuffle's epochs: set 'shuffle' to true too");
  require(patience >= 0, "config: 'patience' must be >= 0 (0 = off), got " + std::to_string(patience));
  require(std::isfinite(epochs) && epochs >= 0 && epochs <= 1e6,
          "config: 'epochs' must be in [0, 1e6] (0 = use 'steps'), got " + std::to_string(epochs));
  check_positive(ckpt_every, "ckpt_every");
  check_positive(log_every, "log_every");
}

json TrainConfig::to_json() const { return write_fields(*this, kTrainFields, false); }

TrainConfig TrainConfig::from_json(const json& j, const std::string& where) {
  TrainConfig c;
  read_fields(j, c, kTrainFields, where);
  return validated(c, where);
}

RunConfig RunConfig::load(const std::string& path) {
  const std::string where = "config file '" + path + "'";
  return from_json(parse_json(read_file(path), where), where);
}

RunConfig RunConfig::from_json(const json& j, const std::string& where, bool open) {
  require(j.is_object(), where + ": expected a JSON object, got " + std::string(j.type_name()));
  for (auto it = j.begin(); it != j.end(); ++it)
    require(it.key() == "model" || it.key() == "train", where + ": unknown key '" + it.key() + "'");
  RunConfig rc;
  if (j.contains("model")) rc.model = ModelConfig::from_json(j["model"], where + " [model]", open);
  if (j.contains("train")) rc.train = TrainConfig::from_json(j["train"], where + " [train]");
  return rc;
}

json RunConfig::to_json() const { return {{"model", model.to_json()}, {"train", train.to_json()}}; }

}  // namespace gmlp
