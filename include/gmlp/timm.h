#pragma once
// Interop with timm's vision gMLP (timm/models/mlp_mixer.py: MlpMixer with
// block_layer=SpatialGatingBlock, mlp_layer=GatedMlp, gate_layer=SpatialGatingUnit;
// timm's gmlp_ti16_224 / gmlp_s16_224 / gmlp_b16_224). docs/timm.md explains the
// name map, the shapes and the LayerNorm eps caveat.
//
// Only safetensors files are read (a timm state_dict saved with safetensors, as on the
// Hugging Face hub); F32, F16, BF16 and F64 tensors are accepted and converted to F32.
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "gmlp/config.h"
#include "gmlp/model.h"

namespace gmlp {

// One row of the name map. "{i}" stands for the block index. `conv` marks the patch
// stem: timm's Conv2d weight [d, C, ph, pw] is our Linear weight [d, C*ph*pw], the
// same numbers in the same order (feature f = c*ph*pw + py*pw + px).
struct TimmNameRule {
  const char* timm;
  const char* ours;
  bool conv;
};
// The whole map, in timm's state_dict order. Every tensor of a timm gMLP classifier and
// every parameter of a timm-representable gmlp.cpp vision model appears exactly once.
const std::vector<TimmNameRule>& timm_name_map();

// Our parameter name -> timm's (e.g. "blocks.3.sgu.spatial.weight" ->
// "blocks.3.mlp_channels.gate.proj.weight"); Error when the name has no timm twin.
std::string timm_name_of(const std::string& ours);
// timm's name -> ours; Error when the name is not one of timm's gMLP tensors.
std::string our_name_of(const std::string& timm);

struct TimmImportOptions {
  // Image size in pixels; 0 = infer. timm's checkpoints do not record the image size,
  // only the patch count n (gate.proj is [n, n]) and the patch size (the stem's kernel).
  // With both 0 the grid must be square (n = s*s, as for every timm gMLP: 224 / 16 =
  // 14, n = 196) and the image is s*ph x s*pw. Give one side and the other follows
  // from n; give both and they must tile into exactly n patches.
  int image_height = 0;
  int image_width = 0;
  // Our model has one LayerNorm eps. timm uses 1e-6 in blocks.{i}.norm and the final
  // norm but PyTorch's default 1e-5 in the gate's LayerNorm (see docs/timm.md).
  float norm_eps = 1e-6f;
  // Prepended to every timm name ("module.", "model.", ...): for state_dicts saved from
  // wrapped models.
  std::string prefix;
  // Stored in the config as "normalization" (e.g. timm's gmlp_s16_224 wants
  // mean = std = 0.5 per channel on pixels in [0, 1]); null keeps what the file's
  // gmlp export metadata says, if anything.
  nlohmann::json normalization;
};

// The config a timm checkpoint describes (task "vision", sgu "split", one head, full
// spatial W, exact GELU), inferred from the tensor shapes; Error naming the tensor and
// the shapes on any inconsistency.
ModelConfig timm_gmlp_config(const std::string& path, const TimmImportOptions& opt = {});
// Loads a timm-named gMLP checkpoint. Every tensor must be there, with the right shape,
// and nothing else (a missing, unexpected or mis-shaped tensor is an Error naming it).
std::unique_ptr<Model> load_timm_gmlp(const std::string& path, const TimmImportOptions& opt = {});

// Why timm cannot hold this model (empty when it can): timm's gMLP is a vision
// classifier with the split SGU, one gate head, a full [n, n] spatial weight, no tiny
// attention and exact (erf) GELU. Stochastic depth is training-only and exports fine.
std::string timm_unsupported_reason(const ModelConfig& c);
// Writes the model with timm's names and shapes (atomically). The config JSON goes into
// the metadata under "gmlp.timm_export" (timm ignores it; load_timm_gmlp takes the
// class names and normalisation back from it). Error when timm cannot hold the model.
void save_timm_gmlp(const Model& model, const std::string& path);

}  // namespace gmlp
