// timm gMLP checkpoints <-> gmlp.cpp vision models (docs/timm.md).
#include "gmlp/timm.h"

#include <cmath>
#include <cstring>
#include <map>
#include <set>

#include "gmlp/error.h"
#include "gmlp/files.h"
#include "gmlp/safetensors.h"

namespace gmlp {
namespace {

// THE name map: timm's gMLP state_dict (MlpMixer(block_layer=SpatialGatingBlock,
// mlp_layer=GatedMlp), timm/models/mlp_mixer.py) against docs/checkpoint.md. Shapes with
// d = embed_dim, f = d_ffn = embed_dim * mlp_ratio, n = num_patches, k = num_classes:
//
//   timm                                        ours                          shape
//   stem.proj.weight                            patch.weight       [d, C, ph, pw] <-> [d, C*ph*pw]
//   stem.proj.bias                              patch.bias                    [d]
//   blocks.{i}.norm.weight|bias                 blocks.{i}.norm.*             [d]        eps 1e-6 in timm
//   blocks.{i}.mlp_channels.fc1.weight|bias     blocks.{i}.proj_in.*          [f, d], [f]
//   blocks.{i}.mlp_channels.gate.norm.weight|bias  blocks.{i}.sgu.norm.*      [f/2]      eps 1e-5 in timm
//   blocks.{i}.mlp_channels.gate.proj.weight|bias  blocks.{i}.sgu.spatial.*   [n, n], [n]
//   blocks.{i}.mlp_channels.fc2.weight|bias     blocks.{i}.proj_out.*         [d, f/2], [d]
//   norm.weight|bias                            norm.*                        [d]        eps 1e-6 in timm
//   head.weight|bias                            head.*                        [k, d], [k]
//
// Semantics agree term by term: timm's gate does u, v = x.chunk(2, -1) (u = our Z1, v =
// the gated half Z2), v = proj(norm(v).transpose(-1, -2)).transpose(-1, -2), i.e.
// F[i] = sum_j W[i, j] G[j] + b[i] over the patch axis, and returns u * F; the stem's
// Conv2d(kernel = stride = patch) flattened row-major over the grid is our patch
// embedding; the head pools by the mean over patches. timm's stem has no norm
// (stem_norm=False) and GatedMlp's own norm is Identity: neither has tensors.
const std::vector<TimmNameRule> kTimmNameMap = {
    {"stem.proj.weight", "patch.weight", true},
    {"stem.proj.bias", "patch.bias", false},
    {"blocks.{i}.norm.weight", "blocks.{i}.norm.weight", false},
    {"blocks.{i}.norm.bias", "blocks.{i}.norm.bias", false},
    {"blocks.{i}.mlp_channels.fc1.weight", "blocks.{i}.proj_in.weight", false},
    {"blocks.{i}.mlp_channels.fc1.bias", "blocks.{i}.proj_in.bias", false},
    {"blocks.{i}.mlp_channels.gate.norm.weight", "blocks.{i}.sgu.norm.weight", false},
    {"blocks.{i}.mlp_channels.gate.norm.bias", "blocks.{i}.sgu.norm.bias", false},
    {"blocks.{i}.mlp_channels.gate.proj.weight", "blocks.{i}.sgu.spatial.weight", false},
    {"blocks.{i}.mlp_channels.gate.proj.bias", "blocks.{i}.sgu.spatial.bias", false},
    {"blocks.{i}.mlp_channels.fc2.weight", "blocks.{i}.proj_out.weight", false},
    {"blocks.{i}.mlp_channels.fc2.bias", "blocks.{i}.proj_out.bias", false},
    {"norm.weight", "norm.weight", false},
    {"norm.bias", "norm.bias", false},
    {"head.weight", "head.weight", false},
    {"head.bias", "head.bias", false},
};

constexpr const char* kExportKey = "gmlp.timm_export";


// Matches `name` against a pattern with at most one "{i}" (a decimal block index).
bool match(const std::string& pattern, const std::string& name, int* block) {
  const size_t at = pattern.find("{i}");
  if (at == std::string::npos) return pattern == name;
  const std::string pre = pattern.substr(0, at), post = pattern.substr(at + 3);
  if (name.size() <= pre.size() + post.size() || name.compare(0, pre.size(), pre) != 0 ||
      name.compare(name.size() - post.size(), post.size(), post) != 0)
    return false;
  const std::string digits = name.substr(pre.size(), name.size() - pre.size() - post.size());
  if (digits.size() > 6 || (digits.size() > 1 && digits[0] == '0')) return false;
  for (char ch : digits)
    if (ch < '0' || ch > '9') return false;
  *block = std::stoi(digits);
  return true;
}

std::string expand(const std::string& pattern, int block) {
  const size_t at = pattern.find("{i}");
  if (at == std::string::npos) return pattern;
  return pattern.substr(0, at) + std::to_string(block) + pattern.substr(at + 3);
}

const TimmNameRule* rule_for_ours(const std::string& ours, int* block) {
  for (const auto& r : kTimmNameMap)
    if (match(r.ours, ours, block)) return &r;
  return nullptr;
}

// timm's shape of one of our parameters.
std::vector<int64_t> timm_shape(const ModelConfig& c, const ParamInfo& p, bool conv) {
  if (!conv) return p.shape;
  return {c.d_model, c.image_channels, c.patch_height, c.patch_width};
}

// IEEE half -> float, subnormals, infinities and NaNs included.
float half_to_float(uint16_t h) {
  const uint32_t sign = uint32_t(h & 0x8000u) << 16;
  uint32_t exp = (h >> 10) & 0x1fu, mant = h & 0x3ffu, bits;
  if (exp == 0x1f) {
    bits = sign | 0x7f800000u | (mant << 13);
  } else if (exp != 0) {
    bits = sign | ((exp + 112u) << 23) | (mant << 13);
  } else if (mant == 0) {
    bits = sign;
  } else {  // subnormal: normalise
    int e = -1;
    do {
      ++e;
      mant <<= 1;
    } while ((mant & 0x400u) == 0);
    bits = sign | (uint32_t(112 - e) << 23) | ((mant & 0x3ffu) << 13);
  }
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

// The timm checkpoint: the file, the name prefix, and the raw bytes when some tensor
// is not F32 (SafeTensorsFile copies F32 only; the rest is converted from the bytes).
struct TimmFile {
  SafeTensorsFile f;
  std::string prefix;
  std::string raw;
  size_t data_start = 0;

  std::string full(const std::string& timm) const { return prefix + timm; }
  bool has(const std::string& timm) const { return f.has(full(timm)); }
  const std::string& path() const { return f.path(); }

  const TensorInfo& need(const std::string& timm, const std::string& what) const {
    if (!has(timm)) throw Error(path() + ": missing tensor '" + full(timm) + "' (" + what + ")");
    return f.info(full(timm));
  }
  const std::vector<int64_t>& need_rank(const std::string& timm, size_t rank, const std::string& what) const {
    const TensorInfo& t = need(timm, what);
    require(t.shape.size() == rank, path() + ": tensor '" + full(timm) + "' has shape " + shape_str(t.shape) +
                                        ", expected rank " + std::to_string(rank) + " (" + what + ")");
    for (int64_t s : t.shape)
      require(s > 0, path() + ": tensor '" + full(timm) + "' has an empty shape " + shape_str(t.shape));
    return t.shape;
  }

  void read(const std::string& timm, const std::vector<int64_t>& shape, float* dst) {
    const TensorInfo& t = f.info(full(timm));
    require(t.shape == shape, path() + ": tensor '" + full(timm) + "' has shape " + shape_str(t.shape) +
                                  ", expected " + shape_str(shape));
    if (t.dtype == "F32") {
      f.read_f32(full(timm), shape, dst);
      return;
    }
    if (raw.empty()) {
      raw = read_file(path());
      uint64_t header = 0;
      require(raw.size() >= 8, path() + ": too short for a safetensors header");
      std::memcpy(&header, raw.data(), 8);
      data_start = 8 + size_t(header);
    }
    const char* src = raw.data() + data_start + t.offset;
    const size_t count = t.nbytes / (t.dtype == "F64" ? 8 : 2);
    for (size_t i = 0; i < count; ++i) {
      if (t.dtype == "F64") {
        double v;
        std::memcpy(&v, src + 8 * i, 8);
        dst[i] = float(v);
      } else {
        uint16_t v;
        std::memcpy(&v, src + 2 * i, 2);
        if (t.dtype == "F16") {
          dst[i] = half_to_float(v);
        } else {  // BF16: the top half of an F32
          const uint32_t bits = uint32_t(v) << 16;
          std::memcpy(dst + i, &bits, 4);
        }
      }
    }
  }
};

TimmFile open_timm(const std::string& path, const TimmImportOptions& opt) {
  TimmFile tf{SafeTensorsFile::load(path), opt.prefix, {}, 0};
  // Recognise the two common wrong inputs before anything else.
  if (!tf.has("stem.proj.weight")) {
    if (tf.f.has("patch.weight"))
      throw Error(path + ": this is a gmlp.cpp checkpoint ('patch.weight'), not a timm one ('stem.proj.weight'); "
                         "use it directly, or convert it with --to-timm");
    for (const auto& n : tf.f.names()) {
      const std::string tail = "stem.proj.weight";
      if (n.size() > tail.size() && n.compare(n.size() - tail.size(), tail.size(), tail) == 0)
        throw Error(path + ": missing tensor '" + tf.full(tail) + "', but the file has '" + n +
                    "': set the name prefix to '" + n.substr(0, n.size() - tail.size()) + "'");
    }
  }
  return tf;
}

ModelConfig config_of(const TimmFile& tf, const TimmImportOptions& opt) {
  const std::string& path = tf.path();
  const auto& stem = tf.need_rank("stem.proj.weight", 4, "the patch stem, a Conv2d weight [d, C, ph, pw]");
  const int64_t d = stem[0], C = stem[1], ph = stem[2], pw = stem[3];
  const std::string d_from = "d = " + std::to_string(d) + " from 'stem.proj.weight' " + shape_str(stem);

  // Blocks: blocks.{i}.* for i = 0..L-1.
  int L = 0;
  const std::string bp = tf.full("blocks.");
  for (const auto& n : tf.f.names()) {
    if (n.compare(0, bp.size(), bp) != 0) continue;
    const size_t dot = n.find('.', bp.size());
    const std::string idx = n.substr(bp.size(), dot == std::string::npos ? std::string::npos : dot - bp.size());
    int b = -1;
    if (dot != std::string::npos && match("{i}", idx, &b)) L = std::max(L, b + 1);
  }
  require(L > 0, path + ": no 'blocks.0.*' tensors: not a timm gMLP checkpoint (or an empty one)");

  const auto& fc1 = tf.need_rank("blocks.0.mlp_channels.fc1.weight", 2, "the channel projection, [d_ffn, d]");
  require(fc1[1] == d, path + ": tensor '" + tf.full("blocks.0.mlp_channels.fc1.weight") + "' has shape " +
                           shape_str(fc1) + ", expected [d_ffn, " + std::to_string(d) + "] (" + d_from + ")");
  const int64_t f = fc1[0];
  require(f % 2 == 0, path + ": tensor '" + tf.full("blocks.0.mlp_channels.fc1.weight") + "' has shape " +
                          shape_str(fc1) + ": d_ffn = " + std::to_string(f) +
                          " is odd, but the spatial gating unit splits it into two halves");
  const auto& proj = tf.need_rank("blocks.0.mlp_channels.gate.proj.weight", 2,
                                  "the spatial projection, nn.Linear(n, n) over the patches: [n, n]");
  require(proj[0] == proj[1], path + ": tensor '" + tf.full("blocks.0.mlp_channels.gate.proj.weight") +
                                  "' has shape " + shape_str(proj) + ", expected a square [n, n] (n = patches)");
  const int64_t n = proj[0];
  if (!tf.has("head.weight"))
    throw Error(path + ": missing tensor '" + tf.full("head.weight") +
                "': a timm gMLP without its classifier (num_classes=0, features only) cannot be loaded");
  const auto& head = tf.need_rank("head.weight", 2, "the classifier, [classes, d]");
  require(head[1] == d, path + ": tensor '" + tf.full("head.weight") + "' has shape " + shape_str(head) +
                            ", expected [classes, " + std::to_string(d) + "] (" + d_from + ")");
  const int64_t k = head[0];

  // Image size: only the grid (n patches) is recorded, so the sides are inferred.
  int64_t H = opt.image_height, W = opt.image_width;
  require(H >= 0 && W >= 0, "timm import: the image size must be positive");
  const std::string n_from =
      "n = " + std::to_string(n) + " from '" + tf.full("blocks.0.mlp_channels.gate.proj.weight") + "' " + shape_str(proj);
  const std::string patch = std::to_string(ph) + "x" + std::to_string(pw) + " patches (from 'stem.proj.weight' " +
                            shape_str(stem) + ")";
  if (H == 0 && W == 0) {
    const int64_t s = std::llround(std::sqrt(double(n)));
    require(s * s == n, path + ": " + n_from + " is not a square grid of patches, so the image size cannot be "
                                               "inferred; give the image height and width");
    H = s * ph;
    W = s * pw;
  } else if (H == 0 || W == 0) {
    const int64_t known = H ? H : W, kp = H ? ph : pw, op = H ? pw : ph;
    require(known % kp == 0 && n % (known / kp) == 0,
            path + ": an image side of " + std::to_string(known) + " pixels in " + patch + " does not divide " +
                n_from + " into whole rows of patches");
    (H ? W : H) = n / (known / kp) * op;
  }
  require(H % ph == 0 && W % pw == 0 && (H / ph) * (W / pw) == n,
          path + ": a " + std::to_string(H) + "x" + std::to_string(W) + " image in " + patch + " has " +
              (H % ph == 0 && W % pw == 0 ? std::to_string((H / ph) * (W / pw)) + " patches" : "no whole grid") +
              ", but the checkpoint's " + n_from);

  ModelConfig c;
  c.task = Task::vision;
  c.vocab_size = 0;
  c.tokenizer = nullptr;
  c.n_classes = int(k);
  c.d_model = int(d);
  c.d_ffn = int(f);
  c.n_layers = L;
  c.seq_len = int(n);
  c.gelu = Gelu::erf;
  c.pos_embedding = PosEmbedding::none;
  c.norm_eps = opt.norm_eps;
  c.sgu_norm_eps = 1e-5f;  // timm's SpatialGatingUnit keeps nn.LayerNorm's default
  c.sgu = Sgu::split;
  c.sgu_heads = 1;
  c.spatial = Spatial::full;
  c.d_attn = 0;
  c.survival_prob = 1.0f;
  c.image_channels = int(C);
  c.image_height = int(H);
  c.image_width = int(W);
  c.patch_height = int(ph);
  c.patch_width = int(pw);

  // Our own export keeps the data description (class names, normalisation) here.
  auto meta = tf.f.metadata().find(kExportKey);
  if (meta != tf.f.metadata().end()) {
    const nlohmann::json j = parse_json(meta->second, path + ": '" + std::string(kExportKey) + "' metadata");
    const ModelConfig exported = ModelConfig::from_json(j, path + " [" + kExportKey + "]");
    if (exported.n_classes == c.n_classes) c.class_names = exported.class_names;
    if (exported.image_channels == c.image_channels) c.normalization = exported.normalization;
  }
  if (!opt.normalization.is_null()) c.normalization = opt.normalization;
  try {
    c.validate();
  } catch (const Error& e) {
    throw Error(path + ": the timm checkpoint gives an invalid config: " + e.what());
  }
  return c;
}

}  // namespace

const std::vector<TimmNameRule>& timm_name_map() { return kTimmNameMap; }

std::string timm_name_of(const std::string& ours) {
  int b = -1;
  const TimmNameRule* r = rule_for_ours(ours, &b);
  require(r != nullptr, "'" + ours + "' has no counterpart in timm's gMLP");
  return expand(r->timm, b);
}

std::string our_name_of(const std::string& timm) {
  int b = -1;
  for (const auto& r : kTimmNameMap)
    if (match(r.timm, timm, &b)) return expand(r.ours, b);
  throw Error("'" + timm + "' is not a tensor of timm's gMLP");
}

ModelConfig timm_gmlp_config(const std::string& path, const TimmImportOptions& opt) {
  return config_of(open_timm(path, opt), opt);
}

std::unique_ptr<Model> load_timm_gmlp(const std::string& path, const TimmImportOptions& opt) {
  TimmFile tf = open_timm(path, opt);
  const ModelConfig cfg = config_of(tf, opt);
  const std::string dims = "d = " + std::to_string(cfg.d_model) + ", d_ffn = " + std::to_string(cfg.d_ffn) +
                           ", n = " + std::to_string(cfg.seq_len) + ", classes = " + std::to_string(cfg.n_classes) +
                           ", " + std::to_string(cfg.n_layers) + " blocks";
  // Names and shapes against the header before allocating anything.
  const auto layout = param_layout(cfg);
  std::map<std::string, std::pair<const ParamInfo*, std::vector<int64_t>>> expected;
  std::vector<std::string> order;
  for (const auto& p : layout) {
    int b = -1;
    const TimmNameRule* r = rule_for_ours(p.name, &b);
    require(r != nullptr, "internal: no timm name for '" + p.name + "'");
    const std::string name = expand(r->timm, b);
    expected[name] = {&p, timm_shape(cfg, p, r->conv)};
    order.push_back(name);
  }
  for (const auto& n : tf.f.names()) {
    const bool prefixed = n.compare(0, tf.prefix.size(), tf.prefix) == 0;
    if (prefixed && expected.count(n.substr(tf.prefix.size()))) continue;
    std::string why = "not part of timm's gMLP";
    int b = -1;
    if (prefixed)
      for (const auto& r : kTimmNameMap)
        if (match(r.timm, n.substr(tf.prefix.size()), &b)) why = "a tensor of timm's gMLP, but not of this one";
    throw Error(path + ": unexpected tensor '" + n + "' " + shape_str(tf.f.info(n).shape) + " (" + why + "; " + dims +
                ")");
  }
  for (const auto& name : order) {
    const auto& [p, shape] = expected.at(name);
    require(tf.has(name), path + ": missing tensor '" + tf.full(name) + "' (expected shape " + shape_str(shape) +
                              "; " + dims + ")");
    const TensorInfo& t = tf.f.info(tf.full(name));
    require(t.shape == shape, path + ": tensor '" + tf.full(name) + "' has shape " + shape_str(t.shape) +
                                  ", expected " + shape_str(shape) + " (" + dims + ")");
    require(t.dtype == "F32" || t.dtype == "F16" || t.dtype == "BF16" || t.dtype == "F64",
            path + ": tensor '" + tf.full(name) + "' has dtype " + t.dtype + "; expected F32 (F16, BF16 and F64 "
                                                                            "are converted)");
  }
  auto model = std::make_unique<Model>(cfg);
  for (const auto& name : order) {
    const auto& [p, shape] = expected.at(name);
    tf.read(name, shape, model->weights() + p->offset);
  }
  return model;
}

std::string timm_unsupported_reason(const ModelConfig& c) {
  if (c.task != Task::vision)
    return "timm's gMLP is an image classifier (task \"vision\"), but this model's task is \"" + name_of(c.task) + "\"";
  if (c.sgu != Sgu::split)
    return "timm's SpatialGatingUnit is the split SGU (sgu \"split\"), but this model has sgu \"" + name_of(c.sgu) + "\"";
  if (c.sgu_heads != 1)
    return "timm's gate has one spatial projection, but this model has sgu_heads = " + std::to_string(c.sgu_heads);
  if (c.spatial != Spatial::full)
    return "timm's gate.proj is a full [n, n] nn.Linear, but this model's spatial weights are \"" + name_of(c.spatial) + "\"";
  if (c.d_attn != 0)
    return "timm's gMLP has no tiny attention, but this model is an aMLP (d_attn = " + std::to_string(c.d_attn) + ")";
  if (c.gelu != Gelu::erf)
    return "timm uses nn.GELU (exact erf), but this model uses gelu \"" + name_of(c.gelu) + "\"";
  if (c.pos_embedding != PosEmbedding::none)
    return "timm's gMLP has no position embedding, but this model has \"" + name_of(c.pos_embedding) + "\"";
  return "";
}

void save_timm_gmlp(const Model& model, const std::string& path) {
  const ModelConfig& c = model.config();
  const std::string why = timm_unsupported_reason(c);
  require(why.empty(), "cannot export to timm's gMLP: " + why);
  SafeTensorsWriter w;
  for (const auto& p : model.params()) {
    int b = -1;
    const TimmNameRule* r = rule_for_ours(p.name, &b);
    require(r != nullptr, "cannot export to timm's gMLP: parameter '" + p.name + "' has no timm counterpart");
    // The Conv2d weight [d, C, ph, pw] is the same buffer as our [d, C*ph*pw].
    w.add_f32(expand(r->timm, b), timm_shape(c, p, r->conv), model.weights() + p.offset);
  }
  w.set_metadata("format", "pt");
  w.set_metadata(kExportKey, c.to_json().dump());
  w.write(path);
}

}  // namespace gmlp
