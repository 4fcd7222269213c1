#pragma once
// Model and training configuration, read from and written to JSON. Unknown keys and
// impossible values are errors that name the key and the value; every enum-like value
// is parsed once, here, into the enums of gmlp/kinds.h.
#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "gmlp/kinds.h"

namespace gmlp {

// docs/variants.md is the contract for every field below.
struct ModelConfig {
  Task task = Task::causal_lm;
  int vocab_size = 256;             // token tasks; 0 for vision
  int n_classes = 0;                // classify and vision
  int d_model = 128;
  int d_ffn = 512;                  // even: Z splits into two halves
  int n_layers = 4;
  int seq_len = 128;                // n: the spatial projection is [n, n]
  Gelu gelu = Gelu::erf;           // exact, or the tanh approximation
  PosEmbedding pos_embedding = PosEmbedding::none;
  float spatial_init = 0.01f;       // W ~ U(-s, s); b = 1
  float norm_eps = 1e-5f;            // block and final LayerNorms
  float sgu_norm_eps = 1e-5f;        // the gate's LayerNorm (timm's gMLP: 1e-6 above, 1e-5 here)
  Sgu sgu = Sgu::split;             // s(Z): the split SGU or an ablation
  int sgu_heads = 1;                // gate channel groups, each with its own W and b
  Spatial spatial = Spatial::full;  // [n, n], or Toeplitz (W[i,j] = w[i-j])
  int d_attn = 0;                   // > 0: aMLP tiny attention of this size
  float survival_prob = 1.0f;       // stochastic depth p_L (1 = off)
  float dropout = 0.0f;             // training only: dropout on every block's residual branch
  float head_dropout = 0.0f;        // training only: dropout on the classifier's input (classify, vision)
  LongText long_text = LongText::head;  // classify: a text longer than text_window (training and inference)
  int text_window = 0;              // classify: tokens per text window (0 = seq_len; > seq_len: Toeplitz only)
  int image_channels = 0, image_height = 0, image_width = 0;  // vision
  int patch_height = 0, patch_width = 0;
  std::vector<std::string> class_names;  // optional display names, n_classes of them
  nlohmann::json normalization;          // vision: {"mean": [...], "std": [...]} per channel, or null
  nlohmann::json tokenizer = {{"kind", "byte"}};  // {"kind":"byte"} or {"kind":"char","chars":"..."}

  // Throws Error naming the field. With open = true, the values a task fills from its
  // data may still be 0 (open): a classifier's or vision model's n_classes, a vision
  // model's image shape and patches (and so seq_len).
  void validate(bool open = false) const;
  nlohmann::json to_json() const;

