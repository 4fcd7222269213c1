#include <gtest/gtest.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <functional>
#include <fstream>
#include <string>
#include <vector>

#include "gmlp/error.h"
#include "gmlp/files.h"
#include "gmlp/safetensors.h"
#include "test_util.h"

namespace fs = std::filesystem;
using gmlp::Error;
using gmlp::SafeTensorsFile;
using gmlp::SafeTensorsWriter;

namespace {

class SafeTensorsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    dir_ = fs::temp_directory_path() /
           ("gmlp_st_" + std::to_string(::getpid()) + "_" + info->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  std::string path(const std::string& name) const { return (dir_ / name).string(); }

  // A file laid out as Python's safetensors writes it: u64 LE length, JSON padded
  // with spaces to a multiple of 8, then the data section.
  std::string put(const std::string& name, std::string header, const std::string& data, bool pad = true) {
    if (pad) header.append((8 - header.size() % 8) % 8, ' ');
    uint64_t n = header.size();
    std::string bytes(reinterpret_cast<const char*>(&n), 8);
    put_raw(name, bytes + header + data);
    return path(name);
  }
  std::string put_raw(const std::string& name, const std::string& bytes) {
    std::ofstream(path(name), std::ios::binary) << bytes;
    return path(name);
  }

  // Asserts that loading fails with a message naming the file and containing `word`.
  void expect_load_error(const std::string& file, const std::string& word) {
    try {
      SafeTensorsFile::load(file);
      ADD_FAILURE() << "no error for " << file << " (expected '" << word << "')";
    } catch (const Error& e) {
      std::string msg = e.what();
      EXPECT_NE(msg.find(file), std::string::npos) << msg;
      EXPECT_NE(msg.find(word), std::string::npos) << "expected '" << word << "' in: " << msg;
    }
  }

  fs::path dir_;
};

template <class T>
std::string raw(const std::vector<T>& v) {
  return std::string(reinterpret_cast<const char*>(v.data()), v.size() * sizeof(T));
}

using gmlp::test::error_of;

}  // namespace

TEST_F(SafeTensorsTest, RoundTripWithMetadata) {
  std::vector<float> w = {1.5f, -2.f, 3.25f, 0.f, 1e-30f, -7.f};
  std::vector<int32_t> ids = {0, -1, 2147483647, 42};
  std::vector<int64_t> big = {int64_t(1) << 40, -5, 7, 0};
  float scalar = 9.f;
  SafeTensorsWriter wr;
  wr.add_f32("blocks.0.proj_in.weight", {2, 3}, w.data());
  wr.add_i32("ids", {4}, ids.data());
  wr.add_i64("big", {2, 2}, big.data());
  wr.add_f32("scalar", {}, &scalar);
  wr.add_f32("empty", {0, 3}, nullptr);
  wr.set_metadata("gmlp.config", R"({"d": 8})");
  wr.set_metadata("note", "ünïcode");
  const std::string p = path("model.safetensors");
  wr.write(p);

  auto f = SafeTensorsFile::load(p);
  EXPECT_EQ(f.path(), p);
  EXPECT_EQ(f.names(), (std::vector<std::string>{"blocks.0.proj_in.weight", "ids", "big", "scalar", "empty"}));
  EXPECT_EQ(f.metadata().at("gmlp.config"), R"({"d": 8})");
  EXPECT_EQ(f.metadata().at("note"), "ünïcode");
  EXPECT_TRUE(f.has("ids"));
  EXPECT_FALSE(f.has("nope"));

  std::vector<int64_t> shape;
  EXPECT_EQ(f.read_f32("blocks.0.proj_in.weight", &shape), w);
  EXPECT_EQ(shape, (std::vector<int64_t>{2, 3}));
  std::vector<float> dst(6);
  f.read_f32("blocks.0.proj_in.weight", {2, 3}, dst.data());
  EXPECT_EQ(dst, w);
  EXPECT_EQ(f.read_int("ids"), std::vector<int64_t>(ids.begin(), ids.end()));
  EXPECT_EQ(f.read_int("big", &shape), big);
  EXPECT_EQ(shape, (std::vector<int64_t>{2, 2}));
  EXPECT_EQ(f.read_f32("scalar", &shape), std::vector<float>{9.f});
  EXPECT_TRUE(shape.empty());
  EXPECT_TRUE(f.read_f32("empty").empty());
  EXPECT_EQ(f.info("ids").dtype, "I32");
  EXPECT_EQ(f.info("ids").offset, 24u);
  EXPECT_EQ(f.info("ids").nbytes, 16u);
}

