#pragma once
// Checkpoints: the model as safetensors (the tensor names of docs/checkpoint.md, config JSON in the metadata
// under "gmlp.config"), and the training state for exact resumption.
#include <cstdint>
#include <memory>
#include <string>

#include "gmlp/config.h"
#include "gmlp/model.h"
#include "gmlp/optimizer.h"
#include "gmlp/rng.h"
#include "gmlp/safetensors.h"

namespace gmlp {

inline constexpr const char* kConfigKey = "gmlp.config";

// Atomic write of the weights with the config in the metadata.
// weights: host memory of the model's layout to write in place of its own (the weights'
// average, train.model_ema), or null.
void save_model(const Model& model, const std::string& path, const float* weights = nullptr);
// The config stored in a checkpoint's metadata; Error naming the file when absent/bad.
ModelConfig read_model_config(const SafeTensorsFile& file);
// Copies every parameter from `file` (tensor names prefixed by `prefix`), insisting on
// the exact set of names, F32 and the exact shapes.
void load_weights(Model& model, const SafeTensorsFile& file, const std::string& prefix = "");
// The model of a checkpoint, on `device`.
std::unique_ptr<Model> load_model(const std::string& path, Device device = Device::cpu);
// A checkpoint argument may name the file or the run directory holding model.safetensors;
// Error when neither exists.
std::string resolve_model_path(const std::string& path);

// Everything a resumed run needs to continue exactly where it stopped. The weights are
// stored here too, so this one file is self-consistent whatever happens to the others.
struct TrainState {
  int64_t step = 0;         // updates done
  Rng rng;                  // draws the training windows
  nlohmann::json run;       // the RunConfig JSON and data description of the run
  double elapsed_s = 0.0;   // training wall time so far
};
// ema: the weights' average (train.model_ema), in host memory, saved beside them (under
// "ema."), or null.
void save_train_state(const Model& model, AdamW& opt, const TrainState& st, const std::string& path,
                      const float* ema = nullptr);
// The same with the moments given whole (all parameters): a sharded optimizer's, gathered.
void save_train_state(const Model& model, const float* adam_m, const float* adam_v, int64_t adam_steps,
                      const TrainState& st, const std::string& path, const float* ema = nullptr);
// Restores weights, optimizer moments and the state; Error when the file does not match
// the model (names, shapes) or is corrupt. A sharded optimizer keeps its own part of the
// moments, whichever way the file was written. ema: filled with the saved average (an
// Error naming the file when it holds none).
TrainState load_train_state(Model& model, AdamW& opt, const std::string& path, std::vector<float>* ema = nullptr);

// Fine-tuning: copies every tensor of the checkpoint at `path` whose name and shape
// match `model` (never the head: the new task has its own); the encoder's width, depth
// and tokenizer must agree. Returns how many tensors were copied.
size_t init_from_checkpoint(Model& model, const std::string& path);

}  // namespace gmlp
