// gmlp classify: label sentences with a classifier checkpoint (task "classify").
// gmlp classify-image: label an image file with a vision checkpoint.
// Also the classifier half of `gmlp eval`: top-1 and the confusion matrix.
#include <cstdio>
#include <numeric>

#include "commands.h"
#include "gmlp/checkpoint.h"
#include "gmlp/classify.h"
#include "gmlp/error.h"
#include "gmlp/evaluate.h"
#include "gmlp/files.h"
#include "gmlp/image.h"
#include "gmlp/labelled.h"
#include "gmlp/metrics.h"
#include "gmlp/tokenizer.h"

namespace gmlp::cli {
namespace {

std::vector<std::string> names_of(const ModelConfig& c) {
  std::vector<std::string> names;
  for (int i = 0; i < c.n_classes; ++i) names.push_back(class_name(c, i));
  return names;
}

// The k most likely classes, most likely first.
std::vector<int> top_classes(const std::vector<float>& p, int k) {
  std::vector<int> idx(p.size());
  std::iota(idx.begin(), idx.end(), 0);
  k = std::min<int>(k, int(idx.size()));
  std::partial_sort(idx.begin(), idx.begin() + k, idx.end(), [&](int a, int b) { return p[a] > p[b]; });
  idx.resize(size_t(k));
  return idx;
}

void print_prediction(const ModelConfig& c, const std::vector<float>& p, int k, const std::string& what) {
  const auto top = top_classes(p, k);
  std::printf("%s", class_name(c, top[0]).c_str());
  for (int i : top) std::printf("%s%s %.4f", i == top[0] ? "\t" : "  ", class_name(c, i).c_str(), p[size_t(i)]);
  if (!what.empty()) std::printf("\t%s", what.c_str());
  std::printf("\n");
}

struct ClassifyArgs {
  std::string model = "runs/finetune", file, format = "text";
  std::vector<std::string> texts;
  int top = 3, batch = 64;
  std::string device = "auto";
  std::string precision = "fp32";
};

int run_classify(const ClassifyArgs& a) {
  auto model = load_model(resolve_model_path(a.model), choose_device(a.device, a.precision));
  const ModelConfig& c = model->config();
  require(c.task == Task::classify, "'" + a.model + "' is a \"" + name_of(c.task) + "\" model, not a sentence classifier");
  require(a.top >= 1, "--top must be >= 1");
  auto tok = tokenizer_from_json(c.tokenizer);
  std::vector<std::string> texts = a.texts;
  if (!a.file.empty()) {
    // The labelled reader's line rules: a file saved on Windows classifies the same.
    const std::string all = read_file(a.file);
    for (const std::string_view line : split_lines(all))
      if (!line.empty()) texts.emplace_back(line);
  }
  require(!texts.empty(), "nothing to classify: give --text or --file");
  require(a.format == "text" || a.format == "tsv" || a.format == "jsonl",
          "--format must be text, tsv or jsonl, got '" + a.format + "'");
  require(a.batch >= 1, "--batch-size must be >= 1");
  int64_t longer = 0;
  for (const auto& t : texts) longer += tok->encode(t).size() > size_t(c.window());
  if (longer)
    std::fprintf(stderr, "gmlp classify: note: %lld text(s) longer than the model's window of %d tokens, read as %s\n",
                 (long long)longer, c.window(), name_of(c.long_text).c_str());
  const int k = c.n_classes;
  const std::vector<float> probs = classify_texts(*model, *tok, texts, a.batch);
  if (a.format == "tsv") {
    // One header line, then per text: the label, every class's probability, the text.
    std::printf("label");
    for (int j = 0; j < k; ++j) std::printf("\t%s", class_name(c, j).c_str());
    std::printf("\ttext\n");
  }
  for (size_t i = 0; i < texts.size(); ++i) {
    const std::vector<float> p(probs.begin() + ptrdiff_t(i * k), probs.begin() + ptrdiff_t((i + 1) * k));
    const int best = top_classes(p, 1)[0];
    if (a.format == "text") {
      print_prediction(c, p, a.top, texts[i]);
    } else if (a.format == "tsv") {
      std::printf("%s", class_name(c, best).c_str());
      for (float v : p) std::printf("\t%.6f", v);
      std::printf("\t%s\n", texts[i].c_str());
    } else {
      nlohmann::json probs_j = nlohmann::json::object();
      for (int j = 0; j < k; ++j) probs_j[class_name(c, j)] = p[size_t(j)];
      std::printf("%s\n", nlohmann::json({{"label", class_name(c, best)}, {"probabilities", probs_j}, {"text", texts[i]}})
                              .dump(-1, ' ', false, nlohmann::json::error_handler_t::replace)
                              .c_str());
    }
  }
  return 0;
}

struct ImageArgs {
  std::string model = "runs/mnist";
  std::vector<std::string> images;
  int top = 3;
  std::string device = "auto";
  std::string precision = "fp32";
};

int run_classify_image(const ImageArgs& a) {
  auto model = load_model(resolve_model_path(a.model), choose_device(a.device, a.precision));
  const ModelConfig& c = model->config();
  require(c.task == Task::vision, "'" + a.model + "' is a \"" + name_of(c.task) + "\" model, not an image classifier");
  require(a.top >= 1, "--top must be >= 1");
  const Normalization norm =
      c.normalization.is_null() ? Normalization{} : Normalization::from_json(c.normalization, a.model);
  for (const auto& path : a.images) {
    Image img = load_image(path, c.image_channels, c.image_height, c.image_width);
    if (!norm.empty()) normalize(img.pixels.data(), 1, c.image_channels, size_t(c.image_height) * c.image_width, norm);
    print_prediction(c, classify_image(*model, img.pixels.data()), a.top, path);
  }
  return 0;
}

}  // namespace

int run_classifier_eval(Model& model, const std::string& data, int batch, bool json) {
  const ModelConfig& c = model.config();
  ClassEval ev;
  std::string what;
  if (c.task == Task::vision) {
    std::vector<std::string> names = c.class_names;  // an image folder's classes by the model's names
    // Streamed: one pass decodes each image once either way, and never needs the set's
    // memory (ImageNet's 50,000 at 224x224 would hold 7.5 GB).
    ImageSet test = load_image_dataset(data, "test", c.n_classes, {c.image_channels, c.image_height, c.image_width},
                                       &names, /*stream=*/true);
    require(!c.class_names.empty() || names.empty(),
            data + ": an image folder's classes are matched to the model's by name, and this model has no class names");
    normalize_for_model(c, test);
    ev = evaluate_images(model, test, batch);
    what = data + " (test split)";
  } else {
    auto tok = tokenizer_from_json(c.tokenizer);
    const LabelledSet test = load_labelled(data, names_of(c));
    ev = evaluate_texts(model, *tok, test, batch);
    what = data;
  }
  const nlohmann::json rep = class_report(ev.confusion, names_of(c));
  if (json) {
    nlohmann::json j = {{"data", data}, {"examples", ev.examples}, {"loss", ev.loss}, {"accuracy", ev.accuracy},
                        {"confusion", confusion_json(ev.confusion, names_of(c))}};
    j["macro_f1"] = rep["macro_f1"];
    j["per_class"] = rep["per_class"];
    std::printf("%s\n", j.dump().c_str());
  } else {
    std::printf("%s: top-1 accuracy %.4f (%lld examples), macro-F1 %.4f, loss %.4f nats\n\n%s", what.c_str(),
                ev.accuracy, (long long)ev.examples, rep["macro_f1"].get<double>(), ev.loss,
                format_confusion(ev.confusion, names_of(c)).c_str());
  }
  return 0;
}

void add_classify(CLI::App& app, int& exit_code) {
  auto a = std::make_shared<ClassifyArgs>();
  auto* c = app.add_subcommand("classify", "Label sentences with a classifier checkpoint (gmlp finetune)");
  c->add_option("--model", a->model, "Checkpoint file or run directory")->capture_default_str();
  c->add_option("--text", a->texts, "A sentence to classify (repeatable)");
  c->add_option("--file", a->file, "A file of sentences, one a line");
  c->add_option("--top", a->top, "Classes to show per sentence (--format text)")->capture_default_str();
  c->add_option("--format", a->format,
                "text (the top classes), tsv (a header, then label, every class's probability, text) or jsonl")
      ->capture_default_str();
  c->add_option("--batch-size", a->batch, "Text windows per forward pass")->capture_default_str();
  add_device_option(c, a->device, a->precision);
  c->callback([a, &exit_code] { exit_code = run_classify(*a); });

  auto b = std::make_shared<ImageArgs>();
  auto* ci = app.add_subcommand("classify-image", "Label PNG/PGM/PPM images with a vision checkpoint");
  ci->add_option("--model", b->model, "Checkpoint file or run directory")->capture_default_str();
  ci->add_option("images,--image", b->images, "Image files (resized and converted to the model's input)")->required();
  ci->add_option("--top", b->top, "Classes to show per image")->capture_default_str();
  add_device_option(ci, b->device, b->precision);
  ci->callback([b, &exit_code] { exit_code = run_classify_image(*b); });
}

}  // namespace gmlp::cli
