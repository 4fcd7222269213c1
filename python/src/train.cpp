// gmlp._core.train: the trainer of `gmlp train` (src/train/trainer.cpp) with the data
// from files or from memory (TrainData), and a Python callback at every metrics line.
#include <filesystem>
#include <optional>

#include "common.h"
#include "gmlp/checkpoint.h"
#include "gmlp/search.h"
#include "gmlp/trainer.h"

namespace gmlp::py_api {
namespace {

std::vector<int32_t> to_vector(py::handle obj, const std::string& what) {
  auto a = int32_array(obj, what);
  if (a.ndim() != 1) throw py::value_error(what + ": expected a 1-D array");
  return std::vector<int32_t>(a.data(), a.data() + a.size());
}

// images [N, C, H, W] floats in [0, 1] with labels [N]; or uint8 0..255, kept as bytes (a
// quarter of the memory; the model normalises them as it reads them).
ImageSet image_set(py::handle images, py::handle labels, int n_classes, const std::string& what) {
  py::array any = py::module_::import("numpy").attr("asarray")(images);
  if (py::isinstance<py::array_t<uint8_t>>(any)) {
    auto a = py::array_t<uint8_t, py::array::c_style | py::array::forcecast>::ensure(any);
    if (a.ndim() != 4) throw py::value_error(what + " images: expected shape [N, C, H, W]");
    std::vector<uint8_t> bytes(a.data(), a.data() + a.size());
    return checked_args([&] {
      return make_image_set(std::move(bytes), to_vector(labels, what + " labels"), int(a.shape(1)), int(a.shape(2)),
                            int(a.shape(3)), n_classes, what);
    });
  }
  auto a = float_array(images, what + " images");
  if (a.ndim() != 4) throw py::value_error(what + " images: expected shape [N, C, H, W]");
  std::vector<float> pixels(a.data(), a.data() + a.size());
  return checked_args([&] {
    return make_image_set(std::move(pixels), to_vector(labels, what + " labels"), int(a.shape(1)), int(a.shape(2)),
                          int(a.shape(3)), n_classes, what);
  });
}

py::dict summary_dict(const TrainSummary& s, const std::string& out) {
  py::dict d;
  d["steps"] = s.steps;
  d["interrupted"] = s.interrupted;
  d["last_loss"] = s.last_loss;
  d["val"] = from_json(s.val_metrics);
  d["elapsed_s"] = s.elapsed_s;
  d["units_per_s"] = s.tokens_per_s;
  // The run's selected model, as a run directory means on the command line.
  d["model"] = std::filesystem::exists(best_model_file(out)) ? best_model_file(out) : model_file(out);
  d["report"] = from_json(s.report);
  // The weights' average (train.model_ema), a model file of its own; None without one.
  d["ema_model"] = std::filesystem::exists(ema_model_file(out)) ? py::object(py::str(ema_model_file(out))) : py::none();
  return d;
}

py::dict run_train(py::handle config, const std::string& out, const std::string& data_path,
                   const std::string& test_path, const std::string& val_path, std::shared_ptr<TrainData> memory,
                   bool resume, int64_t steps, const std::string& init_from, py::object on_log, bool progress,
                   const std::vector<std::pair<std::string, std::vector<std::string>>>& grid, bool refit,
                   const std::string& device, int grad_accum) {
  if (grad_accum < 0) throw py::value_error("grad_accum: " + std::to_string(grad_accum) + " pieces; give 1 or more");
  TrainOptions o;
  o.grad_accum = grad_accum;  // over the config's; a resumed run may change it, as on the command line
  o.device = device_arg(device);
  o.out_dir = out;
  o.resume = resume;
  o.progress_bar = progress;
  o.data = memory;
  if (resume) {
    if (!config.is_none()) throw py::value_error("a resumed run continues with its saved config: give no config");
    if (!grid.empty() || refit) throw py::value_error("grid, refit: a resumed run continues as it was; give neither");
    o.extend_to = steps;
  } else {
    if (config.is_none()) throw py::value_error("config: a new run needs a config (a dict, {} for the defaults)");
    // What the data decides (classes, a vision model's image shape) may stay open.
    o.run = checked_args([&] { return RunConfig::from_json(to_json(config, "config"), "config", /*open=*/true); });
    if (steps > 0) o.run.train.steps = steps;
    if (!memory) {
      if (data_path.empty()) throw py::value_error("data: a new run needs data (a path or arrays)");
      require_exists(data_path, "data");
      o.data_path = data_path;
    }
    for (const auto& [path, what, field] : {std::tuple{&test_path, "test data", &o.test_path},
                                            std::tuple{&val_path, "validation data", &o.val_path}})
      if (!path->empty()) {
        require_exists(*path, what);
        *field = *path;
      }
    if (!init_from.empty()) {
      require_exists(init_from, "checkpoint");
      o.init_from = resolve_model_path(init_from);
    }
    // Checked before anything trains, as the CLI does.
    if (refit && o.run.model.task != Task::classify)
      throw py::value_error("refit: for text classification (task \"classify\") only");
    if ((refit || !grid.empty()) && !holds_out_validation(o))
      throw py::value_error(std::string(refit ? "refit" : "grid") +
                            ": choosing needs validation: give val, or a train.val_fraction above 0");
    if (refit) o.score_test = false;  // the test set waits for the refit model: scored once
  }
  // At every metrics line: Ctrl-C (Python's signal flag) and the callback, under the
  // GIL. A Python exception stops the run like an interruption (a checkpoint is written)
  // and is raised again once the trainer has returned.
  std::optional<py::error_already_set> err;
  o.on_log = [&](const nlohmann::json& line) -> bool {
    py::gil_scoped_acquire gil;
    try {
      if (PyErr_CheckSignals() != 0) throw py::error_already_set();
      if (on_log.is_none()) return true;
      py::object r = on_log(from_json(line));
      return !(py::isinstance<py::bool_>(r) && !r.cast<bool>());  // False stops
    } catch (py::error_already_set& e) {
      err.emplace(std::move(e));
      return false;
    }
  };
  // What the trainer (or the search) returns, with the Python exception that stopped it
  // raised in place of the trainer's "interrupted" error.
  auto guarded = [&](auto&& run) {
    py::gil_scoped_release nogil;
    apply_threads();
    try {
      return run();
    } catch (...) {
      if (err) {
        py::gil_scoped_acquire gil;
        throw *err;
      }
      throw;
    }
  };
  if (!grid.empty()) {
    std::vector<SearchAxis> axes;
    for (const auto& [key, values] : grid) axes.push_back({key, values});
    const SearchResult r = guarded([&] { return search(o, axes, refit, /*overwrite=*/true); });
    py::dict d = summary_dict(r.final, refit ? refit_dir(out) : r.trials[r.chosen].options.out_dir);
    d["model"] = r.model;
    d["search"] = from_json(r.table);
    return d;
  }
  const TrainSummary s = guarded([&] { return gmlp::train(o); });
  if (err) throw *err;
  if (!refit || s.interrupted) return summary_dict(s, out);
  const TrainSummary r = guarded([&] { return gmlp::refit(o, s, refit_dir(out)); });
  if (err) throw *err;
  py::dict d = summary_dict(r, refit_dir(out));
  d["chosen"] = summary_dict(s, out);
  return d;
}

}  // namespace

void bind_train(py::module_& m) {
  py::class_<TrainData, std::shared_ptr<TrainData>>(m, "TrainData")
      .def(py::init<>())
      .def_readwrite("name", &TrainData::name)
      .def("set_text", [](TrainData& d, const std::string& text) { d.text = text; })
      .def("set_tokens", [](TrainData& d, py::handle ids) { d.tokens = to_vector(ids, "tokens"); })
      // Labelled texts; labels are class names (the Python side names integer labels).
      .def(
          "set_texts",
          [](TrainData& d, std::vector<std::string> texts, const std::vector<std::string>& labels,
             const std::vector<std::string>& class_names, std::vector<std::string> test_texts,
             const std::vector<std::string>& test_labels, std::vector<std::string> val_texts,
             const std::vector<std::string>& val_labels) {
            checked_args([&] {
              d.texts = make_labelled(std::move(texts), labels, class_names, "texts");
              if (!test_texts.empty() || !test_labels.empty())
                d.test_texts = make_labelled(std::move(test_texts), test_labels, d.texts.class_names, "test texts");
              if (!val_texts.empty() || !val_labels.empty())
                d.val_texts = make_labelled(std::move(val_texts), val_labels, d.texts.class_names, "validation texts");
            });
          },
          py::arg("texts"), py::arg("labels"), py::arg("class_names"), py::arg("test_texts"), py::arg("test_labels"),
          py::arg("val_texts"), py::arg("val_labels"))
      .def(
          "set_images",
          [](TrainData& d, py::handle images, py::handle labels, py::handle test_images, py::handle test_labels,
             int n_classes) {
            d.images = image_set(images, labels, n_classes, "training");
            if (!test_images.is_none())
              d.test_images = image_set(test_images, test_labels, n_classes > 0 ? n_classes : d.images.n_classes, "test");
          },
          py::arg("images"), py::arg("labels"), py::arg("test_images"), py::arg("test_labels"), py::arg("n_classes"));
  m.def(
      "finetune_config",
      [](const std::string& init_from) {
        if (!init_from.empty()) require_exists(init_from, "checkpoint");
        return from_json(finetune_config(init_from));
      },
      py::arg("init_from"));
  m.def("train", &run_train, py::arg("config"), py::arg("out"), py::arg("data_path"), py::arg("test_path"),
        py::arg("val_path"), py::arg("memory"), py::arg("resume"), py::arg("steps"), py::arg("init_from"),
        py::arg("on_log"), py::arg("progress"), py::arg("grid"), py::arg("refit"), py::arg("device") = "cpu",
        py::arg("grad_accum") = 0);
}

}  // namespace gmlp::py_api
