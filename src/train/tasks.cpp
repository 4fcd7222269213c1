// The task factory: builds each task's data and completes the model config from it
// (the tokenizer's vocabulary, a classifier's classes, a vision model's image shape),
// once, before the model exists.
#include <memory>

#include "gmlp/error.h"
#include "gmlp/files.h"
#include "gmlp/safetensors.h"
#include "gmlp/trainer.h"
#include "train/tasks.h"

namespace gmlp {
namespace {

// A char tokenizer without its characters is built from the corpus (a file, or text in
// memory); errors (invalid UTF-8, an empty file) then name the corpus.
std::unique_ptr<Tokenizer> make_tokenizer(const nlohmann::json& spec, const TaskInputs& in) {
  if (spec.is_object() && spec.contains("kind") && spec["kind"] == "char" && !spec.contains("chars")) {
    require(!in.memory || !in.memory->text.empty(),
            in.data_name() + ": a char tokenizer without \"chars\" is built from a text corpus; token ids do not "
                             "give one (list the \"chars\" or train on text)");
    const std::string text = in.memory ? in.memory->text : read_file(in.data_path);
    try {
      return build_char_tokenizer(text, tokenizer_specials(spec));
    } catch (const Error& e) {
      throw Error("'" + in.data_name() + "': " + e.what());
    }
  }
  return tokenizer_from_json(spec);
}

}  // namespace

std::string TaskInputs::data_name() const { return memory ? memory->name : data_path; }

std::unique_ptr<TrainTask> make_text_task(RunConfig& rc, const TaskInputs& in, std::unique_ptr<Tokenizer> tok);
std::unique_ptr<TrainTask> make_classify_task(RunConfig& rc, const TaskInputs& in, std::unique_ptr<Tokenizer> tok);
std::unique_ptr<TrainTask> make_vision_task(RunConfig& rc, const TaskInputs& in);

std::unique_ptr<TrainTask> make_task(RunConfig& rc, const TaskInputs& in) {
  ModelConfig& m = rc.model;
  require(!in.join_validation || m.task == Task::classify,
          "a refit (training on the validation examples too) is for text classification; the task is \"" +
              name_of(m.task) + "\"");
  require(m.task == Task::classify || (in.val_path.empty() && !(in.memory && in.memory->val_texts.size())),
          "validation texts (--val) are for text classification; a \"" + name_of(m.task) + "\" run holds out " +
              (m.task == Task::vision ? "its test images" : "train.val_fraction of its corpus"));
  require(m.task == Task::vision || (rc.train.mixup == 0 && rc.train.cutmix == 0 && rc.train.random_erase == 0 &&
                                     rc.train.auto_augment.empty() && rc.train.repeated_aug == 1),
          "'train.mixup', 'train.cutmix', 'train.random_erase', 'train.auto_augment' and 'train.repeated_aug' are "
          "augmentations of images; the task is \"" +
              name_of(m.task) + "\"");
  require(!rc.train.shuffle || m.task == Task::vision || m.task == Task::classify,
          "'train.shuffle' takes a data set's examples in epochs (a classifier's texts, a vision model's images); a "
          "\"" +
              name_of(m.task) + "\" run draws its windows at random");
  if (m.task == Task::vision) {
    auto task = make_vision_task(rc, in);
    m.validate();
    return task;
  }
  auto tok = make_tokenizer(m.tokenizer, in);
  // Masked LM and classification need [PAD] and [MASK]; byte and char vocabularies get
  // them appended when the config did not list them.
  if (m.task != Task::causal_lm && (tok->pad_id() < 0 || tok->mask_id() < 0)) {
    require(tok->kind() != "sentencepiece", "task \"" + name_of(m.task) + "\" needs [PAD] and [MASK] in the tokenizer");
    nlohmann::json j = tok->to_json();
    j["specials"] = mlm_specials();
    tok = tokenizer_from_json(j);
  }
  m.tokenizer = tok->to_json();
  m.vocab_size = tok->vocab_size();
  auto task = m.task == Task::classify ? make_classify_task(rc, in, std::move(tok))
                                       : make_text_task(rc, in, std::move(tok));
  m.validate();
  return task;
}

}  // namespace gmlp
