// What `gmlp finetune` and gmlp.finetune_config start from (gmlp/trainer.h).
#include "gmlp/checkpoint.h"
#include "gmlp/error.h"
#include "gmlp/safetensors.h"
#include "gmlp/trainer.h"

namespace gmlp {
namespace {

// Fine-tuning settings: shorter and gentler than pretraining, evaluated on the whole
// test set.
TrainConfig finetune_defaults() {
  TrainConfig t;
  t.batch_size = 32;
  t.steps = 1500;
  t.lr = 1e-3f;
  t.min_lr = 1e-5f;
  t.warmup = 100;
  t.weight_decay = 0.01f;
  t.eval_batches = 0;
  t.ckpt_every = 500;
  t.log_every = 50;
  // Model selection on a tenth of the training file, evaluated often enough to stop
  // early when the validation accuracy no longer improves.
  t.val_fraction = 0.1f;
  t.eval_every = 100;
  t.patience = 5;
  return t;
}

}  // namespace

nlohmann::json finetune_config(const std::string& init_from) {
  nlohmann::json base = RunConfig{}.to_json();
  base["train"] = finetune_defaults().to_json();
  if (!init_from.empty()) {
    const auto file = SafeTensorsFile::load(resolve_model_path(init_from));
    nlohmann::json m = read_model_config(file).to_json();
    require(m["task"] != "vision", "fine-tuning classifies text; '" + init_from + "' is a vision model");
    m["n_classes"] = 0;  // from the data
    m.erase("class_names");
    base["model"] = m;
  }
  base["model"]["task"] = "classify";
  // BERT's fine-tuning dropout (0.1), which the gMLP paper's fine-tuning followed.
  base["model"]["dropout"] = 0.1;
  base["model"]["head_dropout"] = 0.1;
  // Long texts read window by window, probabilities averaged: the best of the three on
  // validation in docs/nlp.md (spam, one epoch each).
  base["model"]["long_text"] = "chunks";
  return base;
}

}  // namespace gmlp
