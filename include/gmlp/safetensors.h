#pragma once
// safetensors reading and writing (https://github.com/huggingface/safetensors format):
// 8-byte little-endian header length N, N bytes of JSON header, then the raw data.
// Every malformed input is a gmlp::Error that names the file and what is wrong.
#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace gmlp {

struct TensorInfo {
  std::string name;
  std::string dtype;           // "F32", "I32", "I64", ... as in the header
  std::vector<int64_t> shape;
  size_t offset = 0;           // into the data section
  size_t nbytes = 0;
};

class SafeTensorsFile {
 public:
  // Reads and validates the whole file (header JSON, dtypes, offsets inside the data
  // section and non-overlapping, byte counts matching shape x dtype size).
  static SafeTensorsFile load(const std::string& path);

  const std::string& path() const { return path_; }
  const std::map<std::string, std::string>& metadata() const { return metadata_; }
  bool has(const std::string& name) const { return tensors_.count(name) != 0; }
  const TensorInfo& info(const std::string& name) const;  // Error if absent
  std::vector<std::string> names() const;                  // in file order

  // Copies an F32 tensor, insisting on the exact dtype and shape; the error names the
  // file, the tensor, the expected and the found shape or dtype.
  void read_f32(const std::string& name, const std::vector<int64_t>& shape, float* dst) const;
  std::vector<float> read_f32(const std::string& name, std::vector<int64_t>* shape = nullptr) const;
  // I32 or I64 tensor as int64 values.
  std::vector<int64_t> read_int(const std::string& name, std::vector<int64_t>* shape = nullptr) const;

 private:
  std::string path_;
  std::string data_;  // the data section
  std::map<std::string, std::string> metadata_;
  std::map<std::string, TensorInfo> tensors_;
  std::vector<std::string> order_;
};

class SafeTensorsWriter {
 public:
  // The data pointers are borrowed until write() returns.
  void add_f32(const std::string& name, const std::vector<int64_t>& shape, const float* data);
  void add_i32(const std::string& name, const std::vector<int64_t>& shape, const int32_t* data);
  void add_i64(const std::string& name, const std::vector<int64_t>& shape, const int64_t* data);
  void set_metadata(const std::string& key, const std::string& value);
  // Atomic: writes a temp file beside path, fsyncs it, renames it over path, fsyncs
  // the directory. A crash leaves either the old file or the new one, never a torn one.
  void write(const std::string& path) const;

 private:
  struct Entry {
    std::string name, dtype;
    std::vector<int64_t> shape;
    const void* data;
    size_t nbytes;
  };
  std::vector<Entry> entries_;
  std::map<std::string, std::string> metadata_;
};


}  // namespace gmlp
