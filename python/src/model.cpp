// gmlp._core.Model: a model with its tokenizer. Inference, generation, classification,
// checkpoints, and the parameters as NumPy views of the one parameter buffer (no copies;
// each view holds the Python model alive as its base).
#include <memory>
#include <mutex>
#include <optional>
#include <vector>

#include "common.h"
#include "gmlp/checkpoint.h"
#include "gmlp/classify.h"
#include "gmlp/generate.h"
#include "gmlp/image.h"
#include "gmlp/model.h"
#include "gmlp/tokenizer.h"

namespace gmlp::py_api {
namespace {

struct PyModel {
  std::unique_ptr<Model> model;
  std::unique_ptr<Tokenizer> tok;  // token tasks
  std::mutex mu;                   // one computation at a time: the model's arena is shared by its calls

  explicit PyModel(std::unique_ptr<Model> m) : model(std::move(m)) {
    if (model->config().token_input()) tok = tokenizer_from_json(model->config().tokenizer);
  }
  const ModelConfig& cfg() const { return model->config(); }
};

// The engine's side of a call: the GIL released first, then the model's lock taken, so a
// thread that waits for the lock never holds the GIL.
struct Compute {
  py::gil_scoped_release nogil;
  std::lock_guard<std::mutex> lock;
  explicit Compute(PyModel& m) : lock(m.mu) { apply_threads(); }
};

std::string shape_of(const py::array& a) {
  std::string s = "(";
  for (py::ssize_t i = 0; i < a.ndim(); ++i) s += (i ? ", " : "") + std::to_string(a.shape(i));
  return s + (a.ndim() == 1 ? ",)" : ")");
}

ModelConfig config_from(py::handle obj) {
  nlohmann::json j = to_json(obj, "config");
  if (!j.is_object()) throw py::value_error("config: expected a dict (the model section of a config)");
  return checked_args([&] { return ModelConfig::from_json(j, "config"); });
}

std::vector<int32_t> prompt_ids(const PyModel& m, py::handle prompt) {
  if (py::isinstance<py::str>(prompt)) {
    const std::string text = prompt.cast<std::string>();
    return checked_args([&] { return m.tok->encode(text); });
  }
  auto a = int32_array(prompt, "prompt");
  if (a.ndim() != 1) throw py::value_error("prompt: expected text or a 1-D sequence of token ids, got shape " + shape_of(a));
  return std::vector<int32_t>(a.data(), a.data() + a.size());
}

// Logits of a batch: token ids [B, T] (or [T]) with optional lengths [B], or images
// [B, C, H, W] (or [C, H, W]) as the model takes them (normalised floats), or their
// uint8 pixels, which the model normalises by its stored normalisation as it reads them
// (Batch::image_bytes). Returns [B, T, V] (per-token tasks) or [B, n_classes]; without
// the batch axis when the input had none.
py::array logits(PyModel& m, py::handle x, py::handle lengths) {
  const ModelConfig& c = m.cfg();
  Batch b;
  IntArray ids, lens;
  py::array images;
  bool single = false;
  if (c.token_input()) {
    ids = int32_array(x, "ids");
    if (ids.ndim() == 1) {
      single = true;
      ids = IntArray::ensure(ids.attr("reshape")(1, -1));
    }
    if (ids.ndim() != 2 || ids.shape(0) < 1 || ids.shape(1) < 1)
      throw py::value_error("ids: expected token ids of shape [B, T] or [T], got shape " + shape_of(ids));
    b.B = int(ids.shape(0));
    b.T = int(ids.shape(1));
    b.tokens = ids.data();
    b.stride = b.T;
    if (!lengths.is_none()) {
      lens = int32_array(lengths, "lengths");
      if (lens.ndim() != 1 || lens.shape(0) != b.B)
        throw py::value_error("lengths: expected " + std::to_string(b.B) + " lengths, got shape " + shape_of(lens));
      b.lengths = lens.data();
    }
  } else {
    if (!lengths.is_none()) throw py::value_error("lengths: a vision model takes whole images");
    py::array any = py::module_::import("numpy").attr("asarray")(x);
    const bool bytes = py::isinstance<py::array_t<uint8_t>>(any);
    images = bytes ? py::array(py::array_t<uint8_t, py::array::c_style | py::array::forcecast>::ensure(any))
                   : py::array(float_array(any, "images"));
    if (images.ndim() == 3) {
      single = true;
      images = images.attr("reshape")(1, images.shape(0), images.shape(1), images.shape(2));
    }
    if (images.ndim() != 4 || images.shape(0) < 1 || images.shape(1) != c.image_channels ||
        images.shape(2) != c.image_height || images.shape(3) != c.image_width)
      throw py::value_error("images: expected shape [B, " + std::to_string(c.image_channels) + ", " +
                            std::to_string(c.image_height) + ", " + std::to_string(c.image_width) + "], got " +
                            shape_of(images));
    b.B = int(images.shape(0));
    b.T = c.seq_len;
    if (bytes)
      b.image_bytes = static_cast<const uint8_t*>(images.data());
    else
      b.images = static_cast<const float*>(images.data());
  }
  const bool per_token = c.per_token_output();
  const int V = c.out_dim();
  std::vector<py::ssize_t> shape = per_token ? std::vector<py::ssize_t>{b.B, b.T, V} : std::vector<py::ssize_t>{b.B, V};
  py::array_t<float> out(shape);
  float* dst = out.mutable_data();
  {
    Compute g(m);
    NoGrad no_grad(*m.model);
    checked_args([&] { return m.model->forward(b); });
    const float* src = m.model->logits();
    if (per_token) {  // the engine's rows are sequence-major: row t * B + b
      for (int t = 0; t < b.T; ++t)
        for (int r = 0; r < b.B; ++r)
          std::copy(src + (size_t(t) * b.B + r) * V, src + (size_t(t) * b.B + r + 1) * V,
                    dst + (size_t(r) * b.T + t) * V);
    } else {
      std::copy(src, src + size_t(b.B) * V, dst);
    }
  }
  if (single) return out[py::int_(0)];
  return out;
}

py::list generate_ids(PyModel& m, py::handle prompt, int max_tokens, float temperature, int top_k, float top_p,
                      int64_t seed, py::object on_token) {
  if (!m.cfg().causal()) throw py::value_error("generate needs a causal language model; this one is \"" + name_of(m.cfg().task) + "\"");
  const std::vector<int32_t> ids = prompt_ids(m, prompt);
  SamplingOptions opt;
  opt.temperature = temperature;
  opt.top_k = top_k;
  opt.top_p = top_p;
  checked_args([&] { opt.validate(); });
  std::optional<py::error_already_set> err;
  std::vector<int32_t> out;
  {
    Compute g(m);
    Rng rng(uint64_t(seed), 3);  // as `gmlp generate --seed`: the same seed, the same text
    auto cb = [&](int32_t id) -> bool {
      if (on_token.is_none()) return true;
      py::gil_scoped_acquire gil;
      try {
        py::object r = on_token(id);
        return !(py::isinstance<py::bool_>(r) && !r.cast<bool>());  // False stops
      } catch (py::error_already_set& e) {
        err.emplace(std::move(e));
        return false;
      }
    };
    out = checked_args([&] { return generate(*m.model, ids, max_tokens, opt, rng, cb); });
  }
  if (err) throw *err;
  return py::cast(out);
}

void require_classifier(const PyModel& m, Task want) {
  if (m.cfg().task != want)
    throw py::value_error(std::string(want == Task::vision ? "images" : "texts") + " are classified by a \"" +
                          name_of(want) + "\" model; this one is \"" + name_of(m.cfg().task) + "\"");
}

py::array classify_texts(PyModel& m, const std::vector<std::string>& texts) {
  require_classifier(m, Task::classify);
  const int k = m.cfg().n_classes;
  py::array_t<float> out(std::vector<py::ssize_t>{py::ssize_t(texts.size()), k});
  float* dst = out.mutable_data();
  Compute g(m);
  for (size_t i = 0; i < texts.size(); ++i) {
    const auto p = checked_args([&] {
      try {
        return classify_text(*m.model, *m.tok, texts[i]);
      } catch (const Error& e) {
        throw Error("texts[" + std::to_string(i) + "]: " + e.what());
      }
    });
    std::copy(p.begin(), p.end(), dst + i * size_t(k));
  }
  return out;
}

// images [N, C, H, W]: floats in [0, 1], the model's stored normalisation applied here, or
// uint8 0..255, which the model normalises as it reads them (the same values); 64 a
// forward.
py::array classify_images(PyModel& m, py::handle x) {
  require_classifier(m, Task::vision);
  const ModelConfig& c = m.cfg();
  py::array any = py::module_::import("numpy").attr("asarray")(x);
  const bool bytes = py::isinstance<py::array_t<uint8_t>>(any);
  py::array a = bytes ? py::array(py::array_t<uint8_t, py::array::c_style | py::array::forcecast>::ensure(any))
                      : py::array(float_array(any, "images"));
  if (a.ndim() != 4 || a.shape(1) != c.image_channels || a.shape(2) != c.image_height || a.shape(3) != c.image_width)
    throw py::value_error("images: expected shape [N, " + std::to_string(c.image_channels) + ", " +
                          std::to_string(c.image_height) + ", " + std::to_string(c.image_width) + "], got " + shape_of(a));
  const size_t n = size_t(a.shape(0)), per = size_t(c.image_channels) * c.image_height * c.image_width;
  std::vector<float> pixels;
  if (!bytes) {
    const float* f = static_cast<const float*>(a.data());
    pixels.assign(f, f + n * per);
    if (!c.normalization.is_null())
      normalize(pixels.data(), n, c.image_channels, size_t(c.image_height) * c.image_width,
                Normalization::from_json(c.normalization, "model config 'normalization'"));
  }
  py::array_t<float> out(std::vector<py::ssize_t>{py::ssize_t(n), c.n_classes});
  Compute g(m);
  const std::vector<float> p = classify_images(*m.model, bytes ? nullptr : pixels.data(),
                                               bytes ? static_cast<const uint8_t*>(a.data()) : nullptr, n, 64);
  std::copy(p.begin(), p.end(), out.mutable_data());
  return out;
}

// Every parameter in checkpoint order: on the CPU a view into the model's buffer; on a
// GPU a read-only copy of the device's weights (a view of the host copy would miss the
// device's later changes, and writes through it would reach the device only by chance).
py::dict state_dict(py::object self) {
  PyModel& m = self.cast<PyModel&>();
  const bool host = m.model->device() == Device::cpu;
  py::dict d;
  std::vector<float> w;  // a GPU model's weights, read under the model's lock
  if (!host) {
    Compute g(m);
    const Model& model = *m.model;
    w.assign(model.weights(), model.weights() + model.num_params());
  }
  for (const ParamInfo& p : m.model->params()) {
    const std::vector<py::ssize_t> shape(p.shape.begin(), p.shape.end());
    if (host) {
      d[py::str(p.name)] = py::array_t<float>(shape, m.model->weights() + p.offset, self);
      continue;
    }
    py::array_t<float> copy(shape, w.data() + p.offset);
    copy.attr("setflags")(py::arg("write") = false);
    d[py::str(p.name)] = copy;
  }
  return d;
}

const ParamInfo& param_named(const PyModel& m, const std::string& name) {
  for (const ParamInfo& p : m.model->params())
    if (p.name == name) return p;
  throw py::value_error("no parameter named '" + name + "'");
}

// A model of the same config and weights on another device.
std::unique_ptr<PyModel> moved_to(PyModel& m, const std::string& device) {
  const Device d = device_arg(device);
  Compute g(m);
  auto out = std::make_unique<Model>(m.cfg(), d);
  const Model& src = *m.model;
  std::copy(src.weights(), src.weights() + src.num_params(), out->weights());
  return std::make_unique<PyModel>(std::move(out));
}

}  // namespace

void bind_model(py::module_& mod) {
  py::class_<PyModel>(mod, "Model")
      .def(py::init([](py::handle config, uint64_t seed, const std::string& device) {
             const ModelConfig cfg = config_from(config);
             auto model = std::make_unique<Model>(cfg, device_arg(device));
             Rng rng(seed, 1);  // as the trainer initialises
             model->init(rng);
             return std::make_unique<PyModel>(std::move(model));
           }),
           py::arg("config"), py::arg("seed") = 1337, py::arg("device") = "cpu")
      .def_static(
          "load",
          [](const std::string& path, const std::string& device) {
            const Device d = device_arg(device);
            require_exists(path, "checkpoint");
            const std::string file = resolve_model_path(path);
            require_exists(file, "checkpoint");
            std::unique_ptr<Model> model;
            {
              py::gil_scoped_release nogil;
              model = load_model(file, d);
            }
            return std::make_unique<PyModel>(std::move(model));
          },
          py::arg("path"), py::arg("device") = "cpu")
      .def_property_readonly("device", [](const PyModel& m) { return name_of(m.model->device()); })
      .def("to", &moved_to, py::arg("device"))
      .def(
          "save",
          [](PyModel& m, const std::string& path) {
            Compute g(m);
            save_model(*m.model, path);
          },
          py::arg("path"))
      .def_property_readonly("config", [](const PyModel& m) { return from_json(m.cfg().to_json()); })
      .def_property_readonly("num_params", [](const PyModel& m) { return m.model->num_params(); })
      .def("logits", &logits, py::arg("ids"), py::arg("lengths") = py::none())
      .def("_generate", &generate_ids, py::arg("prompt"), py::arg("max_tokens"), py::arg("temperature"),
           py::arg("top_k"), py::arg("top_p"), py::arg("seed"), py::arg("on_token") = py::none())
      .def("encode",
           [](const PyModel& m, const std::string& text) {
             if (!m.tok) throw py::value_error("a vision model has no tokenizer");
             const auto ids = checked_args([&] { return m.tok->encode(text); });
             IntArray a(py::ssize_t(ids.size()));
             std::copy(ids.begin(), ids.end(), a.mutable_data());
             return a;
           })
      .def("_decode_bytes",
           [](const PyModel& m, py::handle ids) {
             if (!m.tok) throw py::value_error("a vision model has no tokenizer");
             auto a = int32_array(ids, "ids");
             const std::vector<int32_t> v(a.data(), a.data() + a.size());
             return py::bytes(checked_args([&] { return m.tok->decode(v); }));
           })
      .def("_classify_texts", &classify_texts)
      .def("_classify_images", &classify_images)
      .def("state_dict", &state_dict)
      .def("_buffer",
           [](py::object self) {
             PyModel& m = self.cast<PyModel&>();
             if (m.model->device() != Device::cpu) throw py::value_error("a GPU model's weights are no host buffer");
             return py::array_t<float>({py::ssize_t(m.model->num_params())}, m.model->weights(), self);
           })
      // One tensor's values (float32, its shape's size, checked by the caller) into the
      // weights, wherever they live: the host copy is marked newer, so the next call
      // on a GPU model uploads it.
      .def("_assign", [](PyModel& m, const std::string& name, py::handle values) {
        const ParamInfo& p = param_named(m, name);
        auto a = float_array(values, name);
        if (size_t(a.size()) != p.size)
          throw py::value_error("'" + name + "': " + std::to_string(a.size()) + " values for " + std::to_string(p.size));
        Compute g(m);
        std::copy(a.data(), a.data() + a.size(), m.model->weights() + p.offset);
      });
}

}  // namespace gmlp::py_api