TEST_F(SafeTensorsTest, WriterLayoutMatchesReference) {
  std::vector<float> a = {1.f, 2.f};
  SafeTensorsWriter wr;
  wr.add_f32("a", {2}, a.data());
  wr.write(path("x.safetensors"));
  std::string bytes = gmlp::read_file(path("x.safetensors"));
  uint64_t n = 0;
  std::memcpy(&n, bytes.data(), 8);
  EXPECT_EQ(n % 8, 0u);
  ASSERT_EQ(bytes.size(), 8 + n + 8);
  std::string header = bytes.substr(8, n);
  EXPECT_EQ(header.find("__metadata__"), std::string::npos) << "empty metadata must be omitted";
  EXPECT_EQ(header.substr(0, header.find_last_not_of(' ') + 1),
            R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})");
  EXPECT_EQ(bytes.substr(8 + n), raw(a));
}

TEST_F(SafeTensorsTest, ReadsPythonStyleFile) {
  // Header key order and offsets as torch/safetensors would produce them.
  std::vector<float> w = {0.5f, -0.25f, 4.f, 8.f};
  std::vector<int64_t> steps = {1000};
  std::string p = put("py.safetensors",
                      R"({"__metadata__":{"format":"pt"},"step":{"dtype":"I64","shape":[1],"data_offsets":[16,24]},)"
                      R"("w":{"dtype":"F32","shape":[2,2],"data_offsets":[0,16]}})",
                      raw(w) + raw(steps));
  auto f = SafeTensorsFile::load(p);
  EXPECT_EQ(f.metadata().at("format"), "pt");
  EXPECT_EQ(f.names(), (std::vector<std::string>{"w", "step"}));  // data order
  EXPECT_EQ(f.read_f32("w"), w);
  EXPECT_EQ(f.read_int("step"), steps);
}

TEST_F(SafeTensorsTest, MalformedFilesNameFileAndProblem) {
  const std::string f8(8, '\0');  // 8 data bytes: room for two F32
  auto T = [](const std::string& body) { return R"({"a":)" + body + "}"; };

  expect_load_error(path("missing.safetensors"), "cannot open");
  expect_load_error(dir_.string(), "directory");
  expect_load_error(put_raw("short", "abc"), "shorter than 8");
  {
    uint64_t n = 1000;
    expect_load_error(put_raw("trunc_header", std::string(reinterpret_cast<const char*>(&n), 8) + "{}"),
                      "truncated");
  }
  expect_load_error(put("badjson", "{\"a\": [1,", ""), "not valid JSON");
  expect_load_error(put("notobj", "[1, 2]", ""), "not a JSON object");
  expect_load_error(put("entry_notobj", T("3"), ""), "not a JSON object");
  expect_load_error(put("no_dtype", T(R"({"shape":[2],"data_offsets":[0,8]})"), f8), "lacks 'dtype'");
  expect_load_error(put("no_shape", T(R"({"dtype":"F32","data_offsets":[0,8]})"), f8), "lacks 'shape'");
  expect_load_error(put("no_offsets", T(R"({"dtype":"F32","shape":[2]})"), f8), "lacks 'data_offsets'");
  expect_load_error(put("bad_dtype", T(R"({"dtype":"F99","shape":[2],"data_offsets":[0,8]})"), f8),
                    "unknown dtype 'F99'");
  expect_load_error(put("neg_dim", T(R"({"dtype":"F32","shape":[-2],"data_offsets":[0,8]})"), f8), "negative");
  expect_load_error(put("float_dim", T(R"({"dtype":"F32","shape":[2.5],"data_offsets":[0,8]})"), f8),
                    "non-integer");
  expect_load_error(put("neg_off", T(R"({"dtype":"F32","shape":[2],"data_offsets":[-8,0]})"), f8),
                    "non-negative");
  expect_load_error(put("end_lt_begin", T(R"({"dtype":"F32","shape":[2],"data_offsets":[8,0]})"), f8),
                    "end before begin");
  expect_load_error(put("beyond", T(R"({"dtype":"F32","shape":[4],"data_offsets":[0,16]})"), f8),
                    "truncated: tensor 'a' needs bytes up to 16 but data section has 8");
  expect_load_error(put("count", T(R"({"dtype":"F32","shape":[3],"data_offsets":[0,8]})"), f8),
                    "has 8 bytes but shape [3] of F32 needs 12");
  expect_load_error(put("overflow", T(R"({"dtype":"F64","shape":[4611686018427387904,8],"data_offsets":[0,8]})"), f8),
                    "overflows");
  expect_load_error(put("overlap",
                        R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                        R"("b":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})",
                        f8),
                    "overlap");
  expect_load_error(put("meta_nonstr", R"({"__metadata__":{"epoch":3}})", ""), "metadata value 'epoch'");
  expect_load_error(put("meta_notobj", R"({"__metadata__":[]})", ""), "__metadata__");
}

