#include "test_util.h"

#include <unistd.h>

#include <array>
#include <cstdio>
#include <fstream>
#include <mutex>
#include <random>
#include <sstream>

#include "gmlp/checkpoint.h"
#include "gmlp/error.h"
#include "gmlp/trainer.h"
#include "ops/ops.h"

namespace gmlp::test {

TempDir::TempDir(const std::string& tag) {
  std::random_device rd;
  path_ = std::filesystem::temp_directory_path() /
          ("gmlp_" + tag + "_" + std::to_string(getpid()) + "_" + std::to_string(rd()));
  std::filesystem::create_directories(path_);
}

TempDir::~TempDir() {
  std::error_code ec;
  std::filesystem::remove_all(path_, ec);
}

CommandResult run_command(const std::string& cmd) {
  std::string full = "(" + cmd + ") 2>&1";
  FILE* p = popen(full.c_str(), "r");
  if (!p) return {-1, "popen failed"};
  std::string out;
  std::array<char, 4096> buf;
  size_t n;
  while ((n = fread(buf.data(), 1, buf.size(), p)) > 0) out.append(buf.data(), n);
  int status = pclose(p);
  return {WIFEXITED(status) ? WEXITSTATUS(status) : -1, out};
}

std::string gmlp_exe() { return GMLP_EXE; }
std::string source_dir() { return GMLP_SOURCE_DIR; }

Fp32ProductsAgain::~Fp32ProductsAgain() { ops::set_products(ops::Products::fp32); }

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const gmlp::Error& e) {
    return e.what();
  }
  ADD_FAILURE() << "expected gmlp::Error";
  return "";
}

std::string reference_fixture_dir() {
  static std::once_flag once;
  static std::string dir;
  static std::string error;
  std::call_once(once, [] {
    dir = std::string(GMLP_BINARY_DIR) + "/fixtures";
    std::filesystem::create_directories(dir);
    auto r = run_command("/usr/bin/python3 " + source_dir() + "/tests/reference/dump_fixtures.py --out " + dir);
    if (r.exit_code != 0) error = "dump_fixtures.py failed (" + std::to_string(r.exit_code) + "):\n" + r.output;
  });
  if (!error.empty()) ADD_FAILURE() << error;
  return dir;
}

::testing::AssertionResult all_close(const float* got, const float* want, size_t n, float atol, float rtol,
                                     const std::string& what) {
  size_t worst = 0, bad = 0;
  double worst_excess = -1e300;
  for (size_t i = 0; i < n; ++i) {
    const double tol = atol + rtol * std::fabs(double(want[i]));
    const double err = std::fabs(double(got[i]) - double(want[i]));
    if (!(err <= tol)) ++bad;  // NaN counts as bad
    const double excess = std::isnan(err) ? 1e300 : err - tol;
    if (excess > worst_excess) {
      worst_excess = excess;
      worst = i;
    }
  }
  if (bad == 0) return ::testing::AssertionSuccess();
  std::ostringstream os;
  os << what << ": " << bad << " of " << n << " elements off (atol " << atol << ", rtol " << rtol << "); worst at ["
     << worst << "] got " << got[worst] << " want " << want[worst];
  return ::testing::AssertionFailure() << os.str();
}

std::vector<nlohmann::json> read_jsonl(const std::string& path) {
  std::ifstream f(path);
  std::vector<nlohmann::json> out;
  std::string line;
  while (std::getline(f, line))
    if (!line.empty()) out.push_back(nlohmann::json::parse(line));
  return out;
}

void write_sentences(const std::string& path, int per_class, uint32_t seed, int words) {
  const std::vector<std::string> names = {"animals", "colours", "numbers"};
  const std::vector<std::vector<std::string>> kw = {{"cat", "dog", "horse", "sheep", "goat", "bird"},
                                                    {"red", "blue", "green", "yellow", "pink", "grey"},
                                                    {"one", "two", "three", "seven", "nine", "ten"}};
  const std::vector<std::string> filler = {"the", "and", "a", "of", "we", "saw"};
  std::mt19937 rng(seed);
  std::ofstream f(path);
  for (int i = 0; i < per_class; ++i)
    for (int k = 0; k < 3; ++k) {
      std::string text;
      for (int w = 0; w < words; ++w) {
        text += (w ? " " : "") + filler[rng() % filler.size()];
        text += " " + kw[size_t(k)][rng() % kw[size_t(k)].size()];
      }
      f << names[size_t(k)] << "\t" << text << "\n";
    }
}

std::vector<double> train_losses(const std::string& run_dir) {
  std::vector<double> out;
  for (const auto& j : read_jsonl(metrics_file(run_dir)))
    if (j.contains("loss")) out.push_back(j["loss"].get<double>());
  return out;
}

