// gmlp._core: the pybind11 extension behind the Python package gmlp (docs/python.md).
// Engine errors become gmlp.Error (a RuntimeError), bad arguments ValueError, missing
// files FileNotFoundError; the GIL is released while the engine computes.
#include <omp.h>

#include <cerrno>
#include <filesystem>
#include <limits>

#include "common.h"
#include "gmlp/device.h"
#include "gmlp/error.h"
#include "gmlp/threads.h"

namespace gmlp::py_api {

void bind_model(py::module_& m);
void bind_train(py::module_& m);

nlohmann::json to_json(py::handle obj, const std::string& what) {
  std::string text;
  try {
    // allow_nan=False: NaN is no JSON, and nlohmann would refuse it less clearly.
    text = py::module_::import("json").attr("dumps")(obj, py::arg("allow_nan") = false).cast<std::string>();
  } catch (py::error_already_set& e) {
    throw py::value_error(what + ": not expressible as JSON (" + std::string(e.what()) + ")");
  }
  return nlohmann::json::parse(text);
}

py::object from_json(const nlohmann::json& j) { return py::module_::import("json").attr("loads")(j.dump()); }

void require_exists(const std::string& path, const std::string& what) {
  std::error_code ec;
  if (std::filesystem::exists(path, ec)) return;
  PyErr_SetObject(PyExc_FileNotFoundError,
                  py::make_tuple(ENOENT, what + " '" + path + "' does not exist", path).ptr());
  throw py::error_already_set();
}

Device device_arg(const std::string& s) {
  if (s != "cpu" && s != "cuda" && s != "auto")
    throw py::value_error("device: '" + s + "' is not one of cpu, cuda, auto");
  try {
    return parse_device(s);
  } catch (const Error& e) {
    // The engine's message names the CLI's flag ("--device cuda: ..."): name the argument.
    std::string why = e.what();
    const std::string flag = "--device " + s + ": ";
    if (why.rfind(flag, 0) == 0) why = why.substr(flag.size());
    throw Error("device='" + s + "': " + why);
  }
}

static int g_threads = 0;

int threads_setting() { return g_threads; }
void set_threads_setting(int n) {
  g_threads = n;
  apply_threads();
}

void apply_threads() {
  if (g_threads > 0) gmlp::set_threads(g_threads);
}

IntArray int32_array(py::handle obj, const std::string& what) {
  py::array a = py::module_::import("numpy").attr("asarray")(obj);
  const char kind = a.dtype().kind();
  if (kind != 'i' && kind != 'u')
    throw py::value_error(what + ": expected integers, got an array of dtype " + py::str(a.dtype()).cast<std::string>());
  if (a.size() > 0 && a.dtype().itemsize() >= 4) {
    const auto lo = py::module_::import("numpy").attr("min")(a).cast<long long>();
    const auto hi = py::module_::import("numpy").attr("max")(a).cast<unsigned long long>();
    if (lo < std::numeric_limits<int32_t>::min() || hi > uint64_t(std::numeric_limits<int32_t>::max()))
      throw py::value_error(what + ": value " + std::to_string(lo < std::numeric_limits<int32_t>::min() ? lo : (long long)hi) +
                            " does not fit a token id or label (int32)");
  }
  auto r = IntArray::ensure(a);
  if (!r) throw py::error_already_set();
  return r;
}

FloatArray float_array(py::handle obj, const std::string& what) {
  py::array a = py::module_::import("numpy").attr("asarray")(obj);
  const char kind = a.dtype().kind();
  if (kind != 'f' && kind != 'i' && kind != 'u')
    throw py::value_error(what + ": expected numbers, got an array of dtype " + py::str(a.dtype()).cast<std::string>());
  auto r = FloatArray::ensure(a);
  if (!r) throw py::error_already_set();
  return r;
}

}  // namespace gmlp::py_api

namespace py = pybind11;

PYBIND11_MODULE(_core, m) {
  namespace api = gmlp::py_api;
  m.doc() = "gmlp.cpp engine (use the gmlp package, not this module)";
  py::register_exception<gmlp::Error>(m, "Error", PyExc_RuntimeError);
  gmlp::cpu_gemm();  // a bad GMLP_CPU_GEMM fails the import with its message, before any work
  m.def("cpu_gemm", &gmlp::cpu_gemm,
        "Which library multiplies fp32 matrices on the CPU, its kernels and why (GMLP_CPU_GEMM overrides)");
  m.def(
      "set_threads",
      [](int n) {
        if (n < 1) throw py::value_error("set_threads: n must be >= 1, got " + std::to_string(n));
        api::set_threads_setting(n);
      },
      py::arg("n"));
  m.def("get_threads", [] { return api::threads_setting() > 0 ? api::threads_setting() : omp_get_max_threads(); });
  // The matrix-product precision of a device's models, as --precision sets it for a
  // command: bf16 on the CPU runs on its bf16 instructions (or on any CPU with
  // GMLP_CPU_BF16=emulate), on a GPU on its tensor cores.
  static std::string precision[2] = {"fp32", "fp32"};
  m.def(
      "set_precision",
      [](const std::string& p, const std::string& device) {
        if (p != "fp32" && p != "bf16")
          throw py::value_error("set_precision: '" + p + "' is not one of fp32, bf16");
        const gmlp::Device d = api::device_arg(device);
        gmlp::use_precision(d, gmlp::parse_precision(p));
        precision[int(d)] = p;
      },
      py::arg("precision"), py::arg("device") = "cpu");
  m.def(
      "get_precision", [](const std::string& device) { return precision[int(api::device_arg(device))]; },
      py::arg("device") = "cpu");
  m.def(
      "cuda_available", [] { return gmlp::cuda_built() && gmlp::cuda_device_count() > 0; },
      "Whether models can run on a CUDA GPU: the build has the CUDA backend and the machine a device");
  m.def(
      "cuda_unusable_reason", [] { return gmlp::cuda_unusable_reason(); },
      "Why models cannot run on a CUDA GPU ('' when they can): no CUDA in this build, no NVIDIA driver, the "
      "backend module not loading, the CUDA runtime failing, or no device");
  m.def(
      "_cuda_broken",
      [] {
        bool broken = false;
        gmlp::cuda_unusable_reason(&broken);
        return broken;
      },
      "Whether the NVIDIA driver is there (or GMLP_CUDA_EMULATOR set) and CUDA still fails");
  api::bind_model(m);
  api::bind_train(m);
}