TEST_F(SafeTensorsTest, WrongShapeDtypeAndMissingName) {
  std::vector<float> w(32, 1.f);
  std::vector<int32_t> i(1, 3);  // 4 bytes: the F16 [2] tensor covers the data exactly
  std::string p = put("m.safetensors",
                      R"({"blocks.0.proj_in.weight":{"dtype":"F32","shape":[4,8],"data_offsets":[0,128]},)"
                      R"("h":{"dtype":"F16","shape":[2],"data_offsets":[128,132]}})",
                      raw(w) + raw(i));
  auto f = SafeTensorsFile::load(p);
  std::vector<float> dst(32);
  EXPECT_EQ(error_of([&] { f.read_f32("blocks.0.proj_in.weight", {8, 4}, dst.data()); }),
            p + ": tensor 'blocks.0.proj_in.weight' has shape [4, 8], expected [8, 4]");
  EXPECT_EQ(error_of([&] { f.read_f32("h", {2}, dst.data()); }), p + ": tensor 'h' has dtype F16, expected F32");
  EXPECT_EQ(error_of([&] { f.read_f32("h"); }), p + ": tensor 'h' has dtype F16, expected F32");
  EXPECT_NE(error_of([&] { f.read_int("blocks.0.proj_in.weight"); }).find("expected I32 or I64"), std::string::npos);
  EXPECT_EQ(error_of([&] { f.info("nope"); }), p + ": no tensor 'nope'");
}

TEST_F(SafeTensorsTest, WriterRejectsBadEntries) {
  float x = 0;
  SafeTensorsWriter wr;
  wr.add_f32("a", {1}, &x);
  EXPECT_NE(error_of([&] { wr.add_f32("a", {1}, &x); }).find("duplicate"), std::string::npos);
  EXPECT_NE(error_of([&] { wr.add_f32("__metadata__", {1}, &x); }).find("reserved"), std::string::npos);
  EXPECT_NE(error_of([&] { wr.add_f32("n", {-1}, &x); }).find("negative"), std::string::npos);
  EXPECT_NE(error_of([&] { wr.add_f32("z", {1}, nullptr); }).find("no data"), std::string::npos);
}

TEST_F(SafeTensorsTest, AtomicWriteReplacesCompletelyAndLeavesNoTemp) {
  const std::string p = path("out.bin");
  gmlp::write_file_atomic(p, "old contents");
  std::string big(3 << 20, 'x');
  big[12345] = 'y';
  gmlp::write_file_atomic(p, big);
  EXPECT_EQ(gmlp::read_file(p), big);
  for (const auto& e : fs::directory_iterator(dir_))
    EXPECT_EQ(e.path().filename().string().find(".tmp."), std::string::npos) << e.path();
  // Relative paths fsync "." as their directory.
  fs::path cwd = fs::current_path();
  fs::current_path(dir_);
  gmlp::write_file_atomic("rel.bin", "r");
  fs::current_path(cwd);
  EXPECT_EQ(gmlp::read_file(path("rel.bin")), "r");
}

TEST_F(SafeTensorsTest, AtomicWriteFailureKeepsOldFile) {
  const std::string nodir = path("no/such/dir/out.bin");
  std::string msg = error_of([&] { gmlp::write_file_atomic(nodir, "x"); });
  EXPECT_NE(msg.find(nodir), std::string::npos) << msg;
  EXPECT_NE(msg.find("No such file"), std::string::npos) << msg;
  EXPECT_FALSE(fs::exists(nodir));

  // Root ignores permissions, so block the temp file by putting a directory in its place.
  const std::string p = path("keep.bin");
  gmlp::write_file_atomic(p, "precious");
  fs::create_directory(p + ".tmp." + std::to_string(::getpid()));
  msg = error_of([&] { gmlp::write_file_atomic(p, "replacement"); });
  EXPECT_NE(msg.find(p), std::string::npos) << msg;
  EXPECT_EQ(gmlp::read_file(p), "precious");
  fs::remove(p + ".tmp." + std::to_string(::getpid()));

  // rename over a non-empty directory fails: the temp file must be cleaned up.
  const std::string d = path("target_dir");
  fs::create_directories(d + "/child");
  msg = error_of([&] { gmlp::write_file_atomic(d, "data"); });
  EXPECT_NE(msg.find("rename"), std::string::npos) << msg;
  EXPECT_FALSE(fs::exists(d + ".tmp." + std::to_string(::getpid())));
  EXPECT_TRUE(fs::is_directory(d + "/child"));

  // The writer goes through the same path; a failed write leaves the old checkpoint.
  SafeTensorsWriter wr;
  float x = 1;
  wr.add_f32("x", {1}, &x);
  EXPECT_NE(error_of([&] { wr.write(nodir); }).find(nodir), std::string::npos);
}

TEST_F(SafeTensorsTest, ReadFileErrorNamesPath) {
  const std::string p = path("absent.txt");
  std::string msg = error_of([&] { gmlp::read_file(p); });
  EXPECT_NE(msg.find(p), std::string::npos) << msg;
  EXPECT_NE(msg.find("No such file"), std::string::npos) << msg;
}
