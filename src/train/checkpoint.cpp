#include "gmlp/checkpoint.h"

#include <algorithm>
#include <filesystem>
#include <set>
#include <vector>

#include "gmlp/error.h"
#include "gmlp/files.h"
#include "gmlp/trainer.h"

namespace gmlp {
namespace {
constexpr const char* kStateKey = "gmlp.train_state";

void add_params(SafeTensorsWriter& w, const Model& model, const float* base, const std::string& prefix) {
  for (const auto& p : model.params()) w.add_f32(prefix + p.name, p.shape, base + p.offset);
}


void read_params(const Model& model, const SafeTensorsFile& f, const std::string& prefix, float* base) {
  for (const auto& p : model.params()) {
    require(f.has(prefix + p.name), f.path() + ": missing tensor '" + prefix + p.name + "' (shape " +
                                        shape_str(p.shape) + ")");
    f.read_f32(prefix + p.name, p.shape, base + p.offset);
  }
}
}  // namespace

void save_model(const Model& model, const std::string& path, const float* weights) {
  SafeTensorsWriter w;
  add_params(w, model, weights ? weights : model.weights(), "");
  w.set_metadata(kConfigKey, model.config().to_json().dump());
  w.set_metadata("format", "pt");  // lets tools that expect PyTorch's marker load it
  w.write(path);
}

ModelConfig read_model_config(const SafeTensorsFile& file) {
  auto it = file.metadata().find(kConfigKey);
  require(it != file.metadata().end(),
          file.path() + ": no '" + std::string(kConfigKey) + "' metadata; not a gmlp checkpoint");
  const nlohmann::json j = parse_json(it->second, file.path() + ": '" + std::string(kConfigKey) + "' metadata");
  return ModelConfig::from_json(j, file.path() + " [" + kConfigKey + "]");
}

void load_weights(Model& model, const SafeTensorsFile& file, const std::string& prefix) {
  std::set<std::string> expected;
  for (const auto& p : model.params()) expected.insert(prefix + p.name);
  for (const auto& name : file.names())
    if (name.rfind(prefix, 0) == 0)
      require(expected.count(name) != 0, file.path() + ": unexpected tensor '" + name + "' for this config");
  read_params(model, file, prefix, model.weights());
}

std::unique_ptr<Model> load_model(const std::string& path, Device device) {
  const auto file = SafeTensorsFile::load(path);
  const ModelConfig cfg = read_model_config(file);
  // Match names and shapes against the header before allocating: the model's size is
  // then bounded by the file's, however absurd the config in its metadata.
  for (const auto& p : param_layout(cfg)) {
    require(file.has(p.name), path + ": missing tensor '" + p.name + "' (shape " + shape_str(p.shape) + ")");
    require(file.info(p.name).shape == p.shape, path + ": tensor '" + p.name + "' has shape " +
                                                    shape_str(file.info(p.name).shape) + ", expected " +
                                                    shape_str(p.shape));
  }
  auto model = std::make_unique<Model>(cfg, device);
  load_weights(*model, file, "");
  return model;
}

std::string resolve_model_path(const std::string& path) {
  namespace fs = std::filesystem;
  // A run directory means its selected model: the best validation score when the run
  // kept one, else the last checkpoint.
  if (fs::is_directory(path)) return fs::exists(best_model_file(path)) ? best_model_file(path) : model_file(path);
  require(fs::exists(path), "checkpoint '" + path + "' does not exist");
  return path;
}

void save_train_state(const Model& model, AdamW& opt, const TrainState& st, const std::string& path, const float* ema) {
  require(!opt.sharded(), "internal: a sharded optimizer's moments must be gathered before they are saved");
  save_train_state(model, opt.m().data(), opt.v().data(), opt.steps_taken(), st, path, ema);
}

void save_train_state(const Model& model, const float* adam_m, const float* adam_v, int64_t adam_steps,
                      const TrainState& st, const std::string& path, const float* ema) {
  SafeTensorsWriter w;
  add_params(w, model, model.weights(), "model.");
  add_params(w, model, adam_m, "adam_m.");
  add_params(w, model, adam_v, "adam_v.");
  if (ema) add_params(w, model, ema, "ema.");
  nlohmann::json meta = {{"step", st.step},
                         {"adam_steps", adam_steps},
                         {"rng_state", std::to_string(st.rng.state())},
                         {"rng_inc", std::to_string(st.rng.inc())},
                         {"elapsed_s", st.elapsed_s},
                         {"run", st.run}};
  w.set_metadata(kConfigKey, model.config().to_json().dump());
  w.set_metadata(kStateKey, meta.dump());
  w.write(path);
}

TrainState load_train_state(Model& model, AdamW& opt, const std::string& path, std::vector<float>* ema) {
  const auto file = SafeTensorsFile::load(path);
  auto it = file.metadata().find(kStateKey);
  require(it != file.metadata().end(), path + ": no '" + std::string(kStateKey) + "' metadata; not a training state");
  const ModelConfig stored = read_model_config(file);
  require(stored.to_json() == model.config().to_json(),
          path + ": the training state was saved for a different model config: " + stored.to_json().dump());
  TrainState st;
  try {
    const auto meta = parse_json(it->second, path + ": '" + std::string(kStateKey) + "' metadata");
    st.step = meta.at("step").get<int64_t>();
    st.rng.restore(std::stoull(meta.at("rng_state").get<std::string>()),
                   std::stoull(meta.at("rng_inc").get<std::string>()));
    st.elapsed_s = meta.at("elapsed_s").get<double>();
    st.run = meta.at("run");
    opt.set_steps_taken(meta.at("adam_steps").get<int64_t>());
  } catch (const std::exception& e) {
    throw Error(path + ": malformed '" + std::string(kStateKey) + "' metadata: " + e.what());
  }
  read_params(model, file, "model.", model.weights());
  if (ema) {
    ema->resize(model.num_params());
    read_params(model, file, "ema.", ema->data());
  }
  if (!opt.sharded()) {
    read_params(model, file, "adam_m.", opt.m().data());
    read_params(model, file, "adam_v.", opt.v().data());
    return st;
  }
  std::vector<float> whole(model.num_params());
  for (auto [prefix, mine] : {std::pair{"adam_m.", &opt.m()}, std::pair{"adam_v.", &opt.v()}}) {
    read_params(model, file, prefix, whole.data());
    std::copy(whole.begin() + long(opt.shard_begin()), whole.begin() + long(opt.shard_end()), mine->begin());
  }
  return st;
}

size_t init_from_checkpoint(Model& model, const std::string& path) {
  const auto file = SafeTensorsFile::load(path);
  const ModelConfig src = read_model_config(file);
  require(src.d_model == model.config().d_model && src.n_layers == model.config().n_layers,
          path + ": a " + std::to_string(src.n_layers) + "-layer d=" + std::to_string(src.d_model) +
              " encoder does not fit this " + std::to_string(model.config().n_layers) + "-layer d=" +
              std::to_string(model.config().d_model) + " model");
  if (src.token_input())
    require(src.tokenizer == model.config().tokenizer,
            path + ": its tokenizer differs from this run's; fine-tune with the checkpoint's own tokenizer");
  size_t copied = 0;
  for (const auto& p : model.params()) {
    if (p.name.rfind("head.", 0) == 0 || !file.has(p.name)) continue;
    require(file.info(p.name).shape == p.shape, path + ": tensor '" + p.name + "' has another shape than this model's");
    file.read_f32(p.name, p.shape, model.weights() + p.offset);
    ++copied;
  }
  require(copied > 0, path + ": no tensor matches this model");
  return copied;
}

}  // namespace gmlp