  bool causal() const { return task == Task::causal_lm; }
  bool token_input() const { return task != Task::vision; }
  bool per_token_output() const { return task == Task::causal_lm || task == Task::mlm; }
  int out_dim() const { return per_token_output() ? vocab_size : n_classes; }
  bool has_sgu() const { return sgu != Sgu::none; }
  int gate_channels() const { return sgu == Sgu::split ? d_ffn / 2 : d_ffn; }  // LN and spatial width
  int branch_channels() const { return sgu == Sgu::split ? d_ffn / 2 : d_ffn; }  // S, proj_out's input
  // Entries of one head's spatial weight: n*n, or 2n-1 / n for Toeplitz.
  int64_t spatial_weight_size() const;
  int patch_dim() const { return image_channels * patch_height * patch_width; }
  // Toeplitz models run on sequences longer than n; every other model needs T <= n.
  bool any_length() const { return spatial == Spatial::toeplitz && task != Task::vision; }
  // Tokens a classifier reads per window of a text.
  int window() const { return text_window > 0 ? text_window : seq_len; }
  // Parameters of the model this config describes, in double so that an absurd config
  // cannot overflow it (validate bounds it).
  double param_count() const;
  // Unknown keys are errors; absent keys keep their defaults. `where` names the source
  // (a file, "checkpoint metadata") in error messages. open: see validate.
  static ModelConfig from_json(const nlohmann::json& j, const std::string& where, bool open = false);
};

struct TrainConfig {
  int batch_size = 16;  // examples per step (over every rank of a data-parallel job)
  // Gradient accumulation: each step's batch (each rank's rows of it) is taken in this
  // many pieces, forward and backward one after another, their gradients added before
  // the one update: the memory of a batch this many times smaller, the same run (each
  // row's gradient the one it has in the whole batch; only the sums round differently).
  int grad_accum = 1;
  int64_t steps = 2400;
  Schedule schedule = Schedule::cosine;  // linear warmup + cosine, Noam, or constant
  float lr = 3e-3f;                 // peak lr (cosine, constant); Noam uses noam_factor
  float min_lr = 3e-4f;             // cosine floor
  int64_t warmup = 100;
  float noam_factor = 1.0f;         // Noam: factor * d^-0.5 * min(s^-0.5, s * warmup^-1.5)
  float weight_decay = 0.1f;
  float beta1 = 0.9f, beta2 = 0.95f, eps = 1e-8f;
  float clip = 1.0f;                // global-norm clip; 0 disables
  float val_fraction = 0.05f;       // tail of the corpus held out for validation
  int64_t eval_every = 200;         // steps between validation passes
  int eval_batches = 8;             // batches per validation pass (0: the whole held-out set)
  int64_t ckpt_every = 500;         // steps between checkpoints
  int64_t log_every = 10;
  uint64_t seed = 1337;
  float mask_prob = 0.15f;          // mlm: share of tokens chosen (80% [MASK], 10% random, 10% kept)
  int augment_shift = 0;            // vision: random shifts of up to this many pixels
  // vision: a random-resized crop of each training image, its area's share drawn from
  // [augment_crop, 1] (0: none; torchvision's default is 0.08), and a mirror image half
  // the time
  float augment_crop = 0.0f;
  bool augment_flip = false;
  // vision: an image folder's images decoded from their files at each use, not held in
  // memory (for a set larger than the memory; the run is the one held images make, but
  // for crops, which read each file as it is, not as held: docs/vision.md)
  bool stream_images = false;
  // The training loss's targets as distributions: label_smoothing's share of each spread
  // evenly over the classes (0: none; DeiT's and timm's recipe uses 0.1). vision: each
  // batch's rows mixed in pairs (rows 2i and 2i+1), their targets weighted as their
  // pixels are, with a weight drawn from Beta(alpha, alpha): mixup blends whole images
  // (alpha = mixup), CutMix swaps a box (alpha = cutmix); with both, each batch takes one
  // of the two at even odds (0: off; DeiT: 0.8 and 1.0). Evaluation scores plain targets.
  float label_smoothing = 0.0f;
  float mixup = 0.0f;
  float cutmix = 0.0f;
  // vision: the share of training images a box of which is replaced by noise (random
  // erasing, before the mixing; 0: none; DeiT: 0.25)
  float random_erase = 0.0f;
  // vision: RandAugment or AutoAugment on each training image's bytes after its crop,
  // mirroring and shift, given as timm's config string ("rand-m9-mstd0.5-inc1", DeiT's;
  // "original" or "v0" for AutoAugment's ImageNet policies; "": none), each operation as
  // Pillow computes it; the geometric ones resampled "bicubic" (DeiT's), "bilinear" or at
  // "random" (timm's default)
  std::string auto_augment;
  std::string auto_augment_interpolation = "bicubic";
  // classify, vision: take the training examples in epochs, each a fresh permutation of
  // them (PyTorch's DataLoader(shuffle=True)); false: each example drawn at random, with
  // replacement
  bool shuffle = false;
  // vision, with shuffle: each image of an epoch's permutation taken this many times, each
  // time augmented anew, the copies spread so that no two neighbouring rows are one
  // image, an epoch's rows as many as the images (repeated augmentation; DeiT: 3)
  int repeated_aug = 1;
  // An exponential moving average of the weights kept beside them, avg = decay * avg +
  // (1 - decay) * w after every step, evaluated with them and saved as
  // model_ema.safetensors (timm's ModelEma; 0: none; DeiT: 0.99996)
  float model_ema = 0.0f;
  int patience = 0;                 // stop after this many evaluations without a better validation score (0 = off)
  float epochs = 0.0f;              // > 0: the budget in passes over the training examples (sets steps)

  void validate() const;
  nlohmann::json to_json() const;
  static TrainConfig from_json(const nlohmann::json& j, const std::string& where);
};

// A config file: {"model": {...}, "train": {...}}; either section may be absent.
struct RunConfig {
  ModelConfig model;
  TrainConfig train;
  static RunConfig load(const std::string& path);  // Error names the file and key
  // {"model": ..., "train": ...} from JSON in memory; `where` names it in errors; open:
  // see ModelConfig::validate.
  static RunConfig from_json(const nlohmann::json& j, const std::string& where, bool open = false);
  nlohmann::json to_json() const;
};

}  // namespace gmlp
