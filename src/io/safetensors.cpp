#include "gmlp/safetensors.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <limits>
#include <nlohmann/json.hpp>

#include "gmlp/error.h"
#include "gmlp/files.h"

namespace gmlp {

// The format is little-endian on disk; we copy raw bytes in and out.
static_assert(std::endian::native == std::endian::little, "safetensors I/O assumes little-endian");

namespace {

// ordered_json keeps the writer's header in the order tensors were added.
using Json = nlohmann::ordered_json;

size_t dtype_size(const std::string& dtype) {
  static const std::map<std::string, size_t> sizes = {
      {"BOOL", 1}, {"U8", 1},  {"I8", 1},  {"F8_E4M3", 1}, {"F8_E5M2", 1}, {"I16", 2},
      {"U16", 2},  {"F16", 2}, {"BF16", 2}, {"I32", 4},     {"U32", 4},     {"F32", 4},
      {"I64", 8},  {"U64", 8}, {"F64", 8}};
  auto it = sizes.find(dtype);
  return it == sizes.end() ? 0 : it->second;
}


// Byte count of a tensor, or false on overflow (a hostile header must not wrap around).
bool tensor_bytes(const std::vector<int64_t>& shape, size_t elem, size_t* out) {
  size_t n = elem;
  for (int64_t d : shape)
    if (__builtin_mul_overflow(n, static_cast<uint64_t>(d), &n)) return false;
  *out = n;
  return true;
}


// Reads a whole regular file with POSIX calls so that directories and short reads are
// reported rather than silently yielding garbage (std::ifstream "opens" a directory).

}  // namespace

SafeTensorsFile SafeTensorsFile::load(const std::string& path) {
  SafeTensorsFile f;
  f.path_ = path;
  std::string buf = read_file(path);
  auto fail = [&](const std::string& what) { throw Error(path + ": " + what); };

  if (buf.size() < 8)
    fail("not a safetensors file: its " + std::to_string(buf.size()) +
         " bytes are shorter than 8, the size of the header length");
  uint64_t hlen = 0;
  std::memcpy(&hlen, buf.data(), 8);
  if (hlen > buf.size() - 8)
    fail("truncated: header length " + std::to_string(hlen) + " exceeds the " +
         std::to_string(buf.size() - 8) + " bytes after it");

  const Json header = parse_json(std::string_view(buf).substr(8, hlen), path + ": header");
  if (!header.is_object()) fail("header is not a JSON object");

  // Drop the header in place so the data section does not need a second copy.
  buf.erase(buf.begin(), buf.begin() + 8 + static_cast<ptrdiff_t>(hlen));
  f.data_ = std::move(buf);
  const size_t dsize = f.data_.size();

  for (const auto& [key, val] : header.items()) {
    if (key == "__metadata__") {
      if (!val.is_object()) fail("__metadata__ is not a JSON object");
      for (const auto& [mk, mv] : val.items()) {
        if (!mv.is_string()) fail("metadata value '" + mk + "' is not a string");
        f.metadata_[mk] = mv.get<std::string>();
      }
      continue;
    }
    const std::string where = "tensor '" + key + "'";
    if (!val.is_object()) fail(where + " entry is not a JSON object");
    for (const char* field : {"dtype", "shape", "data_offsets"})
      if (!val.contains(field)) fail(where + " lacks '" + field + "'");

    TensorInfo t;
    t.name = key;
    if (!val["dtype"].is_string()) fail(where + " dtype is not a string");
    t.dtype = val["dtype"].get<std::string>();
    const size_t esize = dtype_size(t.dtype);
    if (esize == 0) fail(where + " has unknown dtype '" + t.dtype + "'");

    const Json& shape = val["shape"];
    if (!shape.is_array()) fail(where + " shape is not an array");
    for (const Json& d : shape) {
      if (!d.is_number_integer()) fail(where + " shape " + shape.dump() + " has a non-integer dim");
      if (d.is_number_unsigned() && d.get<uint64_t>() > uint64_t(std::numeric_limits<int64_t>::max()))
        fail(where + " shape " + shape.dump() + " has a dim too large");
      if (d.get<int64_t>() < 0) fail(where + " shape " + shape.dump() + " has a negative dim");
      t.shape.push_back(d.get<int64_t>());
    }

    const Json& offs = val["data_offsets"];
    if (!offs.is_array() || offs.size() != 2 || !offs[0].is_number_unsigned() || !offs[1].is_number_unsigned())
      fail(where + " data_offsets " + offs.dump() + " is not two non-negative integers");
    const uint64_t begin = offs[0].get<uint64_t>(), end = offs[1].get<uint64_t>();
    if (end < begin) fail(where + " data_offsets " + offs.dump() + " has end before begin");
    if (end > dsize)
      fail("truncated: " + where + " needs bytes up to " + std::to_string(end) + " but data section has " +
           std::to_string(dsize));
    t.offset = begin;
    t.nbytes = end - begin;

    size_t want = 0;
    if (!tensor_bytes(t.shape, esize, &want)) fail(where + " shape " + shape_str(t.shape) + " overflows");
    if (want != t.nbytes)
      fail(where + " has " + std::to_string(t.nbytes) + " bytes but shape " + shape_str(t.shape) + " of " +
           t.dtype + " needs " + std::to_string(want));
    f.order_.push_back(key);
    f.tensors_.emplace(key, std::move(t));
  }

  // "File order" is data order; zero-size tensors keep their header order among ties.
  std::stable_sort(f.order_.begin(), f.order_.end(), [&](const std::string& a, const std::string& b) {
    return f.tensors_.at(a).offset < f.tensors_.at(b).offset;
  });
  // The tensors must tile the data section exactly, as the format requires: a gap or
  // an unclaimed tail means the header length or an offset is wrong, and every tensor
  // would be read from shifted bytes.
  const TensorInfo* prev = nullptr;
  size_t next = 0;
  for (const std::string& n : f.order_) {
    const TensorInfo& t = f.tensors_.at(n);
    if (t.nbytes == 0) continue;
    if (prev && t.offset < next)
      fail("tensors '" + prev->name + "' and '" + t.name + "' overlap in the data section");
    if (t.offset > next)
      fail("bytes " + std::to_string(next) + ".." + std::to_string(t.offset) + " of the data section belong to no "
           "tensor (before '" + t.name + "'); the header length or the offsets are wrong");
    next = t.offset + t.nbytes;
    prev = &t;
  }
  if (next != dsize)
    fail("the data section has " + std::to_string(dsize) + " bytes but its tensors cover " + std::to_string(next) +
         "; the header length or the offsets are wrong");
  return f;
}

const TensorInfo& SafeTensorsFile::info(const std::string& name) const {
  auto it = tensors_.find(name);
  if (it == tensors_.end()) throw Error(path_ + ": no tensor '" + name + "'");
  return it->second;
}

std::vector<std::string> SafeTensorsFile::names() const { return order_; }

void SafeTensorsFile::read_f32(const std::string& name, const std::vector<int64_t>& shape, float* dst) const {
  const TensorInfo& t = info(name);
  const std::string where = path_ + ": tensor '" + name + "'";
  if (t.dtype != "F32") throw Error(where + " has dtype " + t.dtype + ", expected F32");
  if (t.shape != shape)
    throw Error(where + " has shape " + shape_str(t.shape) + ", expected " + shape_str(shape));
  if (t.nbytes) std::memcpy(dst, data_.data() + t.offset, t.nbytes);
  // Weights and optimizer moments are always finite; a NaN or Inf read here would only
  // surface later as "loss nan" or garbage text.
  const size_t n = t.nbytes / sizeof(float);
  for (size_t i = 0; i < n; ++i)
    if (!std::isfinite(dst[i]))
      throw Error(where + " holds a non-finite value (" + std::to_string(dst[i]) + ") at index " + std::to_string(i));
}

std::vector<float> SafeTensorsFile::read_f32(const std::string& name, std::vector<int64_t>* shape) const {
  const TensorInfo& t = info(name);
  std::vector<float> out(t.nbytes / sizeof(float));
  read_f32(name, t.shape, out.data());  // checks the dtype
  if (shape) *shape = t.shape;
  return out;
}

std::vector<int64_t> SafeTensorsFile::read_int(const std::string& name, std::vector<int64_t>* shape) const {
  const TensorInfo& t = info(name);
  const auto* src = reinterpret_cast<const uint8_t*>(data_.data()) + t.offset;
  std::vector<int64_t> out;
  if (t.dtype == "I64") {
    out.resize(t.nbytes / 8);
    if (t.nbytes) std::memcpy(out.data(), src, t.nbytes);
  } else if (t.dtype == "I32") {
    std::vector<int32_t> tmp(t.nbytes / 4);
    if (t.nbytes) std::memcpy(tmp.data(), src, t.nbytes);
    out.assign(tmp.begin(), tmp.end());
  } else {
    throw Error(path_ + ": tensor '" + name + "' has dtype " + t.dtype + ", expected I32 or I64");
  }
  if (shape) *shape = t.shape;
  return out;
}

namespace {

// Validates a new writer entry and returns its byte count. A template so that it can
// walk the private Entry list without naming the type.
template <class Entries>
size_t check_new_entry(const Entries& entries, const std::string& name, const std::vector<int64_t>& shape,
                       const void* data, size_t esize) {
  const std::string where = "safetensors writer: tensor '" + name + "'";
  require(name != "__metadata__", "safetensors writer: '__metadata__' is a reserved name");
  for (const auto& e : entries) require(e.name != name, where + " added twice (duplicate name)");
  for (int64_t d : shape) require(d >= 0, where + " has a negative dim in " + shape_str(shape));
  size_t nb = 0;
  require(tensor_bytes(shape, esize, &nb), where + " is too large");
  require(nb == 0 || data != nullptr, where + " has no data");
  return nb;
}

}  // namespace

void SafeTensorsWriter::add_f32(const std::string& name, const std::vector<int64_t>& shape, const float* data) {
  entries_.push_back({name, "F32", shape, data, check_new_entry(entries_, name, shape, data, 4)});
}
void SafeTensorsWriter::add_i32(const std::string& name, const std::vector<int64_t>& shape, const int32_t* data) {
  entries_.push_back({name, "I32", shape, data, check_new_entry(entries_, name, shape, data, 4)});
}
void SafeTensorsWriter::add_i64(const std::string& name, const std::vector<int64_t>& shape, const int64_t* data) {
  entries_.push_back({name, "I64", shape, data, check_new_entry(entries_, name, shape, data, 8)});
}

void SafeTensorsWriter::set_metadata(const std::string& key, const std::string& value) { metadata_[key] = value; }

void SafeTensorsWriter::write(const std::string& path) const {
  Json header = Json::object();
  if (!metadata_.empty()) header["__metadata__"] = metadata_;
  size_t offset = 0;
  for (const Entry& e : entries_) {
    header[e.name] = {{"dtype", e.dtype}, {"shape", e.shape}, {"data_offsets", {offset, offset + e.nbytes}}};
    offset += e.nbytes;
  }
  std::string text;
  try {
    text = header.dump();
  } catch (const Json::exception& e) {  // e.g. a name or metadata value that is not UTF-8
    throw Error(path + ": cannot encode safetensors header: " + e.what());
  }
  // Like the reference writer: pad with spaces so the data section starts 8-aligned.
  text.append((8 - text.size() % 8) % 8, ' ');

  std::string bytes;
  bytes.reserve(8 + text.size() + offset);
  const uint64_t hlen = text.size();
  bytes.append(reinterpret_cast<const char*>(&hlen), 8);
  bytes += text;
  for (const Entry& e : entries_) bytes.append(static_cast<const char*>(e.data), e.nbytes);
  write_file_atomic(path, bytes);
}


}  // namespace gmlp
