#pragma once
// Helpers shared by the tests: temp dirs, running commands, comparing tensors.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <functional>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <vector>

#include "gmlp/trainer.h"

namespace gmlp::test {

// A fresh directory under the system temp dir, removed when the object dies.
class TempDir {
 public:
  explicit TempDir(const std::string& tag);
  ~TempDir();
  const std::filesystem::path& path() const { return path_; }
  std::string file(const std::string& name) const { return (path_ / name).string(); }

 private:
  std::filesystem::path path_;
};

struct CommandResult {
  int exit_code;
  std::string output;  // stdout and stderr together
};
// Runs a shell command, capturing its output.
CommandResult run_command(const std::string& cmd);
// The gmlp executable built beside the tests.
std::string gmlp_exe();
std::string source_dir();

// The process's product precision (ops::set_products) back to fp32 when a test ends,
// pass or fail.
struct Fp32ProductsAgain {
  ~Fp32ProductsAgain();
};

// Runs f, which must throw gmlp::Error, and returns the message for content checks;
// records a test failure (and returns "") when f throws nothing.
std::string error_of(const std::function<void()>& f);

// Fixtures from tests/reference/dump_fixtures.py, generated once per test process.
std::string reference_fixture_dir();

// A real English text present on every Debian system (base-files), about 35 KB.
inline const std::string kGplText = "/usr/share/common-licenses/GPL-3";
// The JSON objects of a .jsonl file, and the training losses of a run's metrics log.
std::vector<nlohmann::json> read_jsonl(const std::string& path);
std::vector<double> train_losses(const std::string& run_dir);
// A labelled file of three classes ("animals", "colours", "numbers") told apart by their
// keywords among shared filler words: `words` (filler, keyword) pairs a line.
void write_sentences(const std::string& path, int per_class, uint32_t seed, int words = 4);

// Synthetic image data: an IDX file; an 8x8 grey image of class k (0..2: the bright
// quadrant top-left, top-right, bottom-left, over dim noise); an MNIST-style folder of
// 64 train and 32 test such images with classes.txt.
void write_idx(const std::string& path, const std::vector<uint32_t>& dims, const std::vector<uint8_t>& data);
std::vector<uint8_t> quadrant_image(int k, std::mt19937& rng);
void write_vision_set(const std::string& dir);
// A binary PGM of h x w grey bytes.
void write_pgm(const std::string& path, const std::vector<uint8_t>& px, int h, int w);
// The same task as an image folder (train/<class>/<i>.pgm, test/<class>/<i>.pgm): 64
// train and 30 test images, image i of class folders[i % 3].
void write_vision_folder(const std::string& dir, const std::vector<std::string>& folders);

// A small training run of a task for the trainer's tests, on `device`, its data in dir
// (written there on first use): a causal LM with dropout or a masked LM on kGplText, a
// classifier with dropout on write_sentences' texts, or vision on write_vision_set's
// images with stochastic depth and shifts; ten steps with a line each, evaluations at
// 5 and 10, a checkpoint at 8, into dir/out.
TrainOptions small_run(const std::string& task, const TempDir& dir, const std::string& out, Device device);
// The weights of a run directory's model.safetensors.
std::vector<float> run_weights(const std::string& run_dir);

// |got - want| + rtol * |want| elementwise; reports the worst element.
::testing::AssertionResult all_close(const float* got, const float* want, size_t n, float atol, float rtol,
                                     const std::string& what);

}  // namespace gmlp::test
