// timm gMLP interop (docs/timm.md): checkpoints that tests/reference/timm_checkpoint.py
// writes with timm's module names load and reproduce PyTorch's logits; our exports load
// into that PyTorch mirror of timm and reproduce ours; every malformed input is an error
// that names the culprit.
#include <cstring>
#include <filesystem>
#include <functional>
#include <map>
#include <mutex>
#include <set>

#include "gmlp/checkpoint.h"
#include "gmlp/error.h"
#include "gmlp/model.h"
#include "gmlp/rng.h"
#include "gmlp/safetensors.h"
#include "gmlp/timm.h"
#include "test_util.h"

namespace gmlp {
namespace {

using test::all_close;
using test::error_of;
using test::run_command;
using test::TempDir;

// EXPECT_CONTAINS(text, HasSubstr("...")): the text holds the substring (no gmock here).
struct HasSubstr {
  std::string s;
  explicit HasSubstr(std::string x) : s(std::move(x)) {}
};
::testing::AssertionResult contains(const std::string& text, const HasSubstr& m) {
  if (text.find(m.s) != std::string::npos) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << "expected to find\n  " << m.s << "\nin\n  " << text;
}
#define EXPECT_CONTAINS(text, matcher) EXPECT_TRUE(contains((text), (matcher)))

std::string script() { return "/usr/bin/python3 " + test::source_dir() + "/tests/reference/timm_checkpoint.py"; }

// The PyTorch-written timm checkpoints and cases, once per test process.
std::string fixtures() {
  static TempDir dir("timm_fixtures");
  static std::once_flag once;
  static std::string error;
  std::call_once(once, [] {
    auto r = run_command(script() + " write --out " + dir.path().string());
    if (r.exit_code != 0) error = "timm_checkpoint.py write failed (" + std::to_string(r.exit_code) + "):\n" + r.output;
  });
  if (!error.empty()) ADD_FAILURE() << error;
  return dir.path().string() + "/";
}

// A timm-representable vision config of ours.
ModelConfig vision_config(int C = 3, int H = 16, int W = 16, int p = 4, int d = 16, int f = 32, int L = 2, int k = 7) {
  ModelConfig c;
  c.task = Task::vision;
  c.vocab_size = 0;
  c.tokenizer = nullptr;
  c.n_classes = k;
  c.d_model = d;
  c.d_ffn = f;
  c.n_layers = L;
  c.image_channels = C;
  c.image_height = H;
  c.image_width = W;
  c.patch_height = c.patch_width = p;
  c.seq_len = (H / p) * (W / p);
  c.norm_eps = 1e-6f;
  c.spatial_init = 0.3f;  // a spatial mixing that matters
  c.validate();
  return c;
}

std::unique_ptr<Model> random_model(const ModelConfig& c, uint64_t seed = 7) {
  auto m = std::make_unique<Model>(c);
  Rng rng(seed);
  m->init(rng);
  // Non-trivial LayerNorms and spatial biases, so a swapped tensor cannot go unnoticed.
  for (const auto& p : m->params())
    if (p.name.find("norm") != std::string::npos || p.name.find("spatial.bias") != std::string::npos)
      for (size_t i = 0; i < p.size; ++i) m->weights()[p.offset + i] += rng.uniform(-0.3f, 0.3f);
  return m;
}

std::vector<float> logits_of(Model& m, const std::vector<float>& images, int B) {
  NoGrad ng(m);
  Batch b;
  b.B = B;
  b.T = m.config().seq_len;
  b.images = images.data();
  m.forward(b);
  return {m.logits(), m.logits() + size_t(B) * m.config().n_classes};
}

std::vector<float> random_images(const ModelConfig& c, int B, uint64_t seed) {
  Rng rng(seed);
  std::vector<float> x(size_t(B) * c.image_channels * c.image_height * c.image_width);
  for (auto& v : x) v = rng.normal();
  return x;
}

// Every F32 tensor of a file, in file order.
struct Tensors {
  std::vector<std::string> names;
  std::map<std::string, std::pair<std::vector<int64_t>, std::vector<float>>> t;
};
Tensors read_all(const std::string& path) {
  const auto f = SafeTensorsFile::load(path);
  Tensors out;
  for (const auto& n : f.names()) {
    std::vector<int64_t> shape;
    auto data = f.read_f32(n, &shape);
    out.names.push_back(n);
    out.t[n] = {shape, std::move(data)};
  }
  return out;
}
void write_all(const Tensors& ts, const std::string& path) {
  SafeTensorsWriter w;
  for (const auto& n : ts.names) w.add_f32(n, ts.t.at(n).first, ts.t.at(n).second.data());
  w.write(path);
}

// Copies a timm file with one change made by `edit`.
std::string edited(const TempDir& dir, const std::string& src, const std::string& tag,
                   const std::function<void(Tensors&)>& edit) {
  Tensors ts = read_all(src);
  edit(ts);
  const std::string out = dir.file(tag + ".safetensors");
  write_all(ts, out);
  return out;
}

void erase(Tensors& ts, const std::string& name) {
  ts.t.erase(name);
  ts.names.erase(std::find(ts.names.begin(), ts.names.end(), name));
}

// ---------------------------------------------------------------------------- the map

TEST(TimmNameMap, CoversEveryParameterOnceAndInverts) {
  EXPECT_EQ(timm_name_map().size(), 16u);
  const ModelConfig c = vision_config();
  std::set<std::string> seen;
  for (const auto& p : param_layout(c)) {
    const std::string t = timm_name_of(p.name);
    EXPECT_TRUE(seen.insert(t).second) << t;
    EXPECT_EQ(our_name_of(t), p.name);
  }
  EXPECT_EQ(timm_name_of("patch.weight"), "stem.proj.weight");
  EXPECT_EQ(timm_name_of("blocks.11.sgu.spatial.weight"), "blocks.11.mlp_channels.gate.proj.weight");
  EXPECT_EQ(timm_name_of("blocks.0.proj_in.bias"), "blocks.0.mlp_channels.fc1.bias");
  EXPECT_EQ(timm_name_of("blocks.3.proj_out.weight"), "blocks.3.mlp_channels.fc2.weight");
  EXPECT_EQ(our_name_of("blocks.2.mlp_channels.gate.norm.bias"), "blocks.2.sgu.norm.bias");
  EXPECT_CONTAINS(error_of([] { timm_name_of("blocks.0.attn.qkv.weight"); }), HasSubstr("'blocks.0.attn.qkv.weight'"));
  EXPECT_CONTAINS(error_of([] { our_name_of("blocks.0.mlp_channels.norm.weight"); }),
              HasSubstr("'blocks.0.mlp_channels.norm.weight'"));
  EXPECT_CONTAINS(error_of([] { our_name_of("blocks.x.norm.weight"); }), HasSubstr("blocks.x.norm.weight"));
}

// The paper's vision models in timm's naming: the parameter counts of docs/timm.md.
TEST(TimmNameMap, ReferenceModelsHaveTimmsParameterCounts) {
  const std::pair<int, int64_t> models[] = {{128, 5867328}, {256, 19422656}, {512, 73075392}};
  for (auto [d, want] : models) {
    const ModelConfig c = vision_config(3, 224, 224, 16, d, 6 * d, 30, 1000);
    int64_t total = 0;
    for (const auto& p : param_layout(c)) total += int64_t(p.size);
    EXPECT_EQ(total, want) << "d " << d;
  }
  // gmlp_ti16_224 in timm's naming: the image size 224 follows from n = 196 and patch 16.
  TempDir dir("timm_ti");
  const ModelConfig ti = vision_config(3, 224, 224, 16, 128, 768, 30, 1000);
  save_timm_gmlp(Model(ti), dir.file("ti.safetensors"));
  const ModelConfig c = timm_gmlp_config(dir.file("ti.safetensors"));
  EXPECT_EQ(c.image_height, 224);
  EXPECT_EQ(c.image_width, 224);
  EXPECT_EQ(c.patch_height, 16);
  EXPECT_EQ(c.seq_len, 196);
  EXPECT_EQ(c.n_layers, 30);
  EXPECT_EQ(c.d_ffn, 768);
  EXPECT_EQ(c.n_classes, 1000);
}

// ------------------------------------------------------------------------- importing

TEST(TimmImport, ReproducesPyTorchTimmLogits) {
  const std::string dir = fixtures();
  auto m = load_timm_gmlp(dir + "main.timm.safetensors");
  const ModelConfig& c = m->config();
  EXPECT_EQ(c.task, Task::vision);
  EXPECT_EQ(c.norm_eps, 1e-6f);
  EXPECT_EQ(c.image_channels, 3);
  EXPECT_EQ(c.image_height, 16);
  EXPECT_EQ(c.image_width, 16);
  EXPECT_EQ(c.patch_height, 4);
  EXPECT_EQ(c.patch_width, 4);
  EXPECT_EQ(c.seq_len, 16);
  EXPECT_EQ(c.d_model, 16);
  EXPECT_EQ(c.d_ffn, 32);
  EXPECT_EQ(c.n_layers, 2);
  EXPECT_EQ(c.n_classes, 7);
  EXPECT_EQ(c.sgu, Sgu::split);
  EXPECT_EQ(c.gelu, Gelu::erf);
  EXPECT_TRUE(c.tokenizer.is_null());

  const auto cs = SafeTensorsFile::load(dir + "main.case.safetensors");
  std::vector<int64_t> shape;
  const auto images = cs.read_f32("images", &shape);
  ASSERT_EQ(shape, (std::vector<int64_t>{3, 3, 16, 16}));
  const auto got = logits_of(*m, images, 3);
  // Exact up to float32: timm's eps are 1e-6 in the block and final norms and 1e-5 in
  // the gate's, and the import keeps both (norm_eps, sgu_norm_eps).
  EXPECT_EQ(c.sgu_norm_eps, 1e-5f);
  const auto timm = cs.read_f32("logits");
  EXPECT_TRUE(all_close(got.data(), timm.data(), got.size(), 1e-5f, 1e-5f, "logits vs timm"));
  // With every LayerNorm at 1e-6 the logits move by more than that: the test sees eps.
  const auto all_1e6 = cs.read_f32("logits_eps_1e-06");
  EXPECT_FALSE(all_close(got.data(), all_1e6.data(), got.size(), 1e-6f, 0.f, "logits vs all-1e-6 eps"));
}

TEST(TimmImport, NonSquareGridNeedsTheImageSize) {
  const std::string path = fixtures() + "wide.timm.safetensors";  // 12x16 image, patch 4: 3x4 grid, n 12
  EXPECT_CONTAINS(error_of([&] { load_timm_gmlp(path); }), HasSubstr("n = 12"));
  EXPECT_CONTAINS(error_of([&] { load_timm_gmlp(path); }), HasSubstr("not a square grid"));
  TimmImportOptions bad;
  bad.image_height = bad.image_width = 16;
  const std::string e = error_of([&] { load_timm_gmlp(path, bad); });
  EXPECT_CONTAINS(e, HasSubstr("16x16 image"));
  EXPECT_CONTAINS(e, HasSubstr("16 patches"));
  EXPECT_CONTAINS(e, HasSubstr("blocks.0.mlp_channels.gate.proj.weight"));

  TimmImportOptions height_only;  // the width follows from n
  height_only.image_height = 12;
  EXPECT_EQ(load_timm_gmlp(path, height_only)->config().image_width, 16);
  TimmImportOptions both;
  both.image_height = 12;
  both.image_width = 16;
  auto m = load_timm_gmlp(path, both);
  EXPECT_EQ(m->config().image_channels, 2);
  EXPECT_EQ(m->config().seq_len, 12);
  const auto cs = SafeTensorsFile::load(fixtures() + "wide.case.safetensors");
  const auto got = logits_of(*m, cs.read_f32("images"), 2);
  const auto want = cs.read_f32("logits");
  EXPECT_TRUE(all_close(got.data(), want.data(), got.size(), 1e-5f, 1e-5f, "wide logits"));
}

TEST(TimmImport, HalfBfloatAndDoubleAreConverted) {
  const std::string dir = fixtures();
  auto same_weights = [](const Model& a, const Model& b) {
    return a.num_params() == b.num_params() &&
           std::memcmp(a.weights(), b.weights(), a.num_params() * sizeof(float)) == 0;
  };
  EXPECT_TRUE(same_weights(*load_timm_gmlp(dir + "main.f16.timm.safetensors"),
                           *load_timm_gmlp(dir + "main.f16_as_f32.timm.safetensors")));
  EXPECT_TRUE(same_weights(*load_timm_gmlp(dir + "main.bf16.timm.safetensors"),
                           *load_timm_gmlp(dir + "main.bf16_as_f32.timm.safetensors")));
  EXPECT_TRUE(same_weights(*load_timm_gmlp(dir + "main.f64.timm.safetensors"),
                           *load_timm_gmlp(dir + "main.timm.safetensors")));
}

// ------------------------------------------------------------------------- exporting

TEST(TimmExport, PyTorchTimmReproducesOurLogits) {
  TempDir dir("timm_export");
  // Square and non-square images (8x12 in 4x4 patches: a 2x3 grid).
  const ModelConfig configs[] = {vision_config(), vision_config(1, 8, 12, 4, 8, 16, 3, 4)};
  for (const auto& c : configs) {
    auto m = random_model(c);
    const int B = 2;
    const auto images = random_images(c, B, 11);
    save_timm_gmlp(*m, dir.file("ours.timm.safetensors"));
    SafeTensorsWriter w;
    w.add_f32("images", {B, c.image_channels, c.image_height, c.image_width}, images.data());
    w.write(dir.file("images.safetensors"));
    auto r = run_command(script() + " logits " + dir.file("ours.timm.safetensors") + " " +
                         dir.file("images.safetensors") + " " + dir.file("out.safetensors") + " --eps 1e-6");
    ASSERT_EQ(r.exit_code, 0) << r.output;
    const auto out = SafeTensorsFile::load(dir.file("out.safetensors"));
    const auto got = logits_of(*m, images, B);
    const auto timm = out.read_f32("logits");
    EXPECT_TRUE(all_close(got.data(), timm.data(), got.size(), 1e-5f, 1e-5f, "ours vs timm"));
  }
}

TEST(TimmExport, RoundTripKeepsEveryTensorAndTheDataDescription) {
  TempDir dir("timm_roundtrip");
  const std::string src = fixtures() + "main.timm.safetensors";
  save_timm_gmlp(*load_timm_gmlp(src), dir.file("back.safetensors"));
  const Tensors a = read_all(src), b = read_all(dir.file("back.safetensors"));
  EXPECT_EQ(a.names, b.names);  // timm's state_dict order
  for (const auto& n : a.names) {
    ASSERT_TRUE(b.t.count(n)) << n;
    EXPECT_EQ(a.t.at(n).first, b.t.at(n).first) << n;
    EXPECT_EQ(a.t.at(n).second, b.t.at(n).second) << n;
  }

  // Class names and normalisation ride along in our export's metadata.
  ModelConfig c = vision_config();
  c.class_names = {"a", "b", "c", "d", "e", "f", "g"};
  c.normalization = {{"mean", {0.5, 0.5, 0.5}}, {"std", {0.25, 0.5, 0.5}}};
  auto m = random_model(c);
  save_timm_gmlp(*m, dir.file("named.safetensors"));
  auto back = load_timm_gmlp(dir.file("named.safetensors"));
  EXPECT_EQ(back->config().class_names, c.class_names);
  EXPECT_EQ(back->config().normalization, c.normalization);
  ASSERT_EQ(back->num_params(), m->num_params());
  EXPECT_EQ(std::memcmp(back->weights(), m->weights(), m->num_params() * sizeof(float)), 0);
  // The caller's normalisation wins.
  TimmImportOptions opt;
  opt.normalization = {{"mean", {0.1, 0.2, 0.3}}, {"std", {1, 1, 1}}};
  EXPECT_EQ(load_timm_gmlp(dir.file("named.safetensors"), opt)->config().normalization, opt.normalization);
}

TEST(TimmExport, StochasticDepthExportsFine) {
  TempDir dir("timm_sd");
  ModelConfig c = vision_config();
  c.survival_prob = 0.8f;  // training only: the inference graph is timm's
  EXPECT_EQ(timm_unsupported_reason(c), "");
  save_timm_gmlp(*random_model(c), dir.file("sd.safetensors"));
  EXPECT_EQ(load_timm_gmlp(dir.file("sd.safetensors"))->config().n_layers, 2);
}

TEST(TimmExport, RefusesWhatTimmCannotHold) {
  TempDir dir("timm_refuse");
  auto refused = [&](const ModelConfig& c) {
    Model m(c);
    const std::string e = error_of([&] { save_timm_gmlp(m, dir.file("x.safetensors")); });
    EXPECT_FALSE(std::filesystem::exists(dir.file("x.safetensors")));
    return e;
  };
  ModelConfig lm;  // causal_lm, the default
  lm.d_model = 8;
  lm.d_ffn = 16;
  lm.n_layers = 1;
  lm.seq_len = 8;
  EXPECT_CONTAINS(refused(lm), HasSubstr("task is \"causal_lm\""));
  ModelConfig c = vision_config();
  c.sgu_heads = 2;
  EXPECT_CONTAINS(refused(c), HasSubstr("sgu_heads = 2"));
  c = vision_config();
  c.spatial = Spatial::toeplitz;
  EXPECT_CONTAINS(refused(c), HasSubstr("\"toeplitz\""));
  c = vision_config();
  c.d_attn = 8;
  EXPECT_CONTAINS(refused(c), HasSubstr("aMLP (d_attn = 8)"));
  c = vision_config();
  c.sgu = Sgu::linear;
  EXPECT_CONTAINS(refused(c), HasSubstr("sgu \"linear\""));
  c = vision_config();
  c.gelu = Gelu::tanh;
  EXPECT_CONTAINS(refused(c), HasSubstr("gelu \"tanh\""));
}

// ---------------------------------------------------------------------------- errors

class TimmErrors : public ::testing::Test {
 protected:
  void SetUp() override {
    good_ = dir_.file("good.safetensors");
    save_timm_gmlp(*random_model(vision_config()), good_);  // d 16, d_ffn 32, n 16, 2 blocks
  }
  std::string import_error(const std::string& tag, const std::function<void(Tensors&)>& edit,
                           const TimmImportOptions& opt = {}) {
    const std::string path = edited(dir_, good_, tag, edit);
    const std::string e = error_of([&] { load_timm_gmlp(path, opt); });
    EXPECT_CONTAINS(e, HasSubstr(path));
    return e;
  }
  TempDir dir_{"timm_errors"};
  std::string good_;
};

TEST_F(TimmErrors, MissingTensor) {
  const std::string e =
      import_error("missing", [](Tensors& t) { erase(t, "blocks.1.mlp_channels.gate.norm.bias"); });
  EXPECT_CONTAINS(e, HasSubstr("missing tensor 'blocks.1.mlp_channels.gate.norm.bias'"));
  EXPECT_CONTAINS(e, HasSubstr("[16]"));
  EXPECT_CONTAINS(import_error("headless",
                           [](Tensors& t) {
                             erase(t, "head.weight");
                             erase(t, "head.bias");
                           }),
              HasSubstr("num_classes=0"));
  EXPECT_CONTAINS(import_error("nostem", [](Tensors& t) { erase(t, "stem.proj.weight"); }),
              HasSubstr("missing tensor 'stem.proj.weight'"));
}

TEST_F(TimmErrors, UnexpectedTensor) {
  EXPECT_CONTAINS(import_error("extra",
                           [](Tensors& t) {
                             t.names.push_back("blocks.0.mlp_channels.norm.weight");
                             t.t["blocks.0.mlp_channels.norm.weight"] = {{16}, std::vector<float>(16, 1.f)};
                           }),
              HasSubstr("unexpected tensor 'blocks.0.mlp_channels.norm.weight' [16]"));
  // A stray third block's tensor makes the blocks 0..2 with block 2 incomplete.
  EXPECT_CONTAINS(import_error("stray",
                           [](Tensors& t) {
                             t.names.push_back("blocks.2.norm.weight");
                             t.t["blocks.2.norm.weight"] = {{16}, std::vector<float>(16, 1.f)};
                           }),
              HasSubstr("missing tensor 'blocks.2.norm.bias'"));
}

TEST_F(TimmErrors, WrongShapeRankDtypeAndOddDffn) {
  std::string e = import_error("shape", [](Tensors& t) {
    t.t["blocks.1.mlp_channels.fc2.weight"] = {{16, 32}, std::vector<float>(16 * 32)};
  });
  EXPECT_CONTAINS(e, HasSubstr("tensor 'blocks.1.mlp_channels.fc2.weight' has shape [16, 32], expected [16, 16]"));
  e = import_error("rank", [](Tensors& t) { t.t["stem.proj.weight"].first = {16, 48}; });
  EXPECT_CONTAINS(e, HasSubstr("'stem.proj.weight' has shape [16, 48], expected rank 4"));
  e = import_error("proj", [](Tensors& t) { t.t["blocks.0.mlp_channels.gate.proj.weight"] = {{16, 15}, std::vector<float>(240)}; });
  EXPECT_CONTAINS(e, HasSubstr("'blocks.0.mlp_channels.gate.proj.weight' has shape [16, 15], expected a square [n, n]"));
  e = import_error("odd", [](Tensors& t) { t.t["blocks.0.mlp_channels.fc1.weight"] = {{7, 16}, std::vector<float>(7 * 16)}; });
  EXPECT_CONTAINS(e, HasSubstr("'blocks.0.mlp_channels.fc1.weight' has shape [7, 16]: d_ffn = 7 is odd"));
  e = import_error("dmismatch", [](Tensors& t) { t.t["head.weight"] = {{7, 12}, std::vector<float>(7 * 12)}; });
  EXPECT_CONTAINS(e, HasSubstr("'head.weight' has shape [7, 12], expected [classes, 16]"));

  // An integer tensor where a float one belongs.
  Tensors ts = read_all(good_);
  SafeTensorsWriter w;
  std::vector<int64_t> ints(16, 1);
  for (const auto& n : ts.names)
    if (n == "norm.bias")
      w.add_i64(n, {16}, ints.data());
    else
      w.add_f32(n, ts.t.at(n).first, ts.t.at(n).second.data());
  w.write(dir_.file("i64.safetensors"));
  EXPECT_CONTAINS(error_of([&] { load_timm_gmlp(dir_.file("i64.safetensors")); }),
              HasSubstr("tensor 'norm.bias' has dtype I64"));
}

TEST_F(TimmErrors, OurOwnCheckpointAndPrefixes) {
  save_model(*random_model(vision_config()), dir_.file("ours.safetensors"));
  EXPECT_CONTAINS(error_of([&] { load_timm_gmlp(dir_.file("ours.safetensors")); }),
              HasSubstr("gmlp.cpp checkpoint ('patch.weight')"));
  // A state_dict saved from a wrapped model: the error names the prefix to use.
  const std::string wrapped = edited(dir_, good_, "wrapped", [](Tensors& t) {
    Tensors out;
    for (const auto& n : t.names) {
      out.names.push_back("module." + n);
      out.t["module." + n] = t.t.at(n);
    }
    t = out;
  });
  EXPECT_CONTAINS(error_of([&] { load_timm_gmlp(wrapped); }), HasSubstr("set the name prefix to 'module.'"));
  TimmImportOptions opt;
  opt.prefix = "module.";
  auto a = load_timm_gmlp(wrapped, opt);
  auto b = load_timm_gmlp(good_);
  EXPECT_EQ(std::memcmp(a->weights(), b->weights(), a->num_params() * sizeof(float)), 0);
}

// ---------------------------------------------------------------------------- the CLI

TEST(TimmCli, ConvertBothWays) {
  TempDir dir("timm_cli");
  const std::string exe = test::gmlp_exe(), src = fixtures() + "main.timm.safetensors";
  auto r = run_command(exe + " convert --from-timm " + src + " --out " + dir.file("ours.safetensors") +
                       " --mean 0.5,0.5,0.5 --std 0.5,0.5,0.5");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_CONTAINS(r.output, HasSubstr("2 blocks, d 16, d_ffn 32, n 16 (16x16 image, 4x4 patches, 3 channels), 7 classes"));
  auto ours = load_model(dir.file("ours.safetensors"));
  EXPECT_EQ(ours->config().norm_eps, 1e-6f);
  EXPECT_EQ(ours->config().normalization["std"], nlohmann::json({0.5, 0.5, 0.5}));
  const auto cs = SafeTensorsFile::load(fixtures() + "main.case.safetensors");
  const auto got = logits_of(*ours, cs.read_f32("images"), 3);
  const auto want = cs.read_f32("logits");
  EXPECT_TRUE(all_close(got.data(), want.data(), got.size(), 1e-5f, 1e-5f, "converted model's logits"));

  r = run_command(exe + " convert --to-timm " + dir.file("ours.safetensors") + " --out " + dir.file("back.safetensors"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const Tensors a = read_all(src), b = read_all(dir.file("back.safetensors"));
  EXPECT_EQ(a.names, b.names);
  for (const auto& n : a.names) EXPECT_EQ(a.t.at(n).second, b.t.at(n).second) << n;

  // Non-square: the image size by hand.
  const std::string wide = fixtures() + "wide.timm.safetensors";
  r = run_command(exe + " convert --from-timm " + wide + " --out " + dir.file("wide.safetensors"));
  EXPECT_NE(r.exit_code, 0);
  EXPECT_CONTAINS(r.output, HasSubstr("not a square grid"));
  EXPECT_FALSE(std::filesystem::exists(dir.file("wide.safetensors")));
  r = run_command(exe + " convert --from-timm " + wide + " --image-height 12 --image-width 16 --out " +
                  dir.file("wide.safetensors"));
  EXPECT_EQ(r.exit_code, 0) << r.output;

  // Errors: non-zero exit, a message, no output file.
  ModelConfig lm;
  lm.d_model = 8;
  lm.d_ffn = 16;
  lm.n_layers = 1;
  lm.seq_len = 8;
  Model m(lm);
  save_model(m, dir.file("lm.safetensors"));
  r = run_command(exe + " convert --to-timm " + dir.file("lm.safetensors") + " --out " + dir.file("lm.timm"));
  EXPECT_NE(r.exit_code, 0);
  EXPECT_CONTAINS(r.output, HasSubstr("cannot export to timm's gMLP"));
  EXPECT_FALSE(std::filesystem::exists(dir.file("lm.timm")));
  r = run_command(exe + " convert --from-timm " + dir.file("nope.safetensors") + " --out " + dir.file("x"));
  EXPECT_NE(r.exit_code, 0);
  EXPECT_CONTAINS(r.output, HasSubstr("nope.safetensors"));
  r = run_command(exe + " convert --from-timm " + src + " --to-timm " + src + " --out " + dir.file("x"));
  EXPECT_NE(r.exit_code, 0);
  EXPECT_CONTAINS(r.output, HasSubstr("exactly one of --from-timm and --to-timm"));
  r = run_command(exe + " convert --to-timm " + dir.file("ours.safetensors") + " --image-size 16 --out " + dir.file("x"));
  EXPECT_NE(r.exit_code, 0);
  EXPECT_FALSE(std::filesystem::exists(dir.file("x")));
}

}  // namespace
}  // namespace gmlp