void write_idx(const std::string& path, const std::vector<uint32_t>& dims, const std::vector<uint8_t>& data) {
  std::ofstream f(path, std::ios::binary);
  const uint8_t magic[4] = {0, 0, 0x08, uint8_t(dims.size())};
  f.write(reinterpret_cast<const char*>(magic), 4);
  for (uint32_t d : dims) {
    const uint8_t be[4] = {uint8_t(d >> 24), uint8_t(d >> 16), uint8_t(d >> 8), uint8_t(d)};
    f.write(reinterpret_cast<const char*>(be), 4);
  }
  f.write(reinterpret_cast<const char*>(data.data()), std::streamsize(data.size()));
}

// An 8x8 grey image of class k: dim noise, with quadrant k (top-left, top-right,
// bottom-left) bright.
std::vector<uint8_t> quadrant_image(int k, std::mt19937& rng) {
  std::vector<uint8_t> px(64);
  for (int y = 0; y < 8; ++y)
    for (int x = 0; x < 8; ++x) {
      const int q = (y >= 4) * 2 + (x >= 4);
      px[size_t(y) * 8 + x] = uint8_t(q == k ? 180 + rng() % 76 : rng() % 70);
    }
  return px;
}

// An MNIST-style folder: 64 train and 32 test images, classes.txt with the names.
void write_vision_set(const std::string& dir) {
  std::filesystem::create_directories(dir);
  std::mt19937 rng(5);
  for (auto [stem, n] : {std::pair<std::string, int>{"train", 64}, {"t10k", 32}}) {
    std::vector<uint8_t> images, labels;
    for (int i = 0; i < n; ++i) {
      const int k = int(rng() % 3);
      const auto px = quadrant_image(k, rng);
      images.insert(images.end(), px.begin(), px.end());
      labels.push_back(uint8_t(k));
    }
    write_idx(dir + "/" + stem + "-images-idx3-ubyte", {uint32_t(n), 8, 8}, images);
    write_idx(dir + "/" + stem + "-labels-idx1-ubyte", {uint32_t(n)}, labels);
  }
  std::ofstream(dir + "/classes.txt") << "top-left\ntop-right\nbottom-left\n";
}
void write_pgm(const std::string& path, const std::vector<uint8_t>& px, int h, int w) {
  std::ofstream f(path, std::ios::binary);
  f << "P5\n" << w << " " << h << "\n255\n";
  f.write(reinterpret_cast<const char*>(px.data()), std::streamsize(px.size()));
}

void write_vision_folder(const std::string& dir, const std::vector<std::string>& folders) {
  std::mt19937 rng(5);
  for (auto [split, n] : {std::pair<std::string, int>{"train", 64}, {"test", 30}}) {
    for (const auto& f : folders) std::filesystem::create_directories(dir + "/" + split + "/" + f);
    for (int i = 0; i < n; ++i) {
      const int k = i % 3;
      write_pgm(dir + "/" + split + "/" + folders[size_t(k)] + "/" + std::to_string(i) + ".pgm", quadrant_image(k, rng),
                8, 8);
    }
  }
}

TrainOptions small_run(const std::string& task, const TempDir& dir, const std::string& out, Device device) {
  TrainOptions o;
  o.device = device;
  nlohmann::json m = {{"task", task}, {"d_model", 16}, {"d_ffn", 32}, {"n_layers", 2}};
  if (task == "vision") {
    o.data_path = dir.file("images");
    if (!std::filesystem::exists(o.data_path)) write_vision_set(o.data_path);
    m["survival_prob"] = 0.7;
    o.run.train.augment_shift = 1;
  } else if (task == "classify") {
    o.data_path = dir.file("train.tsv");
    o.test_path = dir.file("test.tsv");
    if (!std::filesystem::exists(o.data_path)) {
      write_sentences(o.data_path, 20, 1);
      write_sentences(o.test_path, 4, 2);
    }
    m["seq_len"] = 16;
    m["dropout"] = 0.1;
    m["head_dropout"] = 0.1;
  } else {
    o.data_path = kGplText;
    m["seq_len"] = 24;
    m["dropout"] = task == "causal_lm" ? 0.1 : 0.0;
  }
  o.run.model = ModelConfig::from_json(m, "test", true);
  o.run.train.batch_size = task == "vision" ? 16 : 4;
  o.run.train.steps = 10;
  o.run.train.lr = 1e-2f;
  o.run.train.log_every = 1;
  o.run.train.eval_every = 5;
  o.run.train.eval_batches = 2;
  o.run.train.ckpt_every = 8;
  o.out_dir = dir.file(out);
  o.progress_bar = false;
  return o;
}

std::vector<float> run_weights(const std::string& run_dir) {
  const auto m = load_model(model_file(run_dir));
  return {m->weights(), m->weights() + m->num_params()};
}

}  // namespace gmlp::test
