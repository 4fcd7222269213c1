#pragma once
// Shared by the files of the extension gmlp._core: JSON <-> Python, the mapping of
// engine errors onto Python exceptions, the thread count, NumPy argument checks.
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <nlohmann/json.hpp>
#include <string>

#include "gmlp/device.h"
#include "gmlp/error.h"

namespace gmlp::py_api {

namespace py = pybind11;

// Through Python's json module: config dicts and metrics are small.
nlohmann::json to_json(py::handle obj, const std::string& what);
py::object from_json(const nlohmann::json& j);

// Runs f and turns a gmlp::Error into ValueError: for calls whose only way to fail is a
// bad argument (a config, sampling options, a prompt, model inputs).
template <class F>
auto checked_args(F&& f) -> decltype(f()) {
  try {
    return f();
  } catch (const Error& e) {
    throw py::value_error(e.what());
  }
}

// FileNotFoundError (errno ENOENT, the path) unless `path` exists.
void require_exists(const std::string& path, const std::string& what);

// The thread count set by gmlp.set_threads (0: the defaults). OpenMP keeps the count per
// calling thread, so every entry into the engine applies it on its own thread.
int threads_setting();
void set_threads_setting(int n);
void apply_threads();

// The device argument of Model and train: "cpu", "cuda" or "auto" (ValueError for
// another word); gmlp.Error saying why when CUDA cannot be used.
Device device_arg(const std::string& s);

// forcecast: int64 ids become int32 (after the range check), float64 pixels float32.
using IntArray = py::array_t<int32_t, py::array::c_style | py::array::forcecast>;
using FloatArray = py::array_t<float, py::array::c_style | py::array::forcecast>;

// A C-contiguous copy (or the array itself) of `obj` as T, with ValueError naming `what`
// when it is not numeric of the right kind: integers for ids, numbers for images.
IntArray int32_array(py::handle obj, const std::string& what);
FloatArray float_array(py::handle obj, const std::string& what);

}  // namespace gmlp::py_api
