// The device side of the engine.
//  - Without a GPU: what --device means (auto falls back, cuda is a clear error), and a
//    device model's host mirrors, uploads and read-backs, exercised through a backend
//    whose memory is kept apart from the host's (results must equal the CPU bit for bit).
//  - With a GPU (GTEST_SKIP otherwise): the CUDA backend's ops and every variant's
//    forward, backward and AdamW steps against the CPU engine, and cached generation
//    on a CUDA model (its caches on the device) against its full forward and against
//    the CPU decoder.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <functional>
#include <limits>
#include <map>
#include <ostream>
#include <random>
#include <regex>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "gmlp/checkpoint.h"
#include "gmlp/comm.h"
#include "gmlp/config.h"
#include "gmlp/decoder.h"
#include "gmlp/error.h"
#include "gmlp/model.h"
#include "gmlp/optimizer.h"
#include "gmlp/trainer.h"
#include "ops/bf16.h"
#include "ops/ops.h"
#include "separate_memory.h"
#include "test_util.h"
#include "train/data_parallel.h"

namespace gmlp {
namespace {

using Vec = std::vector<float>;
using Ids = std::vector<int32_t>;

bool have_gpu() { return cuda_built() && cuda_device_count() > 0; }

// Skipped where there is no GPU; failed where the machine has the NVIDIA driver (or the
// emulator was asked for) and CUDA still does not work (a driver older than the runtime,
// the module not loading): a GPU session must not pass by skipping every GPU test.
#define REQUIRE_GPU()                                                   \
  if (!have_gpu()) {                                                    \
    bool broken_ = false;                                               \
    const std::string why_ = cuda_unusable_reason(&broken_);            \
    if (broken_) FAIL() << "CUDA is there but does not work: " << why_; \
    GTEST_SKIP() << why_;                                               \
  }

using test::separate_backend;

// An environment variable for the length of a test (value null: unset), then as it was.
struct ScopedEnv {
  std::string name, saved;
  bool had;
  ScopedEnv(const char* var, const char* value) : name(var), had(std::getenv(var) != nullptr) {
    if (had) saved = std::getenv(var);
    if (value) setenv(var, value, 1);
    else unsetenv(var);
  }
  ~ScopedEnv() {
    if (had) setenv(name.c_str(), saved.c_str(), 1);
    else unsetenv(name.c_str());
  }
};

// The rest of the process runs in fp32, whatever a test does: each device's precision
// set back when the test ends.
struct Fp32Again {
  std::vector<Device> devices{Device::cuda};
  ~Fp32Again() {
    for (Device d : devices) use_precision(d, Precision::fp32);
  }
};

// The L2 norms of got - want and of want over n values, in double.
struct L2 {
  double diff = 0, norm = 0;
};
L2 l2_distance(const float* got, const float* want, size_t n) {
  double d2 = 0, n2 = 0;
  for (size_t i = 0; i < n; ++i) {
    d2 += (double(got[i]) - want[i]) * (double(got[i]) - want[i]);
    n2 += double(want[i]) * want[i];
  }
  return {std::sqrt(d2), std::sqrt(n2)};
}

// ---- the variants every model-level test runs

struct Variant {
  std::string name;
  std::function<void(ModelConfig&)> edit;
  int T = 0;  // the batch's length; 0: the config's seq_len
};
void PrintTo(const Variant& v, std::ostream* os) { *os << v.name; }

ModelConfig tiny(Task task) {
  ModelConfig c;
  c.task = task;
  c.d_model = 16;
  c.d_ffn = 32;
  c.n_layers = 2;
  c.seq_len = 24;
  c.spatial_init = 0.5f;  // large, so that mixing errors show
  if (task == Task::classify) c.n_classes = 3;
  if (task == Task::vision) {
    c.vocab_size = 0;
    c.tokenizer = nullptr;
    c.n_classes = 3;
    c.image_channels = 2;
    c.image_height = 8;
    c.image_width = 12;
    c.patch_height = 4;
    c.patch_width = 3;
    c.seq_len = 8;
  }
  return c;
}

const std::vector<Variant>& variants() {
  static const std::vector<Variant> v = {
      {"lm", [](ModelConfig&) {}},
      {"lm_tanh_sinusoidal", [](ModelConfig& c) { c.gelu = Gelu::tanh; c.pos_embedding = PosEmbedding::sinusoidal; }},
      {"lm_long", [](ModelConfig& c) { c.seq_len = 200; }},  // several causal row blocks
      {"lm_toeplitz", [](ModelConfig& c) { c.spatial = Spatial::toeplitz; }},
      {"lm_heads", [](ModelConfig& c) { c.sgu_heads = 2; }},
      {"lm_amlp", [](ModelConfig& c) { c.d_attn = 8; }},
      {"lm_none", [](ModelConfig& c) { c.sgu = Sgu::none; }},
      {"lm_linear", [](ModelConfig& c) { c.sgu = Sgu::linear; }},
      {"lm_additive", [](ModelConfig& c) { c.sgu = Sgu::additive; }},
      {"lm_multiplicative", [](ModelConfig& c) { c.sgu = Sgu::multiplicative; }},
      {"lm_odd_gate", [](ModelConfig& c) { c.d_ffn = 18; }},  // 9 gate channels: the SGU's passes a channel a thread
      {"mlm", [](ModelConfig& c) { c.task = Task::mlm; }},
      {"mlm_amlp_heads", [](ModelConfig& c) { c.task = Task::mlm; c.d_attn = 8; c.sgu_heads = 2; }},
      {"classify_padded", [](ModelConfig& c) { c = tiny(Task::classify); c.d_attn = 8; }},
      {"vision_stochastic_depth", [](ModelConfig& c) { c = tiny(Task::vision); c.survival_prob = 0.5f; }},
      {"lm_dropout_stochastic_depth", [](ModelConfig& c) { c.dropout = 0.2f; c.survival_prob = 0.5f; }},
      {"classify_dropout", [](ModelConfig& c) {  // finetune's defaults: dropout on the blocks and the head
         c = tiny(Task::classify);
         c.dropout = 0.1f;
         c.head_dropout = 0.3f;
       }},
      // Padded rows through the other SGU forms' direct paths, with heads and Toeplitz.
      {"classify_padded_multiplicative_heads", [](ModelConfig& c) {
         c = tiny(Task::classify);
         c.sgu = Sgu::multiplicative;
         c.sgu_heads = 2;
       }},
      {"classify_padded_additive_toeplitz", [](ModelConfig& c) {
         c = tiny(Task::classify);
         c.sgu = Sgu::additive;
         c.spatial = Spatial::toeplitz;
       }},
      {"classify_padded_linear", [](ModelConfig& c) { c = tiny(Task::classify); c.sgu = Sgu::linear; }},
      {"mlm_toeplitz", [](ModelConfig& c) { c.task = Task::mlm; c.spatial = Spatial::toeplitz; }},  // two-sided
      // Heads and a non-split form over several causal row blocks.
      {"lm_long_heads_multiplicative", [](ModelConfig& c) {
         c.seq_len = 200;
         c.sgu_heads = 2;
         c.sgu = Sgu::multiplicative;
       }},
      // Batches shorter than the window (W[:T, :T] of a wider W) and, Toeplitz, longer
      // (rows past n on the last bias).
      {"lm_shorter_than_n", [](ModelConfig&) {}, 17},
      {"lm_toeplitz_longer_than_n", [](ModelConfig& c) { c.spatial = Spatial::toeplitz; }, 31},
      {"mlm_toeplitz_longer_than_n", [](ModelConfig& c) { c.task = Task::mlm; c.spatial = Spatial::toeplitz; }, 31},
  };
  return v;
}

ModelConfig config_of(const Variant& v) {
  ModelConfig c = tiny(Task::causal_lm);
  v.edit(c);
  return c;
}

// One batch of the config's task with random content; owns its buffers.
struct TestBatch {
  Ids tokens, targets, lengths;
  Vec images, keep;
  Batch batch;
  TestBatch(const ModelConfig& c, int B, uint64_t seed, int length = 0) {
    std::mt19937 rng{uint32_t(seed)};
    const int T = length > 0 ? length : c.seq_len;
    batch.B = B;
    batch.T = T;
    if (c.token_input()) {
      std::uniform_int_distribution<int> tok(0, c.vocab_size - 1);
      tokens.resize(size_t(B) * T);
      for (auto& x : tokens) x = tok(rng);
      batch.tokens = tokens.data();
      batch.stride = T;
    } else {
      std::normal_distribution<float> px(0.f, 1.f);
      images.resize(size_t(B) * c.image_channels * c.image_height * c.image_width);
      for (auto& x : images) x = px(rng);
      batch.images = images.data();
    }
    if (c.per_token_output()) {
      std::uniform_int_distribution<int> tok(0, c.vocab_size - 1);
      targets.resize(size_t(B) * T);
      for (size_t i = 0; i < targets.size(); ++i)
        targets[i] = c.task == Task::mlm && i % 3 != 0 ? -1 : tok(rng);  // MLM: a third have targets
    } else {
      std::uniform_int_distribution<int> cls(0, c.n_classes - 1);
      targets.resize(size_t(B));
      for (auto& x : targets) x = cls(rng);
    }
    batch.targets = targets.data();
    if (c.task == Task::classify) {
      lengths.resize(size_t(B));
      for (int b = 0; b < B; ++b) lengths[size_t(b)] = T - (b * 7) % (T - 1);  // padded rows of several lengths
      batch.lengths = lengths.data();
    }
    if (c.survival_prob < 1.f) {
      keep.resize(size_t(c.n_layers) * B);
      Rng r(seed, 4);
      draw_keep(c, B, r, keep.data());
      batch.keep = keep.data();
    }
    Rng r(seed, 5);
    draw_dropout(c, r, batch);
  }
};

std::unique_ptr<Model> make(const ModelConfig& c, Backend& be) {
  auto m = std::make_unique<Model>(c, be);
  Rng rng(11);
  m->init(rng);
  m->set_sparse_mlm_head(true);
  return m;
}

TrainConfig train_config() {
  TrainConfig tc;
  tc.lr = 1e-2f;
  tc.clip = 0.5f;  // small, so that clipping acts
  return tc;
}

// `steps` training steps (forward, backward, clipping, AdamW); returns the losses.
std::vector<double> train_steps(Model& m, AdamW& opt, const Batch& b, int steps) {
  std::vector<double> losses;
  for (int s = 0; s < steps; ++s) {
    m.zero_grad();
    losses.push_back(m.forward(b));
    m.backward();
    clip_grad_norm(m, 0.5f);
    opt.step(m, learning_rate(train_config(), m.config().d_model, s + 1));
  }
  return losses;
}

// ---- --device

TEST(DeviceChoice, AutoIsTheCpuWithoutAUsableDevice) {
  if (have_gpu()) {
    EXPECT_EQ(parse_device("auto"), Device::cuda);
    return;
  }
  EXPECT_EQ(parse_device("auto"), Device::cpu);
  EXPECT_EQ(parse_device("cpu"), Device::cpu);
}

TEST(DeviceChoice, OtherWordsAreRefused) {
  EXPECT_NE(test::error_of([] { parse_device("gpu"); }).find("'gpu' is not one of cpu, cuda, auto"), std::string::npos);
}

TEST(DeviceChoice, CudaWithoutADeviceIsAClearErrorAndWritesNothing) {
  if (have_gpu()) GTEST_SKIP() << "a CUDA device is present: --device cuda is valid here";
  test::TempDir dir("device");
  const std::string out = dir.file("run");
  const auto r = test::run_command(test::gmlp_exe() + " train --device cuda --steps 1 --data " + test::kGplText +
                                   " --out " + out + " 2>&1");
  EXPECT_EQ(r.exit_code, 1) << r.output;
  const std::string why = cuda_built() ? "no CUDA device is visible" : "this gmlp was built without the CUDA backend";
  EXPECT_NE(r.output.find("gmlp: error: --device cuda: " + why), std::string::npos) << r.output;
  EXPECT_FALSE(std::filesystem::exists(out));
  // Every command that runs a model has the option.
  for (const char* cmd : {"finetune", "eval", "generate", "classify", "classify-image", "bench", "ablate"}) {
    const auto h = test::run_command(test::gmlp_exe() + " " + cmd + " --help 2>&1");
    EXPECT_NE(h.output.find("--device"), std::string::npos) << cmd;
  }
}

// Where the driver is present but CUDA fails, --device cuda says what failed, and
// --device auto runs on the CPU saying so once, instead of passing for a machine
// without a GPU: a module that cannot be loaded, and a driver older than the runtime.
TEST(DeviceChoice, ABrokenCudaIsNamedNotTakenForNoGpu) {
  if (!cuda_built()) GTEST_SKIP() << "this build has no CUDA backend";
  test::TempDir dir("broken_cuda");
  const std::string train = " train --steps 1 --no-progress --data " + test::kGplText + " --set model.d_model=16"
                            " --set model.d_ffn=32 --set model.n_layers=1 --set model.seq_len=16";
  struct Case {
    std::string env, why;
  };
  std::vector<Case> cases = {{"GMLP_CUDA_EMULATOR=" + dir.file("missing.so"), "cannot load the CUDA backend module"}};
#ifdef GMLP_CUDA_EMULATOR_MODULE
  cases.push_back({std::string("GMLP_CUDA_EMULATOR=") + GMLP_CUDA_EMULATOR_MODULE + " GMLP_CUDA_EMULATOR_DRIVER=old",
                   "the CUDA runtime cannot list the devices: CUDA driver version is insufficient"});
#endif
  for (size_t i = 0; i < cases.size(); ++i) {
    const Case& c = cases[i];
    const std::string out = dir.file("cuda" + std::to_string(i));
    auto r = test::run_command(c.env + " " + test::gmlp_exe() + train + " --device cuda --out " + out + " 2>&1");
    EXPECT_EQ(r.exit_code, 1) << r.output;
    EXPECT_NE(r.output.find("gmlp: error: --device cuda: " + c.why), std::string::npos) << r.output;
    EXPECT_FALSE(std::filesystem::exists(out));
    r = test::run_command(c.env + " " + test::gmlp_exe() + train + " --device auto --out " +
                          dir.file("auto" + std::to_string(i)) + " 2>&1");
    EXPECT_EQ(r.exit_code, 0) << r.output;
    const std::string warning = "gmlp: warning: --device auto: running on the CPU: " + c.why;
    EXPECT_NE(r.output.find(warning), std::string::npos) << r.output;
    EXPECT_EQ(r.output.find(warning), r.output.rfind(warning)) << "said once:\n" << r.output;
  }
}

// GMLP_DEVICE is --device's default: a command line still overrides it, and a bad value
// is an error that names the variable, before anything is written.
TEST(DeviceChoice, GmlpDeviceSetsTheDefaultAndABadOneIsNamed) {
  test::TempDir dir("gmlp_device");
  const std::string out = dir.file("run");
  const std::string train = " train --steps 1 --data " + test::kGplText + " --out " + out;
  const auto bad = test::run_command("GMLP_DEVICE=gpu " + test::gmlp_exe() + train);
  EXPECT_EQ(bad.exit_code, 1) << bad.output;
  EXPECT_NE(bad.output.find("--device: 'gpu' is not one of cpu, cuda, auto (the value of the environment variable "
                            "GMLP_DEVICE)"),
            std::string::npos)
      << bad.output;
  EXPECT_FALSE(std::filesystem::exists(out));
  const auto over = test::run_command("GMLP_DEVICE=gpu " + test::gmlp_exe() + train + " --device cpu");
  EXPECT_EQ(over.exit_code, 0) << over.output;
  EXPECT_TRUE(std::filesystem::exists(out + "/model.safetensors")) << over.output;
  const auto help = test::run_command("GMLP_DEVICE=cpu " + test::gmlp_exe() + " eval --help");
  EXPECT_NE(help.output.find("GMLP_DEVICE"), std::string::npos) << help.output;
}

// bf16 on the CPU runs on its bf16 instructions; on a CPU without them it is refused
// before anything is written, unless GMLP_CPU_BF16=emulate asks for the emulation (whose
// one value is checked); a misspelt precision is refused as well.
TEST(DeviceChoice, Bf16OnTheCpuWithoutInstructionsIsAClearErrorAndWritesNothing) {
  test::TempDir dir("precision");
  const std::string out = dir.file("run");
  const std::string train = " train --device cpu --precision bf16 --steps 2 --data " + test::kGplText + " --out ";
  const auto r = test::run_command("unset GMLP_CPU_BF16; " + test::gmlp_exe() + train + out + " 2>&1");
  if (ops::cpu_has_bf16()) {
    EXPECT_EQ(r.exit_code, 0) << r.output;
    EXPECT_TRUE(std::filesystem::exists(out + "/model.safetensors")) << r.output;
  } else {
    EXPECT_EQ(r.exit_code, 1) << r.output;
    EXPECT_NE(r.output.find("gmlp: error: --precision bf16 on the CPU: this CPU has no bf16 matrix instructions"),
              std::string::npos)
        << r.output;
    EXPECT_NE(r.output.find("GMLP_CPU_BF16=emulate"), std::string::npos) << r.output;
    EXPECT_FALSE(std::filesystem::exists(out));
  }
  const auto typo = test::run_command("GMLP_CPU_BF16=emulated " + test::gmlp_exe() + train + out + "2 2>&1");
  EXPECT_EQ(typo.exit_code, 1) << typo.output;
  EXPECT_NE(typo.output.find("GMLP_CPU_BF16: 'emulated' is not 'emulate'"), std::string::npos) << typo.output;
  EXPECT_FALSE(std::filesystem::exists(out + "2"));
  const auto emulated = test::run_command("GMLP_CPU_BF16=emulate " + test::gmlp_exe() + train + out + "3 2>&1");
  EXPECT_EQ(emulated.exit_code, 0) << emulated.output;
  EXPECT_TRUE(std::filesystem::exists(out + "3/model.safetensors")) << emulated.output;
  const auto gen = test::run_command("GMLP_CPU_BF16=emulate " + test::gmlp_exe() + " generate --precision bf16 --model " +
                                     out + "3 --prompt 'The ' --max-tokens 8 2>&1");
  EXPECT_EQ(gen.exit_code, 0) << gen.output;
  const auto bad = test::run_command(test::gmlp_exe() + " bench --precision fp16 --config " + test::source_dir() +
                                     "/configs/tiny.json 2>&1");
  EXPECT_EQ(bad.exit_code, 1) << bad.output;
  EXPECT_NE(bad.output.find("--precision: 'fp16' is not one of fp32, bf16"), std::string::npos) << bad.output;
  for (const char* cmd : {"train", "finetune", "eval", "generate", "classify", "classify-image", "bench", "ablate"}) {
    const auto h = test::run_command(test::gmlp_exe() + " " + cmd + " --help 2>&1");
    EXPECT_NE(h.output.find("--precision"), std::string::npos) << cmd;
  }
}

// The CUDA backend is a module opened on demand: a CPU run never maps it or the CUDA
// libraries (they cost ~160 MB of resident memory and the start-up time of every run).
// The dynamic loader's own trace (LD_DEBUG=files) lists every object a process loads.
TEST(DeviceChoice, ACpuRunLoadsNoCudaLibrary) {
  test::TempDir dir("device_libs");
  const bool driver = std::filesystem::exists("/dev/nvidiactl");
  // Without a driver even the default (--device auto) must not open the module.
  for (const char* device : driver ? std::vector<const char*>{"cpu"} : std::vector<const char*>{"cpu", "auto"}) {
    const std::string out = dir.file(std::string("run_") + device);
    const auto r = test::run_command("LD_DEBUG=files " + test::gmlp_exe() + " --threads 1 train --device " + device +
                                     " --steps 1 --data " + test::kGplText + " --out " + out + " 2>&1");
    ASSERT_EQ(r.exit_code, 0) << r.output.substr(r.output.size() > 2000 ? r.output.size() - 2000 : 0);
    ASSERT_NE(r.output.find("file=libopenblas"), std::string::npos) << "LD_DEBUG gave no trace";
    for (const char* lib : {"libgmlp_cuda", "libcudart", "libcublas"})
      EXPECT_EQ(r.output.find(lib), std::string::npos) << device << " loaded " << lib;
  }
  if (!cuda_built() || driver) return;
  // And --device cuda on such a machine says why before loading anything.
  const auto r = test::run_command("LD_DEBUG=files " + test::gmlp_exe() + " train --device cuda --steps 1 --data " +
                                   test::kGplText + " --out " + dir.file("cuda") + " 2>&1");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.output.find("no NVIDIA driver"), std::string::npos) << r.output;
  EXPECT_EQ(r.output.find("libgmlp_cuda"), std::string::npos);
}

// ---- a device model's mirrors, without a device

class SeparateMemory : public ::testing::TestWithParam<Variant> {};

TEST_P(SeparateMemory, TrainingEqualsTheCpuBitForBit) {
  const ModelConfig c = config_of(GetParam());
  auto cpu = make(c, cpu_backend());
  auto dev = make(c, separate_backend());
  EXPECT_EQ(std::memcmp(cpu->weights(), dev->weights(), cpu->num_params() * sizeof(float)), 0);
  TestBatch tb(c, 3, 5, GetParam().T);
  AdamW ocpu(*cpu, train_config()), odev(*dev, train_config());
  const auto lc = train_steps(*cpu, ocpu, tb.batch, 3);
  const auto ld = train_steps(*dev, odev, tb.batch, 3);
  EXPECT_EQ(lc, ld);
  // Read back through the host mirrors: weights, gradients, moments, logits.
  EXPECT_EQ(std::memcmp(cpu->weights(), dev->weights(), cpu->num_params() * sizeof(float)), 0);
  EXPECT_EQ(std::memcmp(cpu->grads(), dev->grads(), cpu->num_params() * sizeof(float)), 0);
  EXPECT_EQ(ocpu.m(), odev.m());
  EXPECT_EQ(ocpu.v(), odev.v());
  EXPECT_EQ(cpu->logit_rows(), dev->logit_rows());
  EXPECT_EQ(std::memcmp(cpu->logits(), dev->logits(), size_t(cpu->logit_rows()) * c.out_dim() * sizeof(float)), 0);
}

// Issue 10's "no host-device copies inside a step": once the weights are on the device
// and the arena is made, a training step (train_step: forward, backward, clipping, AdamW)
// sends the device the batch alone (ids and targets, padding lengths, stochastic depth's
// L x B multipliers, or the images), all of it before the step's first op (a GPU's
// upload from pageable memory waits for the queue to drain), and reads back 16 bytes
// once, after every update of the step is queued: the loss and the gradients' sum of
// squares. Dropout's masks are not sent: the ops compute them (docs/variants.md).
TEST_P(SeparateMemory, AStepSendsTheDeviceTheBatchFirstAndReadsBackOnceAtItsEnd) {
  const ModelConfig c = config_of(GetParam());
  test::SeparateMemoryBackend& be = separate_backend();
  auto dev = make(c, be);
  const int B = 3;
  TestBatch tb(c, B, 5, GetParam().T);
  AdamW opt(*dev, train_config());
  const float lr = learning_rate(train_config(), c.d_model, 1);
  train_step(*dev, opt, tb.batch, 0.5f, lr);  // weights up, arena made
  be.uploaded_bytes = be.downloaded_bytes = be.adamw_calls = 0;
  be.adamw_calls_at_download.clear();
  const int steps = 2;
  for (int s = 0; s < steps; ++s) {
    be.ops_at_upload.clear();
    be.ops = 0;
    const StepResult r = train_step(*dev, opt, tb.batch, 0.5f, lr);
    EXPECT_TRUE(std::isfinite(r.loss) && r.loss > 0 && r.grad_norm > 0);
    EXPECT_FALSE(be.ops_at_upload.empty());
    for (size_t k : be.ops_at_upload) EXPECT_EQ(k, 0u) << "an upload after the step's first op";
  }
  const size_t M = size_t(B) * tb.batch.T;
  const size_t batch_bytes = sizeof(int32_t) * (2 * M + B) + sizeof(float) * (size_t(c.n_layers) * B + tb.images.size());
  EXPECT_LE(be.uploaded_bytes, steps * batch_bytes);
  EXPECT_GT(be.uploaded_bytes, 0u);
  EXPECT_EQ(be.downloaded_bytes, steps * 2 * sizeof(double));
  ASSERT_EQ(be.adamw_calls_at_download.size(), size_t(steps));
  EXPECT_EQ(be.adamw_calls_at_download[0] * steps, be.adamw_calls) << "a read-back before the step's updates";
  EXPECT_EQ(be.adamw_calls_at_download[1], be.adamw_calls);
  // AdamW updates the whole buffer in one call a step (a launch on a GPU), told where the
  // decaying weights are, not one call per run of tensors with the same weight decay.
  const std::vector<ParamInfo>& layout = dev->params();
  size_t runs = 0;
  for (size_t i = 0; i < layout.size(); ++i) {
    if (i > 0) {
      ASSERT_EQ(layout[i].offset, layout[i - 1].offset + layout[i - 1].size) << "one buffer, in order";
    }
    runs += i == 0 || layout[i].decay != layout[i - 1].decay;
  }
  EXPECT_GT(runs, 2u);
  EXPECT_EQ(be.adamw_calls, size_t(steps));
}

INSTANTIATE_TEST_SUITE_P(Variants, SeparateMemory, ::testing::ValuesIn(variants()),
                         [](const auto& info) { return info.param.name; });

TEST(SeparateMemoryMirror, HostWritesReachTheDeviceAndCheckpointsRoundTrip) {
  const ModelConfig c = tiny(Task::causal_lm);
  auto cpu = make(c, cpu_backend());
  auto dev = make(c, separate_backend());
  TestBatch tb(c, 2, 8);
  AdamW ocpu(*cpu, train_config()), odev(*dev, train_config());
  train_steps(*cpu, ocpu, tb.batch, 2);
  train_steps(*dev, odev, tb.batch, 2);
  // A write through weights() after device updates must be seen by the next forward.
  const ParamInfo& p = cpu->param("head.bias");
  cpu->weights()[p.offset] += 1.f;
  dev->weights()[p.offset] += 1.f;
  EXPECT_EQ(cpu->forward(tb.batch), dev->forward(tb.batch));
  // Moments written through m()/v() (a resumed state) are uploaded at the next step.
  odev.m()[0] = ocpu.m()[0] = 0.25f;
  EXPECT_EQ(train_steps(*cpu, ocpu, tb.batch, 1), train_steps(*dev, odev, tb.batch, 1));
  // A device model's checkpoint is the host mirror: it loads on the CPU unchanged.
  test::TempDir dir("mirror");
  save_model(*dev, dir.file("m.safetensors"));
  auto back = load_model(dir.file("m.safetensors"));
  EXPECT_EQ(std::memcmp(back->weights(), cpu->weights(), cpu->num_params() * sizeof(float)), 0);
}

// The weights' average (ModelEma, train.model_ema) on the CPU and on memory kept apart as
// a device's: it starts as the weights, each update is fma(1 - decay, w, avg * decay) of
// the weights the step left, the same bits on both; swapped in, the model evaluates and
// saves the average (its host mirror follows), and gets its own weights back after, f
// returning or throwing; a checkpoint's average set back is the average.
TEST(SeparateMemoryMirror, TheWeightsAverageFollowsTheStepsAndSwapsIn) {
  const ModelConfig c = tiny(Task::causal_lm);
  TestBatch tb(c, 2, 8);
  std::vector<std::vector<float>> averages;
  for (Backend* be : std::initializer_list<Backend*>{&cpu_backend(), &separate_backend()}) {
    auto m = make(c, *be);
    AdamW opt(*m, train_config());
    ModelEma ema(*m, 0.75f);
    std::vector<float> want(m->weights(), m->weights() + m->num_params());
    for (int step = 0; step < 3; ++step) {
      train_step(*m, opt, tb.batch, 0.5f, 1e-2f, {}, [&] { ema.update(*m); });
      const float* w = m->weights();
      for (size_t i = 0; i < want.size(); ++i) want[i] = std::fma(0.25f, w[i], want[i] * 0.75f);
    }
    const std::vector<float> avg = ema.weights();
    EXPECT_EQ(avg, want);
    const std::vector<float> own(m->weights(), m->weights() + m->num_params());
    ASSERT_NE(own, avg);
    const double loss_own = m->forward(tb.batch);
    double loss_avg = 0;
    test::TempDir dir("ema");
    ema.swapped_in(*m, [&] {
      loss_avg = m->forward(tb.batch);
      save_model(*m, dir.file("avg.safetensors"));
    });
    EXPECT_NE(loss_avg, loss_own);
    EXPECT_EQ(std::vector<float>(m->weights(), m->weights() + m->num_params()), own);
    EXPECT_EQ(m->forward(tb.batch), loss_own) << "the model's own weights back on the device";
    auto saved = load_model(dir.file("avg.safetensors"));
    EXPECT_EQ(std::vector<float>(saved->weights(), saved->weights() + saved->num_params()), avg);
    EXPECT_THROW(ema.swapped_in(*m, [] { throw Error("stop"); }), Error);
    EXPECT_EQ(std::vector<float>(m->weights(), m->weights() + m->num_params()), own);
    ModelEma again(*m, 0.75f);
    again.set_weights(avg);
    EXPECT_EQ(again.weights(), avg);
    averages.push_back(avg);
  }
  EXPECT_EQ(averages[0], averages[1]);
}

// A step whose loss is not finite (a NaN weight here) updates nothing, though the host
// learns of it only after the update is queued: the device skips it (ops/step_guard.h).
// The weights and both moments stay bit for bit those of the last good step, and the
// step count (bias correction, checkpoints) its count.
void expect_a_non_finite_step_to_change_nothing(Backend& be) {
  const ModelConfig c = tiny(Task::causal_lm);
  auto m = make(c, be);
  TestBatch tb(c, 2, 3);
  AdamW opt(*m, train_config());
  const float lr = learning_rate(train_config(), c.d_model, 1);
  const StepResult good = train_step(*m, opt, tb.batch, 0.5f, lr);
  ASSERT_TRUE(std::isfinite(good.loss) && std::isfinite(good.grad_norm));
  m->weights()[m->param("head.bias").offset] = NAN;
  const std::vector<float> w(m->weights(), m->weights() + m->num_params());
  const std::vector<float> m0 = opt.m(), v0 = opt.v();
  ASSERT_NE(m0, std::vector<float>(m0.size(), 0.f));
  const StepResult bad = train_step(*m, opt, tb.batch, 0.5f, lr);
  EXPECT_FALSE(std::isfinite(bad.loss));
  EXPECT_EQ(opt.steps_taken(), 1) << "the step count counts the skipped update";
  EXPECT_EQ(std::memcmp(m->weights(), w.data(), sizeof(float) * w.size()), 0) << "the weights were updated";
  EXPECT_EQ(std::memcmp(opt.m().data(), m0.data(), sizeof(float) * m0.size()), 0) << "m was updated";
  EXPECT_EQ(std::memcmp(opt.v().data(), v0.data(), sizeof(float) * v0.size()), 0) << "v was updated";
}

TEST(SeparateMemoryMirror, ANonFiniteStepChangesNothing) {
  expect_a_non_finite_step_to_change_nothing(separate_backend());
  expect_a_non_finite_step_to_change_nothing(cpu_backend());
}

// A batch whose images are already backend memory (gmlp bench's) is read in place: the
// same steps as from the host, bit for bit, without the images crossing again, and the
// arena holds no image buffer of its own.
TEST(SeparateMemoryMirror, ImagesOnTheBackendAreReadInPlace) {
  ModelConfig c = tiny(Task::vision);
  c.survival_prob = 0.5f;
  test::SeparateMemoryBackend& be = separate_backend();
  const int B = 3;
  TestBatch tb(c, B, 7);
  const size_t image_bytes = sizeof(float) * tb.images.size();
  // What a model's first three steps allocate (gradients, moments, the arena) and upload.
  size_t uploaded = 0;
  auto made_by_steps = [&](Model& m, AdamW& o, const Batch& b, std::vector<double>& losses) {
    const size_t before = be.live_bytes();
    be.uploaded_bytes = 0;
    losses = train_steps(m, o, b, 3);
    uploaded = be.uploaded_bytes;
    return be.live_bytes() - before;
  };
  auto host_fed = make(c, be);
  AdamW o1(*host_fed, train_config());
  std::vector<double> expected, got;
  const size_t host_fed_bytes = made_by_steps(*host_fed, o1, tb.batch, expected);
  const size_t host_fed_uploaded = uploaded;

  DeviceBuffer<float> images(be, tb.images.size());
  be.upload(images.data(), tb.images.data(), image_bytes);
  Batch on = tb.batch;
  on.images = images.data();
  on.images_on_backend = true;
  auto resident = make(c, be);
  AdamW o2(*resident, train_config());
  const size_t resident_bytes = made_by_steps(*resident, o2, on, got);
  EXPECT_EQ(got, expected);
  EXPECT_EQ(std::memcmp(resident->weights(), host_fed->weights(), sizeof(float) * resident->num_params()), 0);
  EXPECT_EQ(host_fed_uploaded - uploaded, 3 * image_bytes) << "the images were uploaded again";
  EXPECT_EQ(host_fed_bytes - resident_bytes, image_bytes) << "the arena made an image buffer it does not use";
}

// ---- the CUDA backend against the CPU engine

// Values as bf16 bits (ops::bf16_bits, rounded to nearest).
std::vector<uint16_t> bf16_of(const Vec& v) {
  std::vector<uint16_t> h(v.size());
  for (size_t i = 0; i < v.size(); ++i) h[i] = ops::bf16_bits(v[i]);
  return h;
}

// Uploads host vectors to the device and reads them back.
struct OnDevice {
  Backend& be = backend_for(Device::cuda);
  std::vector<DeviceBuffer<float>> bufs;
  std::vector<DeviceBuffer<int32_t>> ibufs;
  float* up(const Vec& v) {
    bufs.emplace_back(be, v.size());
    be.upload(bufs.back().data(), v.data(), v.size() * sizeof(float));
    return bufs.back().data();
  }
  int32_t* up(const Ids& v) {
    ibufs.emplace_back(be, v.size());
    be.upload(ibufs.back().data(), v.data(), v.size() * sizeof(int32_t));
    return ibufs.back().data();
  }
  Vec down(const float* p, size_t n) {
    Vec v(n);
    be.download(v.data(), p, n * sizeof(float));
    return v;
  }
  // Device doubles (a loss, a sum of squares, a step's guard), and one read back.
  std::vector<DeviceBuffer<double>> dbufs;
  double* up(const std::vector<double>& v) {
    dbufs.emplace_back(be, v.size());
    be.upload(dbufs.back().data(), v.data(), v.size() * sizeof(double));
    return dbufs.back().data();
  }
  double down(const double* p) {
    double v = 0;
    be.download(&v, p, sizeof v);
    return v;
  }
};

Vec randn(size_t n, uint32_t seed, float scale = 1.f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> d(0.f, scale);
  Vec v(n);
  for (auto& x : v) x = d(rng);
  return v;
}

constexpr float kAtol = 1e-5f, kRtol = 1e-5f;

TEST(CudaOps, GemmEveryTransposeAndAnOffsetView) {
  REQUIRE_GPU();
  for (int ta = 0; ta < 2; ++ta)
    for (int tb = 0; tb < 2; ++tb) {
      // Views into larger buffers: each operand starts `off` floats in, its rows `pad`
      // floats longer than it uses (the padding of C must come back untouched).
      const int M = 37, N = 53, K = 71, pad = 5, off = 3;
      const int lda = (ta ? M : K) + pad, ldb = (tb ? K : N) + pad, ldc = N + pad;
      const Vec A = randn(off + size_t(ta ? K : M) * lda, 1), B = randn(off + size_t(tb ? N : K) * ldb, 2),
                C0 = randn(off + size_t(M) * ldc, 3);
      Vec C = C0;
      cpu_backend().gemm(ta, tb, M, N, K, 0.7f, A.data() + off, lda, B.data() + off, ldb, 0.3f, C.data() + off, ldc);
      OnDevice d;
      float* dC = d.up(C0);
      d.be.gemm(ta, tb, M, N, K, 0.7f, d.up(A) + off, lda, d.up(B) + off, ldb, 0.3f, dC + off, ldc);
      EXPECT_TRUE(test::all_close(d.down(dC, C.size()).data(), C.data(), C.size(), 1e-4f, kRtol, "gemm"));
    }
}

// Backend::upload_beside, the next training batch's images' way up (src/train/
// batch_ahead.h): from page-locked host memory, on a stream of its own. The work queued
// after await_uploads() sees its bytes; after finish_uploads() the host may write the
// source again. On the emulator the copy happens at the first wait for it (tests/cuda_emu/
// emulator.cpp), so work queued without await_uploads() would scale garbage here.
TEST(CudaOps, AnUploadBesideLandsForTheWorkThatAwaitsIt) {
  REQUIRE_GPU();
  Backend& be = backend_for(Device::cuda);
  constexpr size_t n = 1000;
  HostBuffer<float> host(be, n);
  for (size_t i = 0; i < n; ++i) host.data()[i] = 0.5f * float(i);
  DeviceBuffer<float> dev(be, n);
  be.synchronize();  // its zeroing, queued on the device's own stream, before the upload
  be.upload_beside(dev.data(), host.data(), sizeof(float) * n);
  be.await_uploads();
  be.scale(dev.data(), n, 2.f);
  be.finish_uploads();
  std::fill(host.data(), host.data() + n, -1.f);  // the host's again
  std::vector<float> back(n);
  be.download(back.data(), dev.data(), sizeof(float) * n);
  for (size_t i = 0; i < n; ++i) ASSERT_EQ(back[i], float(i)) << "value " << i;
}

// An upload in line (Backend::upload_queued: a forward's token ids, targets, lengths and
// masks) lands after the work queued before it and before the work after it, and the
// host may write its source again after finish_queued_uploads. On the emulator, writing
// the source before the host waited ends the process (a GPU copies when its queue gets
// there), as does a source that is not page-locked (from pageable memory the copy makes
// the host wait for the device first, the wait it exists to avoid).
TEST(CudaOps, AnUploadInLineLandsBetweenTheWorkBeforeAndAfterIt) {
  REQUIRE_GPU();
  Backend& be = backend_for(Device::cuda);
  constexpr size_t n = 1000;
  HostBuffer<float> host(be, n);
  for (size_t i = 0; i < n; ++i) host.data()[i] = float(i);
  DeviceBuffer<float> dev(be, n);
  be.scale(dev.data(), n, 3.f);  // queued before: must not scale the upload
  be.upload_queued(dev.data(), host.data(), sizeof(float) * n);
  be.scale(dev.data(), n, 2.f);  // queued after: scales it
  be.finish_queued_uploads();
  std::fill(host.data(), host.data() + n, -1.f);
  std::vector<float> back(n);
  be.download(back.data(), dev.data(), sizeof(float) * n);
  for (size_t i = 0; i < n; ++i) ASSERT_EQ(back[i], 2.f * float(i)) << "value " << i;
  if (!std::getenv("GMLP_CUDA_EMULATOR")) return;
  const std::string style = GTEST_FLAG_GET(death_test_style);
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  auto upload = [&](bool pinned, bool write_early) {
    std::vector<float> pageable(n, 1.f);
    be.upload_queued(dev.data(), pinned ? host.data() : pageable.data(), sizeof(float) * n);
    if (write_early) host.data()[7] = 2.f;
    be.finish_queued_uploads();
    host.data()[8] = 3.f;  // the host's again
  };
  upload(true, false);
  EXPECT_DEATH(upload(true, true),
               "the host wrote the 4000 bytes at [0-9]+ while an asynchronous upload from them was in flight");
  EXPECT_DEATH(upload(false, false), "an asynchronous upload from memory that cudaMallocHost did not give");
  GTEST_FLAG_SET(death_test_style, style);
}

// The emulator's rules for an upload beside that no GPU tool checks: writing its source
// before anything waited for it ends the process, naming the bytes; so does an upload
// into memory that a fill queued before it on the device's own stream (a new buffer's
// zeroing) still has to write, which on a GPU may land after it; and so does one from
// memory that is not page-locked.
TEST(CudaOps, TheEmulatorEndsAnUploadBesideThatRacesTheHostOrAFill) {
  REQUIRE_GPU();
  if (!std::getenv("GMLP_CUDA_EMULATOR")) GTEST_SKIP() << "checks of the emulator's: a GPU copies when it copies";
  const std::string style = GTEST_FLAG_GET(death_test_style);
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  Backend& be = backend_for(Device::cuda);
  auto upload = [&](bool wait_for_fill, bool pinned, bool write_early) {
    HostBuffer<float> host(be, 1000);
    std::vector<float> pageable(1000, 1.f);
    std::fill(host.data(), host.data() + 1000, 1.f);
    DeviceBuffer<float> dev(be, 1000);
    if (wait_for_fill) be.synchronize();
    be.upload_beside(dev.data(), pinned ? host.data() : pageable.data(), 4000);
    if (write_early) host.data()[7] = 2.f;
    be.synchronize();
  };
  upload(true, true, false);  // by the rules: nothing to report
  EXPECT_DEATH(upload(true, true, true),
               "the host wrote the 4000 bytes at [0-9]+ while an asynchronous upload from them was in flight");
  EXPECT_DEATH(upload(false, true, false), "a fill queued before it on the legacy stream, not yet waited for");
  EXPECT_DEATH(upload(true, false, false), "an asynchronous upload from memory that cudaMallocHost did not give");
  GTEST_FLAG_SET(death_test_style, style);
}

// bf16 products both ways (GMLP_CUDA_BF16_GEMM), every transpose, offset views with
// padded rows, K = 0. Over bf16 copies made first (native): the CPU's float product of
// the inputs rounded to bf16 (ours: to nearest), to the order of the sums, and not the
// product of the float inputs. cuBLAS rounding float inputs as it loads them (fast):
// its rule is not documented (nor whether a small product takes the tensor cores at
// all), so within bf16's reach of either. (The batched products, reached through the
// ops, are the model tests'.)
TEST(CudaOps, Bf16ProductsBothWaysAreProductsOfRoundedInputs) {
  REQUIRE_GPU();
  Fp32Again restore;
  auto rounded = [](Vec v) {
    for (auto& x : v) x = ops::round_to_bf16(x);
    return v;
  };
  for (const char* how : {"fast", "native"}) {
    ScopedEnv env("GMLP_CUDA_BF16_GEMM", how);
    use_precision(Device::cuda, Precision::bf16);
    for (int ta = 0; ta < 2; ++ta)
      for (int tb = 0; tb < 2; ++tb) {
        const bool native = std::string(how) == "native";
        for (const int K : {71, 0}) {
          const int M = 37, N = 53, pad = 5, off = 3;
          const int lda = (ta ? M : K) + pad, ldb = (tb ? K : N) + pad, ldc = N + pad;
          const Vec A = randn(off + size_t(ta ? K : M) * lda, 1), B = randn(off + size_t(tb ? N : K) * ldb, 2),
                    C0 = randn(off + size_t(M) * ldc, 3);
          Vec C = C0, Cf = C0;
          cpu_backend().gemm(ta, tb, M, N, K, 0.7f, rounded(A).data() + off, lda, rounded(B).data() + off, ldb, 0.3f,
                             C.data() + off, ldc);
          cpu_backend().gemm(ta, tb, M, N, K, 0.7f, A.data() + off, lda, B.data() + off, ldb, 0.3f, Cf.data() + off,
                             ldc);
          OnDevice d;
          float* dC = d.up(C0);
          d.be.gemm(ta, tb, M, N, K, 0.7f, d.up(A) + off, lda, d.up(B) + off, ldb, 0.3f, dC + off, ldc);
          const Vec got = d.down(dC, C.size());
          const std::string name = std::string(how) + (ta ? " A^T" : " A") + (tb ? " B^T" : " B") + " K " +
                                   std::to_string(K);
          if (native || K == 0) {
            EXPECT_TRUE(test::all_close(got.data(), C.data(), C.size(), 1e-4f, 1e-4f, name));
          } else {
            EXPECT_TRUE(test::all_close(got.data(), C.data(), C.size(), 0.05f, 1e-2f, name + " (rounded inputs)"));
            EXPECT_TRUE(test::all_close(got.data(), Cf.data(), C.size(), 0.05f, 1e-2f, name + " (float inputs)"));
          }
          if (native && K > 0) {
            EXPECT_FALSE(test::all_close(got.data(), Cf.data(), C.size(), 1e-4f, 1e-4f, name + " (float inputs)"))
                << name << ": the product was not rounded to bf16";
          }
        }
      }
  }
}

// Training under bf16, the projections run over bf16 operands alone (block.cpp): the
// products of bf16 A and B into float C (alpha, beta, every transpose, offset views with
// padded rows) are the CPU's float products of the widened values, to the order of the
// sums; into bf16 C they are those products rounded, within a bf16 step, the padding of
// C untouched and K = 0 giving zeros; the projections over bf16 operands are the CPU's
// over the widened values; the rounding op is ops::bf16_bits to the bit (a NaN to a NaN); and
// the LayerNorm that writes its output in bf16 (and in float too when asked) gives the
// CPU's output rounded, forward and apply.
TEST(CudaOps, ProductsOverBf16OperandsAndTheLayerNormThatWritesThem) {
  REQUIRE_GPU();
  using U16 = std::vector<uint16_t>;
  auto widen = [](const U16& h) {
    Vec v(h.size());
    for (size_t i = 0; i < h.size(); ++i) v[i] = ops::from_bf16(h[i]);
    return v;
  };
  OnDevice d;
  std::vector<DeviceBuffer<uint16_t>> held;
  auto up16 = [&](const U16& h) {
    held.emplace_back(d.be, h.size());
    d.be.upload(held.back().data(), h.data(), h.size() * sizeof(uint16_t));
    return held.back().data();
  };
  auto down16 = [&](const uint16_t* p, size_t n) {
    U16 h(n);
    d.be.download(h.data(), p, n * sizeof(uint16_t));
    return h;
  };
  for (int ta = 0; ta < 2; ++ta)
    for (int tb = 0; tb < 2; ++tb)
      for (const int K : {71, 0}) {
        const int M = 37, N = 53, pad = 5, off = 3;
        const int lda = (ta ? M : K) + pad, ldb = (tb ? K : N) + pad, ldc = N + pad;
        const U16 A = bf16_of(randn(off + size_t(ta ? K : M) * lda, 1)),
                  B = bf16_of(randn(off + size_t(tb ? N : K) * ldb, 2));
        const Vec C0 = randn(off + size_t(M) * ldc, 3);
        const std::string name = std::string(ta ? "A^T" : "A") + (tb ? " B^T" : " B") + " K " + std::to_string(K);
        Vec C = C0, P(C0.size(), 0.f);
        cpu_backend().gemm(ta, tb, M, N, K, 0.7f, widen(A).data() + off, lda, widen(B).data() + off, ldb, 0.3f,
                           C.data() + off, ldc);
        cpu_backend().gemm(ta, tb, M, N, K, 1.f, widen(A).data() + off, lda, widen(B).data() + off, ldb, 0.f,
                           P.data() + off, ldc);
        const uint16_t *dA = up16(A), *dB = up16(B);
        float* dC = d.up(C0);
        d.be.gemm_bf16(ta, tb, M, N, K, 0.7f, dA + off, lda, dB + off, ldb, 0.3f, dC + off, ldc);
        EXPECT_TRUE(test::all_close(d.down(dC, C.size()).data(), C.data(), C.size(), 1e-4f, 1e-4f, name + " float C"));
        const U16 C16 = bf16_of(C0);
        uint16_t* dC16 = up16(C16);
        d.be.gemm_bf16(ta, tb, M, N, K, dA + off, lda, dB + off, ldb, dC16 + off, ldc);
        const U16 got = down16(dC16, C16.size());
        size_t padding_changed = 0;
        for (size_t i = 0; i < got.size(); ++i) {
          const bool in_c = i >= size_t(off) && (i - off) % ldc < size_t(N) && (i - off) / ldc < size_t(M);
          if (!in_c) padding_changed += got[i] != C16[i];
        }
        EXPECT_EQ(padding_changed, 0u) << name << ": bf16 C written outside its view";
        const Vec gw = widen(got);
        for (int r = 0; r < M; ++r)
          EXPECT_TRUE(test::all_close(gw.data() + off + size_t(r) * ldc, P.data() + off + size_t(r) * ldc, N, 1e-5f,
                                      1.f / 128, name + " bf16 C, row " + std::to_string(r)));
      }
  // The projections over bf16 x, dy and W: the CPU's over the widened values, the bias's
  // gradient from the float dy.
  {
    const int M = 70, in = 37, out = 45;
    const Vec xf = randn(size_t(M) * in, 10), Wf = randn(size_t(out) * in, 11, 0.3f), b = randn(out, 12),
              dy = randn(size_t(M) * out, 13), dx0 = randn(xf.size(), 14), dW0 = randn(Wf.size(), 15),
              db0 = randn(out, 16);
    const U16 x = bf16_of(xf), W = bf16_of(Wf), dy16 = bf16_of(dy);
    Vec y(size_t(M) * out), dx = dx0, dW = dW0, db = db0;
    Backend& cb = cpu_backend();
    cb.linear_forward(widen(x).data(), M, in, widen(W).data(), b.data(), out, y.data());
    cb.linear_backward(widen(dy16).data(), widen(x).data(), M, in, widen(W).data(), out, dx.data(), true, dW.data(),
                       nullptr);
    for (int r = 0; r < M; ++r)
      for (int c = 0; c < out; ++c) db[size_t(c)] += dy[size_t(r) * out + c];
    const uint16_t *gx = up16(x), *gW = up16(W);
    float *gy = d.up(Vec(y.size())), *gdx = d.up(dx0), *gdW = d.up(dW0), *gdb = d.up(db0);
    d.be.linear_forward_bf16(gx, M, in, gW, d.up(b), out, gy);
    d.be.linear_backward_bf16(up16(dy16), d.up(dy), gx, M, in, gW, out, gdx, true, gdW, gdb);
    EXPECT_TRUE(test::all_close(d.down(gy, y.size()).data(), y.data(), y.size(), 1e-5f, 1e-4f, "linear in bf16: y"));
    EXPECT_TRUE(test::all_close(d.down(gdx, dx.size()).data(), dx.data(), dx.size(), 1e-5f, 1e-4f, "dx"));
    EXPECT_TRUE(test::all_close(d.down(gdW, dW.size()).data(), dW.data(), dW.size(), 1e-5f, 1e-4f, "dW"));
    EXPECT_TRUE(test::all_close(d.down(gdb, out).data(), db.data(), out, 1e-5f, 1e-4f, "db from the float dy"));
    // The forward with a residual, y = r + x W^T + b in one op, and without: through
    // cuBLASLt, the bias in the product, and (GMLP_CUDA_LT=off) seeded, then multiplied.
    const Vec r = randn(y.size(), 19);
    Vec yr = y;
    for (size_t i = 0; i < yr.size(); ++i) yr[i] += r[i];
    Fp32Again restore;
    for (const char* how : {"on", "off"}) {
      ScopedEnv lt("GMLP_CUDA_LT", how);
      use_precision(Device::cuda, Precision::bf16);
      const std::string name = std::string(" (GMLP_CUDA_LT=") + how + ")";
      float *gr = d.up(r), *gyr = d.up(Vec(y.size())), *gy2 = d.up(Vec(y.size()));
      d.be.linear_residual_bf16(gx, M, in, gW, d.up(b), out, gr, gyr);
      d.be.linear_forward_bf16(gx, M, in, gW, d.up(b), out, gy2);
      EXPECT_TRUE(test::all_close(d.down(gyr, y.size()).data(), yr.data(), y.size(), 1e-5f, 1e-4f,
                                  "linear with a residual" + name));
      EXPECT_TRUE(test::all_close(d.down(gy2, y.size()).data(), y.data(), y.size(), 1e-5f, 1e-4f, "linear" + name));
      EXPECT_EQ(d.down(gr, r.size()), r) << "the residual read, not written" << name;
    }
  }
  // The rounding op, past a power of two, at ties and subnormals, with infinities and NaN.
  Vec x = randn(1000, 9, 3.f);
  x[0] = INFINITY;
  x[1] = -INFINITY;
  x[2] = NAN;
  x[3] = std::numeric_limits<float>::max();  // rounds up to infinity
  x[4] = 1.00390625f;                         // 1 + 2^-8: a tie, to the even 1
  x[5] = -1.01171875f;                        // -(1 + 3 2^-8): a tie, to the even -(1 + 2^-6)
  x[6] = 3e-39f;                              // subnormal, and kept so in bf16
  x[7] = -std::numeric_limits<float>::denorm_min();  // to -0
  float* dx = d.up(x);
  uint16_t* dx16 = up16(U16(x.size()));
  d.be.to_bf16(dx, x.size(), dx16);
  {  // a NaN stays a NaN: which one is the instruction's (ops/bf16.h), not the CPU's
    U16 got = down16(dx16, x.size()), want = bf16_of(x);
    EXPECT_TRUE(std::isnan(ops::from_bf16(got[2]))) << "NaN rounded to " << got[2];
    got[2] = want[2];
    EXPECT_EQ(got, want);
  }
  {  // many roundings in one pass: 70 copies (two launches of cuda::kBf16Copies), of
     // 0 to 400 values from anywhere in x (its specials among them), each to its own
     // slot of y with a gap after it that no copy writes
    const int count = 70;
    std::vector<ops::Bf16Copy> copies;
    U16 y0(size_t(count) * 410, 0xabcd), want = y0;
    const U16 xb = bf16_of(x);
    uint16_t* dy = up16(y0);
    for (int k = 0; k < count; ++k) {
      // copy 1 from x[0], over the specials; copy 3 empty
      const size_t n = k == 3 ? 0 : k == 1 ? 300 : size_t(k * 37 % 401), from = k == 1 ? 0 : size_t(k * 13 % 600),
                   at = size_t(k) * 410;
      copies.push_back({dx + from, n, dy + at});
      std::copy(xb.begin() + long(from), xb.begin() + long(from + n), want.begin() + long(at));
    }
    d.be.to_bf16_many(copies.data(), count);
    U16 got = down16(dy, y0.size());
    for (size_t i = 0; i < got.size(); ++i)  // x[2], a NaN, rounds to the instruction's NaN (above)
      if (std::isnan(ops::from_bf16(want[i]))) {
        EXPECT_TRUE(std::isnan(ops::from_bf16(got[i]))) << i;
        got[i] = want[i];
      }
    EXPECT_EQ(got, want);
  }
  {  // and summing columns as it rounds: rows in three chunks, columns in two tiles
    const int M = 700, N = 45;
    const Vec v = randn(size_t(M) * N, 17, 3.f), sums0 = randn(N, 18);
    Vec sums = sums0;
    for (int r = 0; r < M; ++r)
      for (int c = 0; c < N; ++c) sums[size_t(c)] += v[size_t(r) * N + c];
    uint16_t* v16 = up16(U16(v.size()));
    float* gs = d.up(sums0);
    d.be.to_bf16_summing_columns(d.up(v), M, N, v16, gs, nullptr, 1);
    EXPECT_EQ(down16(v16, v.size()), bf16_of(v));
    EXPECT_TRUE(test::all_close(d.down(gs, N).data(), sums.data(), N, 1e-4f, 1e-4f, "column sums of the floats"));
    // Row r scaled by keep[r % B] as it is read (stochastic depth's dY), as the CPU's
    // scale_rows scales it, in the bits and the sums.
    const int B = 7;
    const Vec keep = {0.f, 1.25f, 1.25f, 0.f, 1.25f, 3.f, 1.25f};
    Vec scaled(v.size()), ssums = sums0;
    cpu_backend().scale_rows(keep.data(), v.data(), M, B, N, scaled.data());
    for (int r = 0; r < M; ++r)
      for (int c = 0; c < N; ++c) ssums[size_t(c)] += scaled[size_t(r) * N + c];
    float* gk = d.up(sums0);
    d.be.to_bf16_summing_columns(d.up(v), M, N, v16, gk, d.up(keep), B);
    EXPECT_EQ(down16(v16, v.size()), bf16_of(scaled));
    EXPECT_TRUE(test::all_close(d.down(gk, N).data(), ssums.data(), N, 1e-4f, 1e-4f, "column sums, rows scaled"));
  }
  // The LayerNorm writing bf16, rows ld apart, with and without the floats.
  const int M = 45, C = 300, ld = 310;
  const Vec xs = randn(size_t(M) * ld, 4, 2.f), w = randn(C, 5), b = randn(C, 6);
  Vec y(size_t(M) * ld), mean(M), rstd(M);
  cpu_backend().layernorm_forward(xs.data(), ld, M, C, w.data(), b.data(), 1e-5f, y.data(), ld, mean.data(),
                                  rstd.data());
  float *dX = d.up(xs), *dW = d.up(w), *dB = d.up(b), *dM = d.up(Vec(M)), *dR = d.up(Vec(M));
  for (const bool floats : {true, false}) {
    float* dY = d.up(Vec(y.size()));
    uint16_t *f16 = up16(U16(y.size())), *a16 = up16(U16(y.size()));
    d.be.layernorm_forward_bf16(dX, ld, M, C, dW, dB, 1e-5f, floats ? dY : nullptr, f16, ld, dM, dR);
    d.be.layernorm_apply_bf16(dX, ld, M, C, dW, dB, dM, dR, nullptr, a16, ld);
    EXPECT_TRUE(test::all_close(d.down(dR, M).data(), rstd.data(), M, kAtol, kRtol, "rstd"));
    for (const auto* out : {f16, a16}) {
      const Vec got = widen(down16(out, y.size()));
      for (int r = 0; r < M; ++r)
        EXPECT_TRUE(test::all_close(got.data() + size_t(r) * ld, y.data() + size_t(r) * ld, C, 1e-5f, 1.f / 128,
                                    "layernorm in bf16, row " + std::to_string(r)));
    }
    if (floats) {
      const Vec yf = d.down(dY, y.size());
      for (int r = 0; r < M; ++r)
        EXPECT_TRUE(test::all_close(yf.data() + size_t(r) * ld, y.data() + size_t(r) * ld, C, kAtol, kRtol,
                                    "layernorm's floats beside its bf16, row " + std::to_string(r)));
    }
  }
}

void layernorm_against_the_cpu(int M, int C, int ld) {
  const Vec x = randn(size_t(M) * ld, 4, 2.f), w = randn(C, 5), b = randn(C, 6), dy = randn(size_t(M) * C, 7);
  Vec y(size_t(M) * C), mean(M), rstd(M), dx(size_t(M) * ld, 0.5f), dw(C, 0.1f), db(C, 0.2f), ya(y.size());
  Backend& cb = cpu_backend();
  cb.layernorm_forward(x.data(), ld, M, C, w.data(), b.data(), 1e-5f, y.data(), C, mean.data(), rstd.data());
  cb.layernorm_apply(x.data(), ld, M, C, w.data(), b.data(), mean.data(), rstd.data(), ya.data(), C);
  cb.layernorm_backward(dy.data(), C, x.data(), ld, mean.data(), rstd.data(), w.data(), M, C, dx.data(), ld, true,
                        dw.data(), db.data());
  OnDevice d;
  float *dX = d.up(x), *dW = d.up(w), *dB = d.up(b), *dY = d.up(Vec(y.size())), *dYa = d.up(Vec(y.size()));
  float *dM = d.up(Vec(M)), *dR = d.up(Vec(M)), *dDx = d.up(Vec(dx.size(), 0.5f)), *dDw = d.up(Vec(C, 0.1f)),
        *dDb = d.up(Vec(C, 0.2f));
  d.be.layernorm_forward(dX, ld, M, C, dW, dB, 1e-5f, dY, C, dM, dR);
  d.be.layernorm_apply(dX, ld, M, C, dW, dB, dM, dR, dYa, C);
  d.be.layernorm_backward(d.up(dy), C, dX, ld, dM, dR, dW, M, C, dDx, ld, true, dDw, dDb);
  EXPECT_TRUE(test::all_close(d.down(dY, y.size()).data(), y.data(), y.size(), kAtol, kRtol, "y"));
  EXPECT_TRUE(test::all_close(d.down(dYa, y.size()).data(), ya.data(), y.size(), kAtol, kRtol, "apply"));
  EXPECT_TRUE(test::all_close(d.down(dDx, dx.size()).data(), dx.data(), dx.size(), kAtol, 1e-4f, "dx"));
  EXPECT_TRUE(test::all_close(d.down(dDw, C).data(), dw.data(), C, 1e-4f, 1e-4f, "dw"));
  EXPECT_TRUE(test::all_close(d.down(dDb, C).data(), db.data(), C, 1e-4f, 1e-4f, "db"));
}

// Every way the kernels take a row: a warp per row (on a GPU up to 768 channels, a
// lane's share 8, 16 or 24 of them: 2 to 12, 300, 700; on the emulator up to 16, each
// share at narrower rows: 2 and 4, 7 and 10, 12 and the models' 16), a block per row
// held in registers (on a GPU up to 2,048, a thread's share 4, 6 or 8: 1000, 1500, 1800;
// on the emulator up to 32: 18, 24, 30) and a block per row looping over its channels
// (2100; on the emulator from 300 on); the backward's chunks of rows six, the last
// partial (the emulator's block shares 3 to 8: 17, 18, 24, 30). Then the GPU's widths on
// the emulator too (GMLP_CUDA_EMU_ROWS), with the rows that fill a share's slots, which
// take the full-row kernels: 256, 512 and 768 a warp's 8, 16 and 24 a lane, 1,024, 1,536
// and 2,048 a block's 4, 6 and 8 a thread; and with a block per row throughout (as
// GMLP_CUDA_LN_WARP_COLUMNS=0 has it on a GPU), 768 a block's 3 a thread.
TEST(CudaOps, LayerNormForwardApplyBackwardWithStrides) {
  REQUIRE_GPU();
  for (const int C : {2, 4, 7, 10, 12, 17, 18, 24, 30, 300, 700, 1000, 1500, 1800, 2100}) {
    SCOPED_TRACE("C " + std::to_string(C));
    layernorm_against_the_cpu(45, C, C + 10);
  }
  for (const char* rows : {"gpu", "gpu-blocks"}) {
    ScopedEnv e("GMLP_CUDA_EMU_ROWS", rows);
    for (const int C : {12, 256, 300, 512, 700, 768, 1000, 1024, 1500, 1536, 1800, 2048, 2100}) {
      SCOPED_TRACE(std::string("the GPU's widths (") + rows + "), C " + std::to_string(C));
      layernorm_against_the_cpu(45, C, C + 10);
    }
  }
}

// The projections: bias-seeded forward; backward's dx (overwritten or added to), dW
// and db, db a column sum over rows in chunks (three here, the last partial) and columns
// in tiles of 32 (two, the second partial).
TEST(CudaOps, LinearForwardAndBackwardWithTheBiasSummedOverChunksOfRows) {
  REQUIRE_GPU();
  const int M = 700, in = 37, out = 45;
  const Vec x = randn(size_t(M) * in, 80), W = randn(size_t(out) * in, 81, 0.3f), b = randn(out, 82),
            dy = randn(size_t(M) * out, 83), dx0 = randn(x.size(), 84), dW0 = randn(W.size(), 85),
            db0 = randn(out, 86);
  OnDevice dv;
  const float *dX = dv.up(x), *dWt = dv.up(W), *dDy = dv.up(dy);
  Vec y(size_t(M) * out);
  cpu_backend().linear_forward(x.data(), M, in, W.data(), b.data(), out, y.data());
  float* dY = dv.up(Vec(y.size()));
  dv.be.linear_forward(dX, M, in, dWt, dv.up(b), out, dY);
  EXPECT_TRUE(test::all_close(dv.down(dY, y.size()).data(), y.data(), y.size(), kAtol, kRtol, "y"));
  for (bool acc : {false, true}) {
    Vec dx = dx0, dW = dW0, db = db0;
    cpu_backend().linear_backward(dy.data(), x.data(), M, in, W.data(), out, dx.data(), acc, dW.data(), db.data());
    float *dDx = dv.up(dx0), *dDw = dv.up(dW0), *dDb = dv.up(db0);
    dv.be.linear_backward(dDy, dX, M, in, dWt, out, dDx, acc, dDw, dDb);
    EXPECT_TRUE(test::all_close(dv.down(dDx, dx.size()).data(), dx.data(), dx.size(), kAtol, 1e-4f, "dx"));
    EXPECT_TRUE(test::all_close(dv.down(dDw, dW.size()).data(), dW.data(), dW.size(), 1e-4f, 1e-4f, "dW"));
    EXPECT_TRUE(test::all_close(dv.down(dDb, db.size()).data(), db.data(), db.size(), 1e-4f, 1e-4f, "db"));
  }
}

// Images cut into patch rows (t * B + b, the rows time-major): floats, a copy, the CPU's
// to the bit; and, as a bf16 training arena holds them for the patch embedding's
// products (model.cpp), each value rounded to nearest even. Bytes, each through its
// channel's row of the table (the model's normalisation), likewise, and the same as the
// floats the table makes of them cut as floats.
TEST(CudaOps, PatchesCutIntoFloatsAndIntoBf16AreTheCpusPatches) {
  REQUIRE_GPU();
  const int B = 3, C = 2, H = 8, W = 12, ph = 4, pw = 3, M = B * (H / ph) * (W / pw), P = C * ph * pw;
  const Vec images = randn(size_t(B) * C * H * W, 87);
  std::vector<uint8_t> bytes(images.size());
  Vec table(size_t(C) * 256), as_floats(images.size());
  // Values that bf16 must round (a normalisation's are), each channel's row its own.
  for (size_t i = 0; i < table.size(); ++i) table[i] = float(i % 256) * 0.01237f - float(i / 256) * 0.771f - 1.3f;
  for (size_t i = 0; i < bytes.size(); ++i) {
    bytes[i] = uint8_t((i * 37 + i / 7) % 256);
    as_floats[i] = table[i / size_t(H * W) % C * 256 + bytes[i]];
  }
  OnDevice dv;
  const float* dT = dv.up(table);
  DeviceBuffer<uint8_t> dB(dv.be, bytes.size());
  dv.be.upload(dB.data(), bytes.data(), bytes.size());
  for (const bool from_bytes : {false, true}) {
    SCOPED_TRACE(from_bytes ? "from bytes" : "from floats");
    const Vec& want_in = from_bytes ? as_floats : images;
    Vec cpu(size_t(M) * P);
    cpu_backend().extract_patches(
        from_bytes ? ops::Pixels::of_bytes(bytes.data(), table.data()) : ops::Pixels::floats(images.data()), B, C, H, W,
        ph, pw, cpu.data());
    if (from_bytes) {  // the CPU's cut of bytes is its cut of the floats they stand for
      Vec of_floats(cpu.size());
      ops::extract_patches(ops::Pixels::floats(want_in.data()), B, C, H, W, ph, pw, of_floats.data());
      ASSERT_EQ(std::memcmp(of_floats.data(), cpu.data(), sizeof(float) * cpu.size()), 0) << "CPU bytes";
    }
    const ops::Pixels dI = from_bytes ? ops::Pixels::of_bytes(dB.data(), dT) : ops::Pixels::floats(dv.up(images));
    float* dP = dv.up(Vec(cpu.size(), -1.f));
    dv.be.extract_patches(dI, B, C, H, W, ph, pw, dP);
    const Vec gpu = dv.down(dP, cpu.size());
    EXPECT_EQ(std::memcmp(gpu.data(), cpu.data(), sizeof(float) * cpu.size()), 0) << "float patches";
    DeviceBuffer<uint16_t> p16(dv.be, cpu.size());
    dv.be.extract_patches_bf16(dI, B, C, H, W, ph, pw, p16.data());
    std::vector<uint16_t> got(cpu.size());
    dv.be.download(got.data(), p16.data(), got.size() * sizeof(uint16_t));
    for (size_t i = 0; i < cpu.size(); ++i)
      ASSERT_EQ(got[i], ops::bf16_bits(cpu[i])) << "bf16 patch value " << i << " (row " << i / P << ")";
  }
}

// Stochastic depth's residual formed as the next block's LayerNorm reads its rows
// (block.h's BlockCall::x_before): the residual's pass, then the LayerNorm over what it
// wrote, to the bit. The widths take every kernel: on a GPU a warp a row up to 768
// channels (768 filling its lanes), a block a row up to 2,048, looped above; on the
// emulator a warp up to 16, a block up to 32, looped above. Keep 0 drops a row's branch.
TEST(CudaOps, AResidualTakenAsTheLayerNormReadsItIsTheResidualThenTheLayerNorm) {
  REQUIRE_GPU();
  const int B = 3, T = 5, M = B * T;
  const Vec keep = {0.f, 2.f, 1.25f};
  for (const int d : {16, 24, 40, 768, 1100, 2100}) {
    SCOPED_TRACE("d " + std::to_string(d));
    const Vec x = randn(size_t(M) * d, 88), h = randn(size_t(M) * d, 89), w = randn(d, 90), b = randn(d, 91);
    OnDevice dv;
    const float *dx = dv.up(x), *dh = dv.up(h), *dk = dv.up(keep), *dw = dv.up(w), *db = dv.up(b);
    float *out1 = dv.up(Vec(x.size(), -1.f)), *out2 = dv.up(Vec(x.size(), -2.f));
    float *mean1 = dv.up(Vec(M)), *rstd1 = dv.up(Vec(M)), *mean2 = dv.up(Vec(M)), *rstd2 = dv.up(Vec(M));
    DeviceBuffer<uint16_t> y1(dv.be, x.size()), y2(dv.be, x.size());
    dv.be.residual_keep(dx, dk, dh, M, B, d, out1);
    dv.be.layernorm_forward_bf16(out1, d, M, d, dw, db, 1e-5f, nullptr, y1.data(), d, mean1, rstd1);
    dv.be.residual_keep_layernorm_bf16(dx, dk, dh, M, B, d, out2, dw, db, 1e-5f, y2.data(), mean2, rstd2);
    const Vec o1 = dv.down(out1, x.size()), o2 = dv.down(out2, x.size());
    EXPECT_EQ(std::memcmp(o1.data(), o2.data(), sizeof(float) * o1.size()), 0) << "the residual";
    Vec cpu(x.size());
    cpu_backend().residual_keep(x.data(), keep.data(), h.data(), M, B, d, cpu.data());
    EXPECT_TRUE(test::all_close(o2.data(), cpu.data(), cpu.size(), kAtol, kRtol, "the residual against the CPU's"));
    for (const auto& [a, c, what] : {std::tuple{mean1, mean2, "mean"}, std::tuple{rstd1, rstd2, "rstd"}}) {
      const Vec va = dv.down(a, M), vc = dv.down(c, M);
      EXPECT_EQ(std::memcmp(va.data(), vc.data(), sizeof(float) * M), 0) << what;
    }
    std::vector<uint16_t> a16(x.size()), b16(x.size());
    dv.be.download(a16.data(), y1.data(), a16.size() * sizeof(uint16_t));
    dv.be.download(b16.data(), y2.data(), b16.size() * sizeof(uint16_t));
    EXPECT_EQ(a16, b16) << "the LayerNorm's bf16 output";
  }
}

// Column sums finished in their own launch (common.cuh's column_sums_finished): each
// column tile's last block to arrive adds every block's partials. On a GPU the blocks
// run at once, and a finishing block that read a partial before its writer's fence
// would give another sum now and then. Many chunks and tiles (on a GPU 128 chunks of
// 256 rows and 32 column tiles; fewer on the emulator, which runs a block at a time),
// ten times: the CPU's sums within float rounding, and the same bits every time.
TEST(CudaOps, ColumnSumsFinishedByTheirLastBlocksAreTheSameEveryTime) {
  REQUIRE_GPU();
  const bool emulated = std::getenv("GMLP_CUDA_EMULATOR") != nullptr;
  const int M = emulated ? 3000 : 32768, N = 1000;
  const Vec x = randn(size_t(M) * N, 90);
  std::vector<double> want(N, 0.0), mass(N, 0.0);
  for (int r = 0; r < M; ++r)
    for (int c = 0; c < N; ++c) {
      want[size_t(c)] += x[size_t(r) * N + c];
      mass[size_t(c)] += std::fabs(x[size_t(r) * N + c]);
    }
  OnDevice d;
  const float* dx = d.up(x);
  DeviceBuffer<uint16_t> y(d.be, x.size());
  Vec first;
  for (int round = 0; round < (emulated ? 2 : 10); ++round) {
    float* sums = d.up(Vec(N, 0.f));
    d.be.to_bf16_summing_columns(dx, M, N, y.data(), sums, nullptr, 1);
    const Vec got = d.down(sums, N);
    if (round == 0) {
      first = got;
      for (int c = 0; c < N; ++c)
        ASSERT_NEAR(got[size_t(c)], want[size_t(c)], 2e-5 * mass[size_t(c)]) << "column " << c;
    } else {
      ASSERT_EQ(0, std::memcmp(got.data(), first.data(), sizeof(float) * N)) << "round " << round;
    }
  }
}

TEST(CudaOps, GeluBothFormsForwardAndBackward) {
  REQUIRE_GPU();
  for (bool t : {false, true}) {
    const int M = 33, n = 70;
    const Vec u0 = randn(size_t(M) * n, 8, 3.f), b = randn(n, 9), dy = randn(u0.size(), 10);
    Vec u = u0, y(u0.size()), dx(u0.size());
    cpu_backend().bias_gelu_forward(u.data(), b.data(), M, n, y.data(), t);
    cpu_backend().gelu_backward(u.data(), dy.data(), dx.data(), int64_t(u.size()), t);
    OnDevice d;
    float *dU = d.up(u0), *dYy = d.up(Vec(u0.size())), *dDx = d.up(Vec(u0.size()));
    d.be.bias_gelu_forward(dU, d.up(b), M, n, dYy, t);
    d.be.gelu_backward(dU, d.up(dy), dDx, int64_t(u.size()), t);
    EXPECT_TRUE(test::all_close(d.down(dU, u.size()).data(), u.data(), u.size(), kAtol, kRtol, "u + b"));
    EXPECT_TRUE(test::all_close(d.down(dYy, y.size()).data(), y.data(), y.size(), 1e-6f, 1e-5f, "gelu"));
    EXPECT_TRUE(test::all_close(d.down(dDx, dx.size()).data(), dx.data(), dx.size(), 1e-6f, 1e-5f, "gelu'"));
  }
}

// The cached decoder's ops: three streams at positions 0, the last and one between,
// stepped in an order other than their index.
TEST(CudaOps, DecodeOpsOverStreamsAtTheirPositions) {
  REQUIRE_GPU();
  const int S = 3, n = 40, d = 24, V = 50, R = 3, heads = 2, g = 32, da = 8;
  const Ids stream = {2, 0, 1}, pos = {0, n - 1, 17}, tokens = {4, 49, 0};
  Ids rows(R);
  for (int r = 0; r < R; ++r) rows[size_t(r)] = stream[size_t(r)] * n + pos[size_t(r)];
  Backend& cb = cpu_backend();
  OnDevice dv;
  const int32_t *dS = dv.up(stream), *dP = dv.up(pos), *dRows = dv.up(rows);
  {  // embedding with positions
    const Vec E = randn(size_t(V) * d, 40), pe = randn(size_t(n) * d, 41);
    Vec x(size_t(R) * d);
    cb.decode_embed(E.data(), d, tokens.data(), pos.data(), R, pe.data(), x.data());
    float* dx = dv.up(Vec(x.size()));
    dv.be.decode_embed(dv.up(E), d, dv.up(tokens), dP, R, dv.up(pe), dx);
    EXPECT_TRUE(test::all_close(dv.down(dx, x.size()).data(), x.data(), x.size(), 0.f, 0.f, "decode_embed"));
  }
  for (bool acc : {false, true}) {  // the channel products
    const int out = 20;
    const Vec W = randn(size_t(out) * d, 42), X = randn(size_t(R) * d, 43), b = randn(out, 44),
              Y0 = randn(size_t(R) * out, 45);
    Vec Y = Y0;
    cb.decode_linear(W.data(), out, d, X.data(), R, b.data(), Y.data(), acc);
    float* dY = dv.up(Y0);
    dv.be.decode_linear(dv.up(W), out, d, dv.up(X), R, dv.up(b), dY, acc);
    EXPECT_TRUE(test::all_close(dv.down(dY, Y.size()).data(), Y.data(), Y.size(), kAtol, 1e-4f, "decode_linear"));
  }
  {  // LayerNorm into the cache rows
    const int ldx = 30;
    const Vec x = randn(size_t(R) * ldx, 46, 2.f), w = randn(d, 47), b = randn(d, 48), y0 = randn(size_t(S) * n * d, 49);
    Vec y = y0;
    cb.decode_layernorm(x.data(), ldx, R, d, w.data(), b.data(), 1e-5f, y.data(), d, rows.data());
    float* dy = dv.up(y0);
    dv.be.decode_layernorm(dv.up(x), ldx, R, d, dv.up(w), dv.up(b), 1e-5f, dy, d, dRows);
    EXPECT_TRUE(test::all_close(dv.down(dy, y.size()).data(), y.data(), y.size(), kAtol, kRtol, "decode_layernorm"));
  }
  for (bool toeplitz : {false, true}) {  // the spatial mix over the cached gates
    const int64_t wsz = toeplitz ? n : int64_t(n) * n;
    const Vec G = randn(size_t(S) * n * g, 50), W = randn(size_t(heads * wsz), 51, 0.3f), bias = randn(size_t(heads) * n, 52);
    Vec F(size_t(R) * g);
    cb.decode_mix(G.data(), n, g, heads, W.data(), wsz, toeplitz, bias.data(), stream.data(), pos.data(), R, F.data());
    float* dF = dv.up(Vec(F.size()));
    dv.be.decode_mix(dv.up(G), n, g, heads, dv.up(W), wsz, toeplitz, dv.up(bias), dS, dP, R, dF);
    EXPECT_TRUE(test::all_close(dv.down(dF, F.size()).data(), F.data(), F.size(), 1e-4f, 1e-4f,
                                toeplitz ? "decode_mix (Toeplitz)" : "decode_mix"));
  }
  {  // aMLP's attention over the cached keys
    const Vec qkvw = randn(size_t(3 * da) * d, 53, 0.3f), qkvb = randn(3 * da, 54), ow = randn(size_t(g) * da, 55),
              ob = randn(g, 56), h = randn(size_t(R) * d, 57), cache0 = randn(size_t(S) * n * 3 * da, 58),
              F0 = randn(size_t(R) * g, 59);
    Vec cache = cache0, F = F0, P(size_t(R) * n), O(size_t(R) * da), A(size_t(R) * g);
    ops::AttnParams p{qkvw.data(), qkvb.data(), ow.data(), ob.data(), d, da, g, true, nullptr};
    cb.decode_attention(p, h.data(), stream.data(), pos.data(), R, n, cache.data(), P.data(), O.data(), A.data(),
                        F.data());
    ops::AttnParams dp{dv.up(qkvw), dv.up(qkvb), dv.up(ow), dv.up(ob), d, da, g, true, nullptr};
    float *dCache = dv.up(cache0), *dF = dv.up(F0);
    dv.be.decode_attention(dp, dv.up(h), dS, dP, R, n, dCache, dv.up(Vec(P.size())), dv.up(Vec(O.size())),
                           dv.up(Vec(A.size())), dF);
    EXPECT_TRUE(test::all_close(dv.down(dCache, cache.size()).data(), cache.data(), cache.size(), kAtol, 1e-4f,
                                "decode_attention cache"));
    EXPECT_TRUE(test::all_close(dv.down(dF, F.size()).data(), F.data(), F.size(), 1e-4f, 1e-4f, "decode_attention"));
  }
}

// aMLP's attention over more batch rows than a grid's y holds (65,535 blocks): past
// that, each block of the softmax and its backward takes every gridDim.y-th batch row.
// Forward and backward against the CPU, padded rows before the grid's last y and past
// it (the causal rows take the same loop). Without the loop the launch fails ("invalid
// configuration argument"). 131,074 blocks a kernel: some 20 s on the emulator.
TEST(CudaOps, TinyAttentionOverMoreBatchRowsThanAGridColumnHolds) {
  REQUIRE_GPU();
  const int T = 2, B = 65537, M = T * B, d = 4, da = 2, dout = 3;
  const Vec qkvw = randn(size_t(3 * da) * d, 70, 0.5f), qkvb = randn(3 * da, 71), ow = randn(size_t(dout) * da, 72),
            ob = randn(dout, 73), H = randn(size_t(M) * d, 74), dA = randn(size_t(M) * dout, 75);
  Ids lengths(size_t(B), T);
  lengths[5] = lengths[B - 1] = 1;  // one before the grid's last y, one past it
  Backend& cb = cpu_backend();
  const ops::AttnParams p{qkvw.data(), qkvb.data(), ow.data(), ob.data(), d, da, dout, false, lengths.data()};
  Vec qkv(size_t(M) * 3 * da), P(size_t(B) * T * T), O(size_t(M) * da), A(size_t(M) * dout);
  cb.tiny_attention_forward(p, H.data(), T, B, qkv.data(), P.data(), O.data(), A.data());
  Vec dH(size_t(M) * d), gq(qkvw.size()), gqb(qkvb.size()), go(ow.size()), gob(ob.size()), dO(size_t(M) * da),
      dP(size_t(T) * T), dqkv(qkv.size());
  cb.tiny_attention_backward(p, {gq.data(), gqb.data(), go.data(), gob.data()}, dA.data(), H.data(), T, B, qkv.data(),
                             P.data(), O.data(), dH.data(), dO.data(), dP.data(), dqkv.data());

  OnDevice dv;
  const ops::AttnParams q{dv.up(qkvw), dv.up(qkvb), dv.up(ow), dv.up(ob), d, da, dout, false, dv.up(lengths)};
  const float* dHin = dv.up(H);
  float *dQkv = dv.up(Vec(qkv.size())), *dP_ = dv.up(Vec(P.size())), *dO_ = dv.up(Vec(O.size())),
        *dA_ = dv.up(Vec(A.size())), *dH_ = dv.up(Vec(dH.size()));
  dv.be.tiny_attention_forward(q, dHin, T, B, dQkv, dP_, dO_, dA_);
  EXPECT_TRUE(test::all_close(dv.down(dP_, P.size()).data(), P.data(), P.size(), kAtol, 1e-4f, "P"));
  EXPECT_TRUE(test::all_close(dv.down(dA_, A.size()).data(), A.data(), A.size(), kAtol, 1e-4f, "A"));
  float *dGq = dv.up(Vec(gq.size())), *dGqb = dv.up(Vec(gqb.size())), *dGo = dv.up(Vec(go.size())),
        *dGob = dv.up(Vec(gob.size()));
  dv.be.tiny_attention_backward(q, {dGq, dGqb, dGo, dGob}, dv.up(dA), dHin, T, B, dQkv, dP_, dO_, dH_,
                                dv.up(Vec(dO.size())), dv.up(Vec(P.size())), dv.up(Vec(qkv.size())));
  EXPECT_TRUE(test::all_close(dv.down(dH_, dH.size()).data(), dH.data(), dH.size(), kAtol, 1e-4f, "dH"));
  // The weights' gradients sum 131,074 rows, in another order than the CPU's.
  EXPECT_TRUE(test::all_close(dv.down(dGq, gq.size()).data(), gq.data(), gq.size(), 1e-3f, 1e-4f, "dW_qkv"));
  // K's bias shifts each score row alike, which the softmax cancels: its gradient is 0
  // but for rounding, summed over those rows (the CPU's came to 1.6e-3, the device's 1e-5).
  const Vec gqb_dev = dv.down(dGqb, gqb.size());
  for (int i = 0; i < 3 * da; ++i)
    if (i >= da && i < 2 * da)
      EXPECT_LT(std::abs(gqb_dev[i]) + std::abs(gqb[i]), 1e-2f) << "K's bias " << i;
    else
      EXPECT_NEAR(gqb_dev[i], gqb[i], 1e-3f + 1e-4f * std::abs(gqb[i])) << "db_qkv " << i;
  EXPECT_TRUE(test::all_close(dv.down(dGo, go.size()).data(), go.data(), go.size(), 1e-3f, 1e-4f, "dW_out"));
  EXPECT_TRUE(test::all_close(dv.down(dGob, gob.size()).data(), gob.data(), gob.size(), 1e-3f, 1e-4f, "db_out"));
}

TEST(CudaOps, DropoutWithAndWithoutStochasticDepth) {
  REQUIRE_GPU();
  const int T = 7, B = 3, M = T * B, d = 40;
  const Vec x = randn(size_t(M) * d, 60), h = randn(size_t(M) * d, 61), keep = {2.f, 0.f, 1.f};
  Backend& cb = cpu_backend();
  OnDevice dv;
  const float *dX = dv.up(x), *dH = dv.up(h), *dKeep = dv.up(keep);
  // The masks come from their counters on both sides: the same drops, a row offset
  // (a rank's rows) included; and no mask at all.
  for (const ops::DropMask& mask : {ops::drop_mask(0x5eed, 1, 0.3f, 5), ops::DropMask{}})
    for (bool with_keep : {false, true}) {
      Vec out(x.size()), dh(x.size());
      cb.residual_dropout(x.data(), h.data(), with_keep ? keep.data() : nullptr, mask, M, B, d, out.data());
      cb.residual_dropout_backward(x.data(), with_keep ? keep.data() : nullptr, mask, M, B, d, dh.data());
      float *dOut = dv.up(Vec(x.size())), *dDh = dv.up(Vec(x.size()));
      dv.be.residual_dropout(dX, dH, with_keep ? dKeep : nullptr, mask, M, B, d, dOut);
      dv.be.residual_dropout_backward(dX, with_keep ? dKeep : nullptr, mask, M, B, d, dDh);
      EXPECT_TRUE(test::all_close(dv.down(dOut, out.size()).data(), out.data(), out.size(), 1e-6f, 1e-6f, "residual"));
      EXPECT_TRUE(test::all_close(dv.down(dDh, dh.size()).data(), dh.data(), dh.size(), 1e-6f, 1e-6f, "backward"));
    }
  {  // stochastic depth alone: row r's factor keep[r % B], B = 5 so that the kernels'
     // rows (a thread's every 12th on the emulator) take keep's index past B and back
    const int T5 = 13, B5 = 5, M5 = T5 * B5;
    const Vec x5 = randn(size_t(M5) * d, 62), h5 = randn(size_t(M5) * d, 63), keep5 = {2.f, 0.f, 1.f, 0.5f, 3.f};
    Vec out(x5.size()), scaled(x5.size());
    cb.residual_keep(x5.data(), keep5.data(), h5.data(), M5, B5, d, out.data());
    cb.scale_rows(keep5.data(), h5.data(), M5, B5, d, scaled.data());
    float *dOut = dv.up(Vec(x5.size())), *dScaled = dv.up(Vec(x5.size())), *dK5 = dv.up(keep5), *dH5 = dv.up(h5);
    dv.be.residual_keep(dv.up(x5), dK5, dH5, M5, B5, d, dOut);
    dv.be.scale_rows(dK5, dH5, M5, B5, d, dScaled);
    EXPECT_TRUE(test::all_close(dv.down(dOut, out.size()).data(), out.data(), out.size(), 1e-6f, 1e-6f,
                                "stochastic-depth residual"));
    EXPECT_EQ(dv.down(dScaled, scaled.size()), scaled) << "rows scaled (a product: the same bits)";
  }
  const ops::DropMask head = ops::drop_mask(0x5eed, 2, 0.5f, 0);
  Vec y(x.size());
  cb.dropout_apply(x.data(), head, M, d, y.data());
  float* dY = dv.up(Vec(x.size()));
  dv.be.dropout_apply(dX, head, M, d, dY);
  EXPECT_TRUE(test::all_close(dv.down(dY, y.size()).data(), y.data(), y.size(), 0.f, 0.f, "dropout"));
}

TEST(CudaTrain, ANonFiniteStepChangesNothing) {
  REQUIRE_GPU();
  expect_a_non_finite_step_to_change_nothing(backend_for(Device::cuda));
}

TEST(CudaOps, CrossEntropyWithIgnoredRows) {
  REQUIRE_GPU();
  const int M = 29, V = 1000;
  const Vec logits = randn(size_t(M) * V, 11, 4.f);
  Ids targets(M);
  for (int r = 0; r < M; ++r) targets[size_t(r)] = r % 4 == 1 ? -1 : (r * 37) % V;
  Vec dl(logits.size());
  double loss = 0;
  cpu_backend().cross_entropy(logits.data(), M, V, targets.data(), dl.data(), &loss, 0, false, {});
  OnDevice d;
  float* dDl = d.up(Vec(dl.size()));
  double* dLoss = d.up(std::vector<double>{-1.0});
  const float* dLogits = d.up(logits);
  const int32_t* dTargets = d.up(targets);
  d.be.cross_entropy(dLogits, M, V, dTargets, dDl, dLoss, 0, false, {});
  const double device_loss = d.down(dLoss);
  EXPECT_NEAR(device_loss, loss, 1e-5 * loss);
  EXPECT_TRUE(test::all_close(d.down(dDl, dl.size()).data(), dl.data(), dl.size(), 1e-7f, 1e-4f, "dlogits"));
  // In two pieces (gradient accumulation), each a mean over the whole's 22 targets, the
  // second added: the whole's loss, and every row's gradient as in the whole, to the bit.
  const int first = 12, whole = M - M / 4;  // rows 12..28 hold 13 of the targets
  float* dPieces = d.up(Vec(dl.size()));
  d.be.cross_entropy(dLogits, first, V, dTargets, dPieces, dLoss, whole, false, {});
  d.be.cross_entropy(dLogits + size_t(first) * V, M - first, V, dTargets + first, dPieces + size_t(first) * V, dLoss,
                     whole, true, {});
  EXPECT_NEAR(d.down(dLoss), device_loss, 1e-12 * loss);
  const Vec pieces = d.down(dPieces, dl.size()), all = d.down(dDl, dl.size());
  EXPECT_EQ(std::memcmp(pieces.data(), all.data(), sizeof(float) * all.size()), 0);
}

// Targets as distributions (label smoothing, mixed rows' second targets and weights, in
// device memory): the CPU op's loss and gradient, an ignored row still ignored.
TEST(CudaOps, CrossEntropyWithSoftTargets) {
  REQUIRE_GPU();
  const int M = 37, V = 300;
  const Vec logits = randn(size_t(M) * V, 12, 3.f);
  Ids targets(M), second(M);
  Vec weight(M);
  for (int r = 0; r < M; ++r) {
    targets[size_t(r)] = r % 5 == 2 ? -1 : (r * 41) % V;
    second[size_t(r)] = r % 3 == 0 && targets[size_t(r)] >= 0 ? targets[size_t(r)] : (r * 13 + 7) % V;  // some its own
    weight[size_t(r)] = float(r % 7) / 6.f;
  }
  OnDevice d;
  const float* dLogits = d.up(logits);
  const int32_t* dTargets = d.up(targets);
  const int32_t* dSecond = d.up(second);
  const float* dWeight = d.up(weight);
  for (const auto& [mixed, smoothing] : {std::pair{false, 0.1f}, std::pair{true, 0.f}, std::pair{true, 0.1f}}) {
    SCOPED_TRACE(std::string(mixed ? "mixed" : "one class") + ", smoothing " + std::to_string(smoothing));
    ops::SoftTargets cpu, dev;
    cpu.smoothing = dev.smoothing = smoothing;
    if (mixed) {
      cpu.second = second.data();
      cpu.weight = weight.data();
      dev.second = dSecond;
      dev.weight = dWeight;
    }
    Vec dl(logits.size());
    double loss = 0;
    cpu_backend().cross_entropy(logits.data(), M, V, targets.data(), dl.data(), &loss, 0, false, cpu);
    float* dDl = d.up(Vec(dl.size()));
    double* dLoss = d.up(std::vector<double>{-1.0});
    d.be.cross_entropy(dLogits, M, V, dTargets, dDl, dLoss, 0, false, dev);
    EXPECT_NEAR(d.down(dLoss), loss, 1e-5 * loss);
    EXPECT_TRUE(test::all_close(d.down(dDl, dl.size()).data(), dl.data(), dl.size(), 1e-7f, 1e-4f, "dlogits"));
  }
}

// Each row of dE sums its token's rows of dx in row order on the device as on the CPU:
// the CPU's bits, so a run repeats itself. One token a third of the rows (a long sum),
// rows across several of the sort's chunks, tokens absent (their rows untouched), dE
// already holding values (a tied head's gradient), and a second, smaller call after it
// (the sort's scratch reused).
TEST(CudaOps, EmbeddingBackwardSumsEachTokensRowsInRowOrderBitForBit) {
  REQUIRE_GPU();
  OnDevice dv;
  // Chunks of 256 rows (the last partial), one chunk, and on the emulator chunks of 512
  // (12 x 2,500 counts would pass its budget): src/ops/cuda/embedding.cu's chunk_rows.
  for (const auto& [M, d, V] : {std::tuple{4500, 300, 70}, std::tuple{7, 5, 3}, std::tuple{3000, 4, 2500}}) {
    std::mt19937 rng{uint32_t(M)};
    std::uniform_int_distribution<int> other(0, V - V / 7 - 1);
    Ids tokens(static_cast<size_t>(M));
    for (int r = 0; r < M; ++r) tokens[size_t(r)] = r % 3 == 0 ? 1 : other(rng);
    const Vec dx = randn(size_t(M) * d, 70, 1.f), dE0 = randn(size_t(V) * d, 71, 0.5f);
    Vec dE = dE0;
    for (int pass = 0; pass < 2; ++pass) cpu_backend().embedding_backward(dx.data(), d, tokens.data(), M, V, dE.data());
    float* ddE = dv.up(dE0);
    const float* ddx = dv.up(dx);
    const int32_t* dT = dv.up(tokens);
    for (int pass = 0; pass < 2; ++pass) dv.be.embedding_backward(ddx, d, dT, M, V, ddE);
    const Vec got = dv.down(ddE, dE.size());
    size_t differ = 0;
    for (size_t i = 0; i < dE.size(); ++i) differ += std::memcmp(&got[i], &dE[i], sizeof(float)) != 0;
    EXPECT_EQ(differ, 0u) << "of " << dE.size() << " values of dE (M " << M << ", V " << V << ")";
    for (size_t i = size_t(V - V / 7) * d; i < dE.size(); ++i) ASSERT_EQ(got[i], dE0[i]) << "an absent token's row";
  }
}

// AdamW, and global-norm clipping without a read-back: the sum of squares written to
// device memory, the scaling reading it there, and the update skipped unless the step's
// loss and sum of squares (its guard) are finite, everything left as it was.
// The weights' average's step (train.model_ema): the CPU's bits, fmaf(rest, x, avg *
// decay) with the product rounded on its own on both, over steps that compound.
TEST(CudaOps, EmaUpdateIsTheCpus) {
  REQUIRE_GPU();
  const size_t n = 100003;
  const Vec a0 = randn(n, 21), x = randn(n, 22);
  Vec a = a0;
  OnDevice d;
  float *dA = d.up(a0), *dX = d.up(x);
  for (const float decay : {0.9f, 0.99996f, 0.5f}) {
    const float rest = float(1.0 - double(decay));
    cpu_backend().ema_update(a.data(), x.data(), n, decay, rest);
    d.be.ema_update(dA, dX, n, decay, rest);
  }
  EXPECT_EQ(d.down(dA, n), a);
  EXPECT_NE(a, a0);
  for (size_t i = 0; i < n; i += 9973) {  // the recurrence, step by step
    float want = a0[i];
    for (const float decay : {0.9f, 0.99996f, 0.5f}) want = std::fma(float(1.0 - double(decay)), x[i], want * decay);
    EXPECT_EQ(a[i], want) << i;
  }
}

TEST(CudaOps, AdamWClippingAndTheStepGuard) {
  REQUIRE_GPU();
  const size_t n = 100003;
  const Vec p0 = randn(n, 12), g = randn(n, 13), m0 = randn(n, 14, 0.1f), v0 = randn(n, 15, 0.1f);
  Vec p = p0, m = m0, v(n);
  for (size_t i = 0; i < n; ++i) v[i] = std::fabs(v0[i]);
  const Vec vpos = v;
  ops::AdamWStep s{0.9f, 0.95f, 1e-8f, 1e-3f, 0.3f, 0.999f};
  cpu_backend().adamw_update(p.data(), g.data(), m.data(), v.data(), n, s);
  OnDevice d;
  float *dP = d.up(p0), *dG = d.up(g), *dM = d.up(m0), *dV = d.up(vpos);
  s.guards = 2;
  for (const std::vector<double>& bad : {std::vector<double>{2.0, NAN}, {INFINITY, 3.0}, {NAN, NAN}}) {
    s.guard = d.up(bad);
    d.be.adamw_update(dP, dG, dM, dV, n, s);
    EXPECT_EQ(d.down(dP, n), p0) << "a step that is not finite updated the weights";
    EXPECT_EQ(d.down(dM, n), m0);
    EXPECT_EQ(d.down(dV, n), vpos);
  }
  // One guard (a process's own loss left out, as under data parallelism): the sum of
  // squares alone decides, whatever the loss beside it.
  s.guard = d.up(std::vector<double>{NAN, 3.0}) + 1;
  s.guards = 1;
  d.be.adamw_update(dP, dG, dM, dV, n, s);
  EXPECT_TRUE(test::all_close(d.down(dP, n).data(), p.data(), n, 1e-6f, 1e-5f, "params"));
  EXPECT_TRUE(test::all_close(d.down(dM, n).data(), m.data(), n, 1e-7f, 1e-5f, "m"));

  // The optimizer's one launch: decay within the bounds alone, as the CPU op decays.
  const std::vector<uint64_t> bounds = {0, 40000, 40001, 40001, 40002, 99999};
  Vec pc = p0, mc = m0, vc = vpos;
  ops::AdamWStep sb{0.9f, 0.95f, 1e-8f, 1e-3f, 0.3f, 0.9f, nullptr, 0, bounds.data(), int(bounds.size())};
  cpu_backend().adamw_update(pc.data(), g.data(), mc.data(), vc.data(), n, sb);
  float *dPb = d.up(p0), *dMb = d.up(m0), *dVb = d.up(vpos);
  DeviceBuffer<uint64_t> dB(d.be, bounds.size());
  d.be.upload(dB.data(), bounds.data(), sizeof(uint64_t) * bounds.size());
  sb.decay_bounds = dB.data();
  d.be.adamw_update(dPb, dG, dMb, dVb, n, sb);
  const Vec pb = d.down(dPb, n);
  EXPECT_TRUE(test::all_close(pb.data(), pc.data(), n, 1e-6f, 1e-5f, "params, decay bounds"));
  EXPECT_NEAR(pb[39999] / pc[39999], 1.0, 1e-5);  // decayed, by 0.9: far outside the tolerance if not
  EXPECT_NEAR(pb[40000] / pc[40000], 1.0, 1e-5);  // not decayed
  EXPECT_NEAR(pb[n - 1] / pc[n - 1], 1.0, 1e-5);  // past the last bound: not decayed

  double ss = 0;
  cpu_backend().sum_squares(g.data(), n, &ss);
  double* dSs = d.up(std::vector<double>{-1.0});
  d.be.sum_squares(dG, n, dSs);
  EXPECT_NEAR(d.down(dSs), ss, 1e-9 * double(n));
  const double norm = std::sqrt(ss);
  // Clipping to half the norm halves the gradient; to twice the norm, or 0 (off), or
  // with a non-finite norm, it leaves it as it is, bit for bit.
  Vec half = g;
  cpu_backend().clip_scale(half.data(), n, &ss, float(norm / 2));
  EXPECT_NEAR(half[0], g[0] / 2, 1e-6 * std::fabs(g[0]));
  d.be.clip_scale(dG, n, dSs, float(norm / 2));
  EXPECT_TRUE(test::all_close(d.down(dG, n).data(), half.data(), n, 0.f, 1e-6f, "clipped"));
  float* dG2 = d.up(g);
  for (const auto& [max_norm, sum] : {std::pair{float(2 * norm), dSs}, {0.f, dSs}, {1.f, d.up(std::vector<double>{NAN})}}) {
    d.be.clip_scale(dG2, n, sum, max_norm);
    EXPECT_EQ(d.down(dG2, n), g) << "max_norm " << max_norm;
  }

  // The clipping taken in the update (AdamWStep's clip_sum_squares): the CPU's update of
  // the clipped gradients, and the device's gradients left as they were.
  for (const float max_norm : {float(norm / 2), float(2 * norm)}) {
    ops::AdamWStep sc{0.9f, 0.95f, 1e-8f, 1e-3f, 0.3f, 0.99f};
    Vec pw = p0, mw = m0, vw = vpos, clipped = g;
    cpu_backend().clip_scale(clipped.data(), n, &ss, max_norm);
    cpu_backend().adamw_update(pw.data(), clipped.data(), mw.data(), vw.data(), n, sc);
    float *dPc = d.up(p0), *dMc = d.up(m0), *dVc = d.up(vpos);
    sc.clip_sum_squares = dSs;
    sc.max_norm = max_norm;
    d.be.adamw_update(dPc, dG2, dMc, dVc, n, sc);
    const std::string at = "clipped in the update to " + std::to_string(max_norm);
    EXPECT_TRUE(test::all_close(d.down(dPc, n).data(), pw.data(), n, 1e-6f, 1e-5f, at.c_str()));
    EXPECT_TRUE(test::all_close(d.down(dMc, n).data(), mw.data(), n, 1e-7f, 1e-5f, at.c_str()));
    EXPECT_TRUE(test::all_close(d.down(dVc, n).data(), vw.data(), n, 1e-9f, 1e-5f, at.c_str()));
    EXPECT_EQ(d.down(dG2, n), g) << at << ": the gradients are read, not scaled";
  }
}

// The bf16 forward's spatial product with the bias and the combine in its tiles'
// epilogue (GMLP_CUDA_SPATIAL_COMBINE, sgu.cu's CombineEpilogue over mix_tiles.cuh) is
// cuBLAS's product then the bias + combine pass: F, S and G held to the bit on the
// emulator (both sum each entry's products in k order). On a GPU, whose tensor cores
// sum in an order of their own, G to the bit, F within a bf16 step, and S what the
// combine makes of the F it wrote (a step of F moves S by Z times it, more than S's own
// step where F + bias nearly cancels). Every combine; T of 20 (the forward's W^T copy
// beside W's), 70 (two tiles of positions, three chunks of K) and 130; columns (B g)
// that end inside their first tile or their second; padded rows; causal (W's lower
// triangle, each tile's K ending at its last position); W's copies made each call and
// the layers' copies. A gate held in S's buffer (block.h allows it) takes the
// product and the pass apart: the tiles would write S over rows of G that other blocks
// still read.
TEST(CudaOps, TheSpatialProductWithTheCombineInItsTilesIsTheProductThenTheCombine) {
  REQUIRE_GPU();
  const bool emulated = std::getenv("GMLP_CUDA_EMULATOR") != nullptr;
  struct Case {
    Sgu kind;
    int T, n, B, f;
    bool padded = false, causal = false;
  };
  for (const Case k :
       {Case{Sgu::split, 20, 24, 3, 16}, Case{Sgu::multiplicative, 70, 72, 5, 24, true},
        Case{Sgu::additive, 130, 130, 2, 40}, Case{Sgu::linear, 20, 20, 7, 8}, Case{Sgu::split, 64, 64, 3, 48},
        Case{Sgu::split, 70, 72, 9, 48, true}, Case{Sgu::split, 130, 132, 3, 16, false, true},
        Case{Sgu::multiplicative, 70, 70, 2, 24, true, true}, Case{Sgu::split, 20, 24, 5, 16, false, true}}) {
    const int M = k.T * k.B, g = k.kind == Sgu::split ? k.f / 2 : k.f;
    const std::string at = name_of(k.kind) + " T " + std::to_string(k.T) + " f " + std::to_string(k.f) + " B " +
                           std::to_string(k.B) + (k.padded ? " padded" : "") + (k.causal ? " causal" : "");
    OnDevice d;
    const Vec W = randn(size_t(k.n) * k.n, 5, 0.3f), U = randn(size_t(M) * k.f, 1), ub = randn(k.f, 2, 0.3f),
              sb = randn(k.n, 6);
    Ids lengths(size_t(k.B), k.T);
    lengths[0] = k.T / 2;
    std::vector<uint16_t> uh(U.size());
    for (size_t i = 0; i < uh.size(); ++i) uh[i] = ops::bf16_bits(U[i]);
    ops::SguParams p;
    p.kind = k.kind;
    p.ldw = k.n;
    p.w_head_stride = int64_t(k.n) * k.n;
    p.n = k.n;
    p.causal = k.causal;
    p.lengths = k.padded ? d.up(lengths) : nullptr;
    p.norm_w = d.up(randn(g, 3));
    p.norm_b = d.up(randn(g, 4));
    p.W = d.up(W);
    p.bias = d.up(sb);
    p.z = {true, Gelu::erf, d.up(ub), nullptr};
    DeviceBuffer<uint16_t> copies(d.be, size_t(ops::spatial_w16_head(k.T)));
    const float* layers[1] = {p.W};
    d.be.spatial_w_bf16_many(layers, 1, k.n, p.w_head_stride, 1, k.T, k.causal, copies.data(), 0);
    // F, S and G as held (G: S's buffer when shared, as the forward left it).
    auto run = [&](const char* mode, const uint16_t* w16, bool shared = false) {
      ScopedEnv env("GMLP_CUDA_SPATIAL_COMBINE", mode);
      DeviceBuffer<uint16_t> u16(d.be, uh.size()), F16(d.be, size_t(M) * g), S16(d.be, size_t(M) * g),
          G16(d.be, size_t(M) * g);
      d.be.upload(u16.data(), uh.data(), uh.size() * sizeof(uint16_t));
      ops::SguParams q = p;
      q.store = {u16.data(), F16.data(), S16.data(), shared ? S16.data() : G16.data(), nullptr, nullptr, nullptr};
      q.store.F_unbiased = true;
      q.w16 = w16;
      float* scratch = d.up(Vec(size_t(M) * g));
      d.be.sgu_forward(q, nullptr, k.T, k.B, k.f, nullptr, d.up(Vec(M)), d.up(Vec(M)), scratch, scratch, nullptr);
      std::vector<std::vector<uint16_t>> out;
      for (const DeviceBuffer<uint16_t>* b : {&F16, &S16, shared ? &S16 : &G16}) {
        out.emplace_back(b->size());
        d.be.download(out.back().data(), b->data(), b->size() * sizeof(uint16_t));
      }
      return out;
    };
    const auto apart = run("off", nullptr);
    for (const uint16_t* w16 : std::vector<const uint16_t*>{nullptr, copies.data()}) {
      const auto fused = run("on", w16);
      const std::string where = at + (w16 ? ", the layers' copies: " : ": ");
      EXPECT_EQ(fused[2], apart[2]) << where << "G";
      if (emulated) {
        EXPECT_EQ(fused[0], apart[0]) << where << "F";
        EXPECT_EQ(fused[1], apart[1]) << where << "S";
        continue;
      }
      Vec Fa(apart[0].size()), Ff(Fa.size()), Sf(Fa.size()), Fe(Fa.size()), Sw(Fa.size());
      for (size_t j = 0; j < Fa.size(); ++j) {
        Fa[j] = ops::from_bf16(apart[0][j]);
        Ff[j] = ops::from_bf16(fused[0][j]);
        Sf[j] = ops::from_bf16(fused[1][j]);
        Fe[j] = Ff[j] + sb[size_t(std::min(int(j / size_t(g)) / k.B, k.n - 1))];
      }
      EXPECT_TRUE(test::all_close(Ff.data(), Fa.data(), Fa.size(), 1e-3f, 1.f / 64, where + "F"));
      Vec Z(U.size());
      for (size_t j = 0; j < Z.size(); ++j) Z[j] = ops::from_bf16(uh[j]);
      cpu_backend().bias_gelu_forward(Z.data(), ub.data(), M, k.f, Z.data(), false);
      cpu_backend().sgu_combine(k.kind, Z.data(), k.f, Fe.data(), M, g, Sw.data());
      EXPECT_TRUE(test::all_close(Sf.data(), Sw.data(), Sw.size(), 1e-4f, 1.f / 64, where + "S from its F"));
    }
    // The gate in S's buffer: the fused tiles decline it, and both ways are the pass's.
    const auto shared_apart = run("off", nullptr, true), shared_fused = run("on", nullptr, true);
    EXPECT_EQ(shared_fused[0], shared_apart[0]) << at << ", the gate in S's buffer: F";
    EXPECT_EQ(shared_fused[1], shared_apart[1]) << at << ", the gate in S's buffer: S";
  }
}

// A training step rounds every layer's spatial W into the bf16 copies its products read
// once (Backend::spatial_w_bf16_many, SguParams::w16) where each product made its own:
// the SGU's forward and backward from them are the per-product copies' to the bit. T 20
// of n 24 (a row of 20 bf16 values is not 16 bytes: the forward reads W^T, dG W, two
// copies a head), 24 (one copy serves both), causal (the lower triangle), two heads.
TEST(CudaOps, TheLayersCopiesOfWAreTheCopiesEachProductMakes) {
  REQUIRE_GPU();
  for (const auto& [T, causal, heads] : {std::tuple{20, false, 1}, std::tuple{20, false, 2}, std::tuple{24, false, 1},
                                         std::tuple{20, true, 2}}) {
    const int B = 3, f = 16, n = 24, g = f / 2, M = T * B;
    const std::string at = "T " + std::to_string(T) + (causal ? " causal" : "") + ", heads " + std::to_string(heads);
    OnDevice d;
    const Vec nw = randn(g, 3), nb = randn(g, 4), W = randn(size_t(heads) * n * n, 5, 0.3f),
              sb = randn(size_t(heads) * n, 6);
    std::vector<uint16_t> uh(size_t(M) * f), dSh(size_t(M) * g);
    const Vec U = randn(uh.size(), 1), dS = randn(dSh.size(), 8);
    for (size_t i = 0; i < uh.size(); ++i) uh[i] = ops::bf16_bits(U[i]);
    for (size_t i = 0; i < dSh.size(); ++i) dSh[i] = ops::bf16_bits(dS[i]);
    ops::SguParams p;
    p.kind = Sgu::split;
    p.ldw = n;
    p.w_head_stride = int64_t(n) * n;
    p.n = n;
    p.heads = heads;
    p.causal = causal;
    p.norm_w = d.up(nw);
    p.norm_b = d.up(nb);
    p.W = d.up(W);
    p.bias = d.up(sb);
    p.z = {true, Gelu::erf, d.up(randn(f, 2, 0.3f)), nullptr};
    DeviceBuffer<uint16_t> copies(d.be, size_t(heads) * ops::spatial_w16_head(T));
    const float* layers[1] = {p.W};
    d.be.spatial_w_bf16_many(layers, 1, n, p.w_head_stride, heads, T, causal, copies.data(), 0);
    // What a forward and a backward leave: F, S and G held, dF, dG, dU over U, the gradients.
    auto run = [&](const uint16_t* w16) {
      DeviceBuffer<uint16_t> u16(d.be, uh.size()), F16(d.be, dSh.size()), S16(d.be, dSh.size()),
          G16(d.be, dSh.size()), dF16(d.be, dSh.size()), dS16(d.be, dSh.size()), dG16(d.be, dSh.size());
      d.be.upload(u16.data(), uh.data(), uh.size() * sizeof(uint16_t));
      d.be.upload(dS16.data(), dSh.data(), dSh.size() * sizeof(uint16_t));
      ops::SguParams q = p;
      q.store = {u16.data(), F16.data(), S16.data(), G16.data(), dF16.data(), dS16.data(), dG16.data()};
      q.w16 = w16;
      float *gm = d.up(Vec(M)), *gr = d.up(Vec(M)), *scratch = d.up(Vec(dSh.size()));
      d.be.sgu_forward(q, nullptr, T, B, f, nullptr, gm, gr, scratch, scratch, nullptr);
      std::vector<std::vector<uint16_t>> out;
      auto keep = [&](const DeviceBuffer<uint16_t>& b) {
        out.emplace_back(b.size());
        d.be.download(out.back().data(), b.data(), b.size() * sizeof(uint16_t));
      };
      keep(F16);
      keep(S16);
      keep(G16);
      q.z.dbias = d.up(Vec(f));
      const ops::SguGrads gg{d.up(Vec(g)), d.up(Vec(g)), d.up(Vec(W.size())), d.up(Vec(sb.size()))};
      float *dSf = d.up(dS), *S2 = d.up(Vec(dSh.size())), *dFf = d.up(Vec(dSh.size()));
      d.be.sgu_backward_gate(q, dSf, nullptr, T, B, f, nullptr, S2, dFf, nullptr);
      d.be.sgu_backward_mix(q, gg, dSf, nullptr, T, B, f, gm, gr, nullptr, nullptr, scratch, dFf, scratch);
      keep(dF16);
      keep(dG16);
      keep(u16);
      std::vector<float> grads = d.down(gg.W, W.size());
      for (const float* gp : {gg.bias, gg.norm_w}) {
        const Vec v = d.down(gp, gp == gg.bias ? sb.size() : size_t(g));
        grads.insert(grads.end(), v.begin(), v.end());
      }
      return std::pair{out, grads};
    };
    const auto each = run(nullptr), made = run(copies.data());
    const char* names[] = {"F", "S", "G", "dF", "dG", "dU"};
    for (size_t i = 0; i < each.first.size(); ++i) EXPECT_EQ(made.first[i], each.first[i]) << at << ": " << names[i];
    EXPECT_EQ(0, std::memcmp(made.second.data(), each.second.data(), sizeof(float) * each.second.size()))
        << at << ": dW, the bias's and the norm's gradients";
  }
}

// Under --precision bf16 the GPU holds the SGU's U and F in bf16 (ops.h's Bf16Store),
// and its spatial products take G, dF and W in bf16. The ops over the held values must
// be the CPU's ops over the same values rounded, the CPU's products rounding their
// inputs (GMLP_CPU_BF16=emulate): given U in bf16, G and F within a bf16 step of the
// CPU's, S what the held F gives (held in bf16 too), and the backward, given dS in
// bf16 and reading what it holds, what the CPU's gives from the same rounded U, F and
// dS, with S and G rebuilt into the store, dF and dG within a bf16 step of the CPU's,
// dU (over U) and the gate norm's gradients what the CPU's LayerNorm backward gives
// from the dG held, and the bias gradients the sums of what was written. Every SGU
// form, one and two heads, causal and padded.
TEST(CudaOps, SguHoldingUAndFInBf16IsTheCpuSguOnTheRoundedValues) {
  REQUIRE_GPU();
  ScopedEnv emulate("GMLP_CPU_BF16", "emulate");
  Fp32Again restore{{Device::cpu}};
  use_precision(Device::cpu, Precision::bf16);
  struct Case {
    Sgu kind;
    int heads;
    bool causal, padded, extra;
    bool unbiased = false;  // F held without its bias (Bf16Store::F_unbiased)
    int f = 16;             // 18: the split gate's 9 channels, a channel a thread (not pairs)
    // The GPU's LayerNorm kernels at its widths on the emulator too (GMLP_CUDA_EMU_ROWS
    // gpu, or gpu-blocks: a block per row throughout). These cases hold
    // the LayerNorm, the combine and the gate pass; the spatial products' F, dG and dW
    // are the narrow cases'. Their references start from the CPU's float G and dF, where
    // the GPU's products read bf16 ones: over thousands of values some sums cancel
    // enough for those roundings to pass the bounds here (1 to 11 values of 60,000).
    const char* gpu_rows = nullptr;
  };
  const Case cases[] = {{Sgu::split, 1, true, false, false},         {Sgu::split, 2, false, true, true},
                        {Sgu::multiplicative, 2, true, false, false}, {Sgu::multiplicative, 1, false, true, false},
                        {Sgu::additive, 1, false, true, true},        {Sgu::linear, 2, true, false, false},
                        {Sgu::split, 2, true, true, false, true},     {Sgu::multiplicative, 1, false, true, false, true},
                        {Sgu::additive, 2, true, false, false, true},  {Sgu::split, 1, false, true, true, false, 18},
                        // Gates that fill the GPU's shares (the full-row kernels): 768 a
                        // warp's 24 a lane forward (a block of 128's 6 a thread backward),
                        // 512 a warp's 16 a lane both ways, 1,024 and 1,536 a block's 4 and
                        // 6 a thread; and 1,400 and 700, a block's 6 a thread (of 256, of
                        // 128), partly;
                        {Sgu::split, 1, false, false, false, false, 1536, "gpu"},
                        {Sgu::split, 1, false, true, false, false, 1400, "gpu"},
                        {Sgu::split, 1, true, false, false, false, 1024, "gpu"},
                        {Sgu::multiplicative, 1, true, true, false, true, 1024, "gpu"},
                        {Sgu::split, 2, false, true, false, false, 3072, "gpu"},
                        {Sgu::additive, 1, false, false, true, false, 1400, "gpu"},
                        // 768 with a block per row throughout (GMLP_CUDA_LN_WARP_COLUMNS=0):
                        // the backward a block of 128's 6 a thread, the forward 256's 3
                        {Sgu::split, 1, false, true, false, true, 1536, "gpu-blocks"}};
  Backend& cb = cpu_backend();
  for (const Case& k : cases) {
    const std::string name = name_of(k.kind) + (k.heads > 1 ? " heads" : "") + (k.causal ? " causal" : "") +
                             (k.padded ? " padded" : "") + (k.unbiased ? " F unbiased" : "") + " f " +
                             std::to_string(k.f) + (k.gpu_rows ? std::string(" rows ") + k.gpu_rows : "");
    ScopedEnv rows("GMLP_CUDA_EMU_ROWS", k.gpu_rows);
    const int T = 20, B = 3, f = k.f, n = 24, M = T * B, g = k.kind == Sgu::split ? f / 2 : f;
    const Vec U = randn(size_t(M) * f, 1), ub = randn(f, 2, 0.3f), nw = randn(g, 3), nb = randn(g, 4),
              W = randn(size_t(k.heads) * n * n, 5, 0.3f), sb = randn(size_t(k.heads) * n, 6),
              extra = randn(size_t(M) * g, 7), dS = randn(size_t(M) * g, 8);
    const Ids lengths = {T, T - 5, 7};
    ops::SguParams p;
    p.kind = k.kind;
    p.ldw = n;
    p.w_head_stride = int64_t(n) * n;
    p.n = n;
    p.heads = k.heads;
    p.causal = k.causal;
    p.z = {true, Gelu::erf, nullptr, nullptr};
    // The CPU: the SGU over U rounded to bf16, in floats.
    Vec Ur(U.size());
    for (size_t i = 0; i < U.size(); ++i) Ur[i] = ops::round_to_bf16(U[i]);
    ops::SguParams pc = p;
    pc.norm_w = nw.data();
    pc.norm_b = nb.data();
    pc.W = W.data();
    pc.bias = sb.data();
    pc.lengths = k.padded ? lengths.data() : nullptr;
    pc.z.bias = ub.data();
    Vec S(size_t(M) * g), G(S.size()), F(S.size()), gm(M), gr(M);
    cb.sgu_forward(pc, Ur.data(), T, B, f, S.data(), gm.data(), gr.data(), F.data(), G.data(),
                   k.extra ? extra.data() : nullptr);
    // The GPU: given U in bf16 (as the in-projection's product writes it), holding F in bf16.
    OnDevice d;
    DeviceBuffer<uint16_t> u16(d.be, U.size()), F16(d.be, S.size()), S16(d.be, S.size()), G16(d.be, S.size()),
        dF16(d.be, S.size()), dS16(d.be, S.size()), dG16(d.be, S.size());
    std::vector<uint16_t> uh(U.size()), Fh16(S.size());
    for (size_t i = 0; i < U.size(); ++i) uh[i] = ops::bf16_bits(U[i]);
    d.be.upload(u16.data(), uh.data(), uh.size() * sizeof(uint16_t));
    ops::SguParams pg = p;
    pg.norm_w = d.up(nw);
    pg.norm_b = d.up(nb);
    pg.W = d.up(W);
    pg.bias = d.up(sb);
    pg.lengths = k.padded ? d.up(lengths) : nullptr;
    pg.z.bias = d.up(ub);
    pg.store = {u16.data(), F16.data(), S16.data(), G16.data(), dF16.data(), dS16.data(), dG16.data()};
    pg.store.F_unbiased = k.unbiased;
    float *dGg = d.up(Vec(S.size())), *dFg = d.up(Vec(S.size())), *dgm = d.up(Vec(M)), *dgr = d.up(Vec(M));
    d.be.sgu_forward(pg, nullptr, T, B, f, nullptr, dgm, dgr, dFg, dGg, k.extra ? d.up(extra) : nullptr);
    // What the store holds, widened.
    auto held = [&](const DeviceBuffer<uint16_t>& b) {
      std::vector<uint16_t> h(b.size());
      d.be.download(h.data(), b.data(), h.size() * sizeof(uint16_t));
      Vec v(h.size());
      for (size_t i = 0; i < h.size(); ++i) v[i] = ops::from_bf16(h[i]);
      return v;
    };
    auto held_S = [&] { return held(S16); };
    d.be.download(Fh16.data(), F16.data(), Fh16.size() * sizeof(uint16_t));
    Vec Fh(S.size());
    for (size_t i = 0; i < Fh.size(); ++i) Fh[i] = ops::from_bf16(Fh16[i]);
    // F is rounded twice, as its products write it and again with its bias (and the
    // attention) added: each rounding
    // moves it by at most half a bf16 step of what it rounds (2^-9 relative; 2^-8 allowed).
    // Held without its bias, F is the products rounded once, and its value (Fe, what the
    // GPU's combine and backward read) the held products plus the bias, in float.
    Vec Fe = Fh;
    {
      const int gh = g / k.heads;
      size_t off = 0;
      for (int r = 0; r < M; ++r)
        for (int c = 0; c < g; ++c) {
          const size_t i = size_t(r) * g + c;
          const float b = sb[size_t(c / gh) * n + size_t(std::min(r / B, n - 1))] + (k.extra ? extra[i] : 0.f);
          if (k.unbiased) {
            Fe[i] = Fh[i] + b;
            off += std::fabs(double(Fh[i]) - (double(F[i]) - b)) > 1e-5 + std::fabs(double(F[i]) - b) / 256;
          } else {
            const double tol = 1e-5 + (std::fabs(double(F[i]) - b) + std::fabs(F[i])) / 256;
            off += std::fabs(double(Fh[i]) - F[i]) > tol;
          }
        }
      if (!k.gpu_rows) {
        EXPECT_EQ(off, 0u) << name << ": F held, of " << F.size();
      }
    }
    // S from the held F: Z = GELU(U + b) on the host, combined with it.
    Vec Z = Ur, Sw(S.size());
    cb.bias_gelu_forward(Z.data(), ub.data(), M, f, Z.data(), false);
    cb.sgu_combine(k.kind, Z.data(), f, Fe.data(), M, g, Sw.data());
    EXPECT_TRUE(test::all_close(held_S().data(), Sw.data(), S.size(), kAtol, 1.f / 128, name + " S held"));
    EXPECT_TRUE(test::all_close(held(G16).data(), G.data(), G.size(), kAtol, 1.f / 128, name + " gate"));
    EXPECT_TRUE(test::all_close(d.down(dgr, M).data(), gr.data(), M, kAtol, kRtol, name + " rstd"));

    const Vec Gf = G;  // the CPU's backward takes G's buffer for scratch
    // Backward: the CPU from the rounded U and the held F, the GPU from what it holds.
    Vec dZ(U.size()), dF(S.size()), dG(S.size()), S2(S.size()), gnw(g), gnb(g), gW(W.size()), gsb(sb.size()),
        gub(f);
    pc.z.dbias = gub.data();
    const ops::SguGrads gc{gnw.data(), gnb.data(), gW.data(), gsb.data()};
    // dL/dS in bf16, as the out-projection's product writes it under bf16.
    Vec dSr(dS.size());
    std::vector<uint16_t> dSh(dS.size());
    for (size_t i = 0; i < dS.size(); ++i) {
      dSh[i] = ops::bf16_bits(dS[i]);
      dSr[i] = ops::from_bf16(dSh[i]);
    }
    d.be.upload(dS16.data(), dSh.data(), dSh.size() * sizeof(uint16_t));
    cb.sgu_backward_gate(pc, dSr.data(), Ur.data(), T, B, f, Fe.data(), S2.data(), dF.data(), dZ.data());
    cb.sgu_backward_mix(pc, gc, dSr.data(), Ur.data(), T, B, f, gm.data(), gr.data(), Fe.data(), dZ.data(), G.data(),
                        dF.data(), dG.data());
    float *dFb = d.up(Vec(S.size())), *dGb = d.up(Vec(S.size())), *S2g = d.up(Vec(S.size())), *dS_ = d.up(dS);
    d.be.zero(S16.data(), S.size() * sizeof(uint16_t));  // the backward's S and G must be its own
    d.be.zero(G16.data(), S.size() * sizeof(uint16_t));
    pg.z.dbias = d.up(Vec(f));
    const ops::SguGrads gg{d.up(Vec(g)), d.up(Vec(g)), d.up(Vec(W.size())), d.up(Vec(sb.size()))};
    d.be.sgu_backward_gate(pg, dS_, nullptr, T, B, f, nullptr, S2g, dFb, nullptr);
    d.be.sgu_backward_mix(pg, gg, dS_, nullptr, T, B, f, dgm, dgr, nullptr, nullptr, dGg, dFb, dGb);
    EXPECT_TRUE(test::all_close(held_S().data(), S2.data(), S.size(), kAtol, 1.f / 128, name + " S again"));
    EXPECT_TRUE(test::all_close(held(G16).data(), Gf.data(), G.size(), kAtol, 1.f / 128, name + " gate again"));
    EXPECT_TRUE(test::all_close(held(dF16).data(), dF.data(), dF.size(), kAtol, 1.f / 128, name + " dF held"));
    d.be.download(uh.data(), u16.data(), uh.size() * sizeof(uint16_t));
    Vec dU(U.size()), dUsum(f, 0.f);
    for (size_t i = 0; i < U.size(); ++i) dU[i] = ops::from_bf16(uh[i]);
    for (int r = 0; r < M; ++r)
      for (int c = 0; c < f; ++c) dUsum[size_t(c)] += dU[size_t(r) * f + c];
    EXPECT_TRUE(test::all_close(d.down(dFb, dF.size()).data(), dF.data(), dF.size(), kAtol, 1e-4f, name + " dF"));
    const Vec dGh = held(dG16);
    if (!k.gpu_rows) {
      EXPECT_TRUE(test::all_close(dGh.data(), dG.data(), dG.size(), kAtol, 1.f / 128, name + " dG held"));
    }
    // The gate LayerNorm's backward reads dG as held: the CPU's LayerNorm backward over
    // the held dG and Z's gate channels, the direct path added, times GELU'(U + b), for
    // dU's gate channels and the norm's gradients; the split form's other half is the
    // gate pass's, the CPU's dZ there.
    const int goff = k.kind == Sgu::split ? g : 0;
    Vec want_dU = dZ, dzg(size_t(M) * g), ug(dzg.size()), wnw(g, 0.f), wnb(g, 0.f);
    cb.layernorm_backward(dGh.data(), g, Z.data() + goff, f, gm.data(), gr.data(), nw.data(), M, g, dzg.data(), g,
                          false, wnw.data(), wnb.data());
    for (int r = 0; r < M; ++r)
      for (int c = 0; c < g; ++c) {
        const size_t i = size_t(r) * g + c;
        if (k.kind == Sgu::multiplicative) dzg[i] += dSr[i] * Fe[i];
        if (k.kind == Sgu::additive) dzg[i] += dSr[i];
        ug[i] = Ur[size_t(r) * f + goff + c] + ub[size_t(goff + c)];
      }
    cb.gelu_backward(ug.data(), dzg.data(), dzg.data(), int64_t(dzg.size()), false);
    for (int r = 0; r < M; ++r)
      for (int c = 0; c < g; ++c) want_dU[size_t(r) * f + goff + c] = dzg[size_t(r) * g + c];
    EXPECT_TRUE(test::all_close(dU.data(), want_dU.data(), dU.size(), kAtol, 1.f / 128, name + " dU over U"));
    EXPECT_TRUE(test::all_close(d.down(gg.norm_w, g).data(), wnw.data(), g, 1e-4f, 1e-4f, name + " dnorm_w"));
    EXPECT_TRUE(test::all_close(d.down(gg.norm_b, g).data(), wnb.data(), g, 1e-4f, 1e-4f, name + " dnorm_b"));
    if (!k.gpu_rows) {
      EXPECT_TRUE(test::all_close(d.down(gg.W, W.size()).data(), gW.data(), W.size(), 1e-4f, 1e-4f, name + " dW"));
    }
    // The spatial bias's gradient: the sum of what dF16 holds, and so within the terms'
    // rounding of the CPU's sum of float dF (as dU's bias below).
    const Vec dFh = held(dF16), gotsb = d.down(gg.bias, sb.size());
    std::vector<double> want16(sb.size(), 0.0), reach(sb.size(), 1e-5);
    const int gh = g / k.heads;
    for (int t = 0; t < T; ++t)
      for (int b = 0; b < B; ++b)
        for (int c = 0; c < g; ++c) {
          const size_t e = size_t(c / gh) * n + size_t(std::min(t, n - 1)), i = (size_t(t) * B + b) * g + c;
          want16[e] += dFh[i];
          reach[e] += std::fabs(dF[i]) / 256;
        }
    for (size_t e = 0; e < sb.size(); ++e) {
      EXPECT_NEAR(gotsb[e], want16[e], 1e-4 * (1 + std::fabs(want16[e]))) << name << " db, entry " << e;
      EXPECT_LE(std::fabs(gotsb[e] - gsb[e]), reach[e]) << name << " db against the float sum, entry " << e;
    }
    // Against the sum of the float dU: each term moved by its rounding alone (half a
    // bf16 step, 2^-9 relative; 2^-8 allowed).
    const Vec gotb = d.down(pg.z.dbias, f);
    for (int c = 0; c < f; ++c) {
      double reach = 1e-5, sum = 0;
      for (int r = 0; r < M; ++r) {
        reach += std::fabs(want_dU[size_t(r) * f + c]) / 256;
        sum += want_dU[size_t(r) * f + c];
      }
      EXPECT_LE(std::fabs(gotb[size_t(c)] - sum), reach) << name << " du bias, column " << c;
    }
    EXPECT_TRUE(test::all_close(d.down(pg.z.dbias, f).data(), dUsum.data(), f, 1e-5f, 1e-4f,
                                name + " du bias: the sum of what dU holds"));
  }
}

TEST(SguHeldInBf16, TheCpuOpsRefuseIt) {
  uint16_t y[8] = {};
  const float v[8] = {};
  try {
    cpu_backend().to_bf16(v, 8, y);
    ADD_FAILURE() << "the CPU backend took a bf16 activation";
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()), "to_bf16: the CPU backend holds no activations in bf16");
  }
  uint16_t u[8] = {}, F[8] = {};
  ops::SguParams p;
  p.store = {u, F};
  float x[8] = {};
  try {
    cpu_backend().sgu_forward(p, x, 1, 1, 8, x, x, x, x, x, nullptr);
    ADD_FAILURE() << "the CPU's SGU took bf16-held activations";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("bf16 storage is the CUDA backend's"), std::string::npos) << e.what();
  }
}

// Every variant: one forward and backward, loss, logits and every gradient.
class CudaModel : public ::testing::TestWithParam<Variant> {};

TEST_P(CudaModel, ForwardAndBackwardMatchTheCpu) {
  REQUIRE_GPU();
  const ModelConfig c = config_of(GetParam());
  auto cpu = make(c, cpu_backend());
  auto gpu = make(c, backend_for(Device::cuda));
  TestBatch tb(c, 3, 21, GetParam().T);
  const double lc = cpu->forward(tb.batch), lg = gpu->forward(tb.batch);
  EXPECT_NEAR(lg, lc, 1e-5 * std::fabs(lc));
  const size_t nl = size_t(cpu->logit_rows()) * c.out_dim();
  EXPECT_TRUE(test::all_close(gpu->logits(), cpu->logits(), nl, 1e-5f, 1e-4f, "logits"));
  cpu->zero_grad();
  gpu->zero_grad();
  cpu->forward(tb.batch);
  gpu->forward(tb.batch);
  cpu->backward();
  gpu->backward();
  for (const auto& p : cpu->params())
    EXPECT_TRUE(test::all_close(gpu->grads() + p.offset, cpu->grads() + p.offset, p.size, 1e-5f, 1e-4f, p.name));
}

TEST_P(CudaModel, TenAdamWStepsMatchTheCpu) {
  REQUIRE_GPU();
  const ModelConfig c = config_of(GetParam());
  auto cpu = make(c, cpu_backend());
  auto gpu = make(c, backend_for(Device::cuda));
  TestBatch tb(c, 3, 22, GetParam().T);
  AdamW ocpu(*cpu, train_config()), ogpu(*gpu, train_config());
  const auto lc = train_steps(*cpu, ocpu, tb.batch, 10);
  const auto lg = train_steps(*gpu, ogpu, tb.batch, 10);
  for (size_t s = 0; s < lc.size(); ++s) EXPECT_NEAR(lg[s], lc[s], 1e-4 * std::fabs(lc[s])) << "step " << s + 1;
  EXPECT_TRUE(test::all_close(gpu->weights(), cpu->weights(), cpu->num_params(), 1e-4f, 1e-3f, "weights"));
}

INSTANTIATE_TEST_SUITE_P(Variants, CudaModel, ::testing::ValuesIn(variants()),
                         [](const auto& info) { return info.param.name; });

// Checkpoints are the same fp32 files on every device: a run trained on the GPU resumes
// on the CPU and back, and ends where a CPU run of the same steps ends (to float
// rounding: the GPU's sums are ordered otherwise). From the command line, as a user
// would, with the optimizer state and the RNG crossing devices in the training state.
// The command-line runs' model and batches: small, with dropout (its masks must cross
// devices and resumptions too).
const std::string kTinyRun = " --lr 1e-2 --batch-size 4 --no-progress --set model.d_model=16 --set model.d_ffn=32"
                             " --set model.n_layers=2 --set model.seq_len=24 --set model.dropout=0.1";

TEST(CudaCli, ARunResumesAcrossDevicesAndEndsWhereACpuRunEnds) {
  REQUIRE_GPU();
  test::TempDir dir("cross_device");
  const std::string common =
      test::gmlp_exe() + " train --data " + test::kGplText + " --steps 12 --ckpt-every 4 --eval-every 6" + kTinyRun;
  auto r = test::run_command(common + " --device cpu --out " + dir.file("cpu") + " 2>&1");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(r.output.find("gmlp train: on "), std::string::npos) << "a CPU run's header is as it was";
  EXPECT_EQ(r.output.find("device memory: "), std::string::npos) << "a CPU run's summary is as it was";
  r = test::run_command(common + " --device cuda --stop-after 5 --out " + dir.file("moved") + " 2>&1");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("gmlp train: on " + backend_for(Device::cuda).device_name() + "\n"), std::string::npos)
      << "a GPU run names its GPU:\n" << r.output;
  r = test::run_command(test::gmlp_exe() + " train --resume --device cpu --stop-after 4 --no-progress --out " +
                        dir.file("moved") + " 2>&1");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  r = test::run_command(test::gmlp_exe() + " train --resume --device cuda --no-progress --out " + dir.file("moved") +
                        " 2>&1");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  std::smatch peak;
  ASSERT_TRUE(std::regex_search(r.output, peak, std::regex("\ndevice memory: ([0-9.]+) MiB at the most\n")))
      << "a GPU run's summary says its peak device memory:\n" << r.output;
  EXPECT_GT(std::stod(peak[1].str()), 0.0) << r.output;
  const std::vector<double> want = test::train_losses(dir.file("cpu")), got = test::train_losses(dir.file("moved"));
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < want.size(); ++i) EXPECT_NEAR(got[i], want[i], 1e-4 * std::fabs(want[i])) << "log line " << i;
  auto a = load_model(model_file(dir.file("cpu"))), b = load_model(model_file(dir.file("moved")));
  ASSERT_EQ(a->num_params(), b->num_params());
  EXPECT_TRUE(test::all_close(b->weights(), a->weights(), a->num_params(), 1e-5f, 1e-4f, "final weights"));
}

// On one device a run repeats itself to the bit: nothing in a step depends on the order
// in which the GPU happens to run things (the embedding's gradient once did, through
// atomic adds), so a run stopped and resumed on the GPU logs the uninterrupted run's
// losses and ends with its weights exactly, as on the CPU (EndToEnd.ResumedRun...).
// `train` (a gmlp train command on the GPU, without --out) run straight to its end in
// dir/straight, and stopped after 6 steps and resumed in dir/split: the two must log the
// same `steps` losses and end with the same weights, to the bit. Returns the losses.
std::vector<double> expect_resumed_run_is_straight(const std::string& train, const test::TempDir& dir, size_t steps) {
  for (const std::string& cmd :
       {train + " --out " + dir.file("straight"), train + " --stop-after 6 --out " + dir.file("split"),
        test::gmlp_exe() + " train --resume --device cuda --no-progress --out " + dir.file("split")}) {
    const auto r = test::run_command(cmd + " 2>&1");
    EXPECT_EQ(r.exit_code, 0) << cmd << "\n" << r.output;
    if (r.exit_code != 0) return {};
  }
  const std::vector<double> a = test::train_losses(dir.file("straight")), b = test::train_losses(dir.file("split"));
  EXPECT_EQ(a.size(), steps);
  EXPECT_EQ(a, b) << "the resumed GPU run's losses equal the uninterrupted one's exactly";
  auto ma = load_model(model_file(dir.file("straight"))), mb = load_model(model_file(dir.file("split")));
  EXPECT_TRUE(ma->num_params() == mb->num_params() &&
              std::equal(ma->weights(), ma->weights() + ma->num_params(), mb->weights()))
      << "final weights";
  return a;
}

TEST(CudaCli, AGpuRunStoppedAndResumedIsTheUninterruptedRunBitForBit) {
  REQUIRE_GPU();
  test::TempDir dir("gpu_resume");
  expect_resumed_run_is_straight(test::gmlp_exe() + " train --device cuda --data " + test::kGplText +
                                     " --steps 10 --log-every 1 --ckpt-every 4 --eval-every 5" + kTinyRun,
                                 dir, 10);
}

// A vision run from image files draws each step's batch while the device runs the step
// before, and sends its images up beside it (src/train/batch_ahead.h). A run stopped and
// resumed on the GPU is still the uninterrupted run to the bit (the batch drawn ahead of a
// checkpoint must not have moved the RNG the checkpoint saves), and a GPU run ends where
// a CPU run ends (the same draws in the same order). Shifts and stochastic depth draw
// from the run's RNG. On the emulator an upload lands only when work waits for it, and a
// host that rewrites its source before then ends the process.
TEST(CudaCli, AVisionRunFromFilesDrawsAheadAndIsTheStepByStepRun) {
  REQUIRE_GPU();
  test::TempDir dir("gpu_vision");
  test::write_vision_set(dir.file("data"));
  const std::string common = test::gmlp_exe() + " train --data " + dir.file("data") +
                             " --task vision --set model.d_model=16 --set model.d_ffn=32 --set model.n_layers=2"
                             " --batch-size 16 --lr 1e-2 --no-progress --steps 10 --log-every 1 --eval-every 5"
                             " --ckpt-every 4 --set model.survival_prob=0.7 --set train.augment_shift=1";
  const auto r = test::run_command(common + " --device cpu --out " + dir.file("cpu") + " 2>&1");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const std::vector<double> cpu = test::train_losses(dir.file("cpu")),
                            gpu = expect_resumed_run_is_straight(common + " --device cuda", dir, 10);
  ASSERT_EQ(cpu.size(), gpu.size());
  for (size_t i = 0; i < gpu.size(); ++i) EXPECT_NEAR(gpu[i], cpu[i], 1e-4 * std::fabs(cpu[i])) << "step " << i + 1;
}

// Images held as bytes go up to the GPU as bytes (a quarter of the floats' bytes, beside
// the step) and are normalised as the patches are cut, in fp32 into float patches and in
// bf16 into the bf16 patches the products read: the run is the one over the floats they
// stand for, normalised on the host, to the bit, losses and weights, in each precision.
TEST(CudaTrain, AVisionRunOverBytesIsTheRunOverTheFloatsTheyStandFor) {
  REQUIRE_GPU();
  Fp32Again restore;
  test::TempDir dir("gpu_bytes");
  constexpr int n = 40, side = 16;
  std::mt19937 gen(9);
  std::vector<uint8_t> bytes(size_t(n) * side * side);
  for (uint8_t& b : bytes) b = uint8_t(gen() % 256);
  std::vector<int32_t> labels(n);
  for (int i = 0; i < n; ++i) labels[size_t(i)] = i % 3;
  auto data = [&](bool as_bytes) {
    std::vector<float> f;
    for (uint8_t v : bytes) f.push_back(float(v) * (1.0f / 255.0f));
    auto d = std::make_shared<TrainData>();
    d->images = make_image_set(f, labels, 1, side, side, 0, "imgs");
    d->test_images = d->images;
    for (ImageSet* s : {&d->images, &d->test_images})
      if (as_bytes) {
        s->as_bytes = true;
        s->bytes = bytes;
        s->pixels.clear();
      }
    return d;
  };
  for (const Precision p : {Precision::fp32, Precision::bf16}) {
    SCOPED_TRACE(p == Precision::bf16 ? "bf16" : "fp32");
    use_precision(Device::cuda, p);
    std::vector<std::vector<double>> losses;
    std::vector<std::vector<float>> weights;
    for (const bool as_bytes : {false, true}) {
      TrainOptions o;
      o.run.model = ModelConfig::from_json(
          {{"task", "vision"}, {"d_model", 16}, {"d_ffn", 32}, {"n_layers", 2}, {"survival_prob", 0.8}}, "test", true);
      o.run.train.batch_size = 8;
      o.run.train.augment_shift = 1;
      o.run.train.steps = 6;
      o.run.train.lr = 1e-2f;
      o.run.train.log_every = 1;
      o.run.train.eval_every = 3;
      o.device = Device::cuda;
      o.progress_bar = false;
      o.data = data(as_bytes);
      o.out_dir = dir.file(std::string(as_bytes ? "bytes" : "floats") + (p == Precision::bf16 ? "16" : "32"));
      train(o);
      losses.push_back(test::train_losses(o.out_dir));
      const auto m = load_model(model_file(o.out_dir));
      weights.emplace_back(m->weights(), m->weights() + m->num_params());
    }
    ASSERT_EQ(losses[0].size(), 6u);
    EXPECT_EQ(losses[1], losses[0]);
    EXPECT_TRUE(weights[1] == weights[0]) << "the weights differ";
  }
}

// Two runs at once on one GPU, each in a thread of its own, as two Python threads may
// run them (the module releases the GIL). The backend's state is the process's: the
// scratch areas an op writes and reads again, its allocation table, the uploads beside
// (src/ops/cuda/cuda_backend.cpp's lock). Two vision runs of different sizes
// (their batches sent up beside the step, their scratch grown to different sizes) and a
// causal LM: each must log the losses and end with the weights it has alone, to the bit.
TEST(CudaTrain, RunsInTwoThreadsAtOnceEachEndAsItDoesAlone) {
  REQUIRE_GPU();
  test::TempDir dir("gpu_threads");
  auto images = [](int n, int side, uint32_t seed) {
    std::mt19937 gen(seed);
    std::uniform_real_distribution<float> px(0.f, 1.f);
    std::vector<float> pixels(size_t(n) * side * side);
    for (float& v : pixels) v = px(gen);
    std::vector<int32_t> labels(static_cast<size_t>(n));
    for (int i = 0; i < n; ++i) labels[size_t(i)] = i % 3;
    auto d = std::make_shared<TrainData>();
    d->images = make_image_set(pixels, labels, 1, side, side, 0, "imgs");
    return d;
  };
  auto vision = [&](int side, int d_model, std::shared_ptr<TrainData> data) {
    TrainOptions o;
    o.run.model = ModelConfig::from_json({{"task", "vision"}, {"d_model", d_model}, {"d_ffn", 2 * d_model},
                                          {"n_layers", 2}, {"image_height", side}, {"image_width", side},
                                          {"patch_height", 4}, {"patch_width", 4}, {"image_channels", 1}},
                                         "test", true);
    o.run.train.batch_size = 8;
    o.run.train.augment_shift = 1;
    o.data = std::move(data);
    return o;
  };
  std::vector<TrainOptions> runs = {vision(16, 16, images(40, 16, 1)), vision(24, 24, images(40, 24, 2))};
  TrainOptions lm;
  lm.data_path = test::kGplText;
  lm.run.model = ModelConfig::from_json({{"d_model", 16}, {"d_ffn", 32}, {"n_layers", 2}, {"seq_len", 24}}, "test", true);
  lm.run.train.batch_size = 4;
  runs.push_back(lm);
  for (size_t i = 0; i < runs.size(); ++i) {
    TrainOptions& o = runs[i];
    o.device = Device::cuda;
    o.progress_bar = false;
    o.score_test = false;
    o.run.train.steps = 8;
    o.run.train.lr = 1e-2f;
    o.run.train.log_every = 1;
    o.run.train.eval_every = 4;
    o.run.train.eval_batches = 2;
    o.run.train.seed = 5 + uint64_t(i);
  }
  auto out = [&](const char* how, size_t i) { return dir.file(std::string(how) + std::to_string(i)); };
  for (size_t i = 0; i < runs.size(); ++i) {
    runs[i].out_dir = out("alone", i);
    train(runs[i]);
  }
  std::vector<std::string> errors(runs.size());
  std::vector<std::thread> threads;
  for (size_t i = 0; i < runs.size(); ++i)
    threads.emplace_back([&, i] {
      TrainOptions o = runs[i];
      o.out_dir = out("together", i);
      try {
        train(o);
      } catch (const std::exception& e) {
        errors[i] = e.what();
      }
    });
  for (std::thread& t : threads) t.join();
  for (size_t i = 0; i < runs.size(); ++i) {
    ASSERT_EQ(errors[i], "") << "run " << i;
    EXPECT_EQ(test::train_losses(out("together", i)), test::train_losses(out("alone", i))) << "run " << i;
    auto a = load_model(model_file(out("alone", i))), b = load_model(model_file(out("together", i)));
    EXPECT_TRUE(std::equal(a->weights(), a->weights() + a->num_params(), b->weights())) << "run " << i << "'s weights";
  }
}

// The trainer's pipeline (TrainOptions::pipeline): on a device, step t+1's forward is
// queued before step t's loss comes back, read from page-locked memory behind an event
// of its own. The run is the step-by-step run to the bit: a causal LM with dropout (its
// masks' seed drawn with the batch), a masked LM (its sparse head compacts the targeted
// rows in the staging the next forward writes) and a vision model from image files (its
// batches' images sent up beside the step into two buffers taken in turn, shifted, with
// stochastic depth's draws). Stopped by its callback at a
// step whose next forward was already queued, then resumed, it is still that run: the
// checkpoint saves the RNG before that batch's draws. A diverging run stops at the same
// step with the same message, its log the same. On the emulator a read-back in line
// lands only when the host waits past it, so a host that read the loss before waiting
// would read the last step's.
TEST(CudaTrain, TheNextForwardQueuedBeforeAStepIsReadIsTheStepByStepRun) {
  REQUIRE_GPU();
  test::TempDir dir("gpu_pipeline");
  auto options = [&](const std::string& task, bool pipeline, const std::string& out) {
    TrainOptions o = test::small_run(task, dir, out, Device::cuda);
    o.pipeline = pipeline;
    return o;
  };
  auto weights = [&](const std::string& out) { return test::run_weights(dir.file(out)); };
  for (const std::string task : {"causal_lm", "mlm", "vision"}) {
    SCOPED_TRACE(task);
    train(options(task, false, task + "-steps"));
    train(options(task, true, task + "-piped"));
    EXPECT_EQ(test::train_losses(dir.file(task + "-piped")), test::train_losses(dir.file(task + "-steps")));
    EXPECT_EQ(weights(task + "-piped"), weights(task + "-steps"));
    // Stopped after step 3 (neither an evaluation's step nor a checkpoint's: step 4's
    // forward was queued), then resumed.
    TrainOptions split = options(task, true, task + "-split");
    split.on_log = [](const nlohmann::json& line) { return !(line.contains("loss") && line["step"] == 3); };
    EXPECT_TRUE(train(split).interrupted);
    TrainOptions resume = options(task, true, task + "-split");
    resume.resume = true;
    train(resume);
    EXPECT_EQ(test::train_losses(dir.file(task + "-split")), test::train_losses(dir.file(task + "-steps")));
    EXPECT_EQ(weights(task + "-split"), weights(task + "-steps"));
  }
  std::string said[2];
  for (const bool pipeline : {false, true}) {
    TrainOptions o = options("causal_lm", pipeline, pipeline ? "diverge-piped" : "diverge-steps");
    o.run.train.schedule = Schedule::constant;
    o.run.train.lr = 1e30f;  // step 1's update puts the weights near 1e30: step 2's loss is NaN
    try {
      train(o);
    } catch (const Error& e) {
      said[pipeline] = e.what();
    }
  }
  EXPECT_NE(said[0].find("training diverged: loss is"), std::string::npos) << said[0];
  EXPECT_NE(said[0].find("at step 2"), std::string::npos) << said[0];
  EXPECT_EQ(said[1], said[0]);
  EXPECT_EQ(test::train_losses(dir.file("diverge-piped")), test::train_losses(dir.file("diverge-steps")));
  EXPECT_EQ(test::read_jsonl(dir.file("diverge-piped") + "/metrics.jsonl").size(), 1u);
}

// Gradient accumulation on the device (train.grad_accum): a step's batch in four pieces,
// the first forwarded ahead by the pipeline, is the step taken whole, in fp32 and bf16 (only
// the weight gradients' sums round differently: close, and not the same bits), and a run
// in pieces stopped with its next first piece queued resumes to the bit. A GPU run in
// pieces holds less device memory (the summary's peak, each run a process of its own).
TEST(CudaTrain, APieceAtATimeIsTheWholeBatch) {
  REQUIRE_GPU();
  Fp32Again restore;
  test::TempDir dir("gpu_accum");
  auto options = [&](const std::string& task, int pieces, const std::string& out) {
    TrainOptions o = test::small_run(task, dir, out, Device::cuda);
    o.run.train.grad_accum = pieces;  // the LM's pieces are a row each, vision's four
    return o;
  };
  auto weights = [&](const std::string& out) { return test::run_weights(dir.file(out)); };
  for (const Precision p : {Precision::fp32, Precision::bf16}) {
    use_precision(Device::cuda, p);
    for (const std::string task : {"causal_lm", "mlm", "vision"}) {
      const std::string name = task + (p == Precision::bf16 ? "-bf16" : "-fp32");
      SCOPED_TRACE(name);
      train(options(task, 1, name + "-1"));
      train(options(task, 4, name + "-4"));
      const std::vector<double> whole = test::train_losses(dir.file(name + "-1")),
                                pieces = test::train_losses(dir.file(name + "-4"));
      ASSERT_EQ(pieces.size(), whole.size());
      for (size_t i = 0; i < whole.size(); ++i) EXPECT_NEAR(pieces[i], whole[i], 1e-5 * whole[i]) << "step " << i + 1;
      const Vec w1 = weights(name + "-1"), w4 = weights(name + "-4");
      EXPECT_TRUE(test::all_close(w4.data(), w1.data(), w1.size(), 2e-5f, 1e-4f, "weights"));
      EXPECT_NE(w4, w1) << "the pieces' sums round as the whole's: were the pieces taken?";
      // Stopped after step 3 (step 4's first piece queued ahead), then resumed.
      TrainOptions split = options(task, 4, name + "-split");
      split.on_log = [](const nlohmann::json& line) { return !(line.contains("loss") && line["step"] == 3); };
      EXPECT_TRUE(train(split).interrupted);
      TrainOptions resume = options(task, 4, name + "-split");
      resume.resume = true;
      train(resume);
      EXPECT_EQ(test::train_losses(dir.file(name + "-split")), pieces);
      EXPECT_EQ(weights(name + "-split"), w4);
    }
  }
  std::vector<double> peak;
  for (const int pieces : {1, 4}) {
    const auto r = test::run_command(test::gmlp_exe() + " train --device cuda --task vision --data " +
                                     dir.file("images") + " --set model.d_model=16 --set model.d_ffn=64" +
                                     " --batch-size 32 --steps 2 --no-progress --grad-accum " + std::to_string(pieces) +
                                     " --out " + dir.file("peak" + std::to_string(pieces)) + " 2>&1");
    ASSERT_EQ(r.exit_code, 0) << r.output;
    std::smatch m;
    ASSERT_TRUE(std::regex_search(r.output, m, std::regex("\ndevice memory: ([0-9.]+) MiB at the most\n"))) << r.output;
    peak.push_back(std::stod(m[1]));
  }
  EXPECT_LT(peak[1], peak[0]);
}

// A batch whose activations do not fit the device ends the run before its first step
// with what to do (the emulator's device given 40 MiB, GMLP_CUDA_EMULATOR_MEMORY_MIB),
// no checkpoint written; in four pieces the same run fits. The host-only switch: the
// allocations are what is tested, not the values.
TEST(CudaCli, ABatchTooLargeForTheDeviceSaysToTakeItInPieces) {
  REQUIRE_GPU();
  if (!std::getenv("GMLP_CUDA_EMULATOR")) GTEST_SKIP() << "the emulator's device is given 40 MiB; a GPU's is not capped";
  test::TempDir dir("gpu_oom");
  const std::string run = "GMLP_CUDA_EMULATOR_MEMORY_MIB=40 GMLP_CUDA_EMULATOR_HOST_ONLY=1 " + test::gmlp_exe() +
                          " train --device cuda --data " + test::kGplText +
                          " --set model.d_model=64 --set model.d_ffn=256 --set model.n_layers=2"
                          " --set model.seq_len=128 --batch-size 64 --steps 1 --no-progress --out ";
  const auto whole = test::run_command(run + dir.file("run") + " 2>&1");
  EXPECT_EQ(whole.exit_code, 1) << whole.output;
  EXPECT_NE(whole.output.find("the device ran out of memory making room for the activations of a training batch of "
                              "64 x 128 (CUDA: cannot allocate"),
            std::string::npos)
      << whole.output;
  EXPECT_NE(whole.output.find("take each step's batch in pieces (--grad-accum K"), std::string::npos) << whole.output;
  EXPECT_FALSE(std::filesystem::exists(state_file(dir.file("run"))));
  EXPECT_FALSE(std::filesystem::exists(model_file(dir.file("run"))));
  const auto pieces = test::run_command(run + dir.file("run") + " --grad-accum 4 2>&1");
  EXPECT_EQ(pieces.exit_code, 0) << pieces.output;
  EXPECT_TRUE(std::filesystem::exists(model_file(dir.file("run"))));
}

// GMLP_CUDA_PROFILE=1: when the process ends, every op the backend ran, with its calls
// and device time, in a table whose shares add up to the whole; the counts are the
// model's own (each forward embeds once and runs every layer's SGU once). Off, nothing
// is printed; a bad value is an error naming the variable, before anything is written.
TEST(CudaCli, AnOpProfileListsEveryOpTheRunIssued) {
  REQUIRE_GPU();
  test::TempDir dir("op_profile");
  const std::string run = test::gmlp_exe() + " train --device cuda --data " + test::kGplText +
                          " --steps 2 --eval-every 100 --batch-size 2 --no-progress --set model.d_model=16"
                          " --set model.d_ffn=32 --set model.n_layers=3 --set model.seq_len=16 --out ";
  auto r = test::run_command("GMLP_CUDA_PROFILE=1 " + run + dir.file("on") + " 2>&1");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  std::smatch head;
  ASSERT_TRUE(std::regex_search(r.output, head, std::regex("gmlp: device time per op \\(GMLP_CUDA_PROFILE\\): ([0-9]+) "
                                                           "ops, ([0-9.]+) ms in them of the ([0-9.]+) ms")))
      << r.output;
  std::map<std::string, long> calls;
  double share = 0;
  long all = 0;
  const std::regex row("\n  ([a-z_0-9]+) +([0-9]+) +([0-9.]+) +([0-9.]+) +([0-9.]+)%");
  for (auto it = std::sregex_iterator(r.output.begin(), r.output.end(), row); it != std::sregex_iterator(); ++it) {
    calls[(*it)[1].str()] = std::stol((*it)[2].str());
    all += std::stol((*it)[2].str());
    share += std::stod((*it)[5].str());
  }
  EXPECT_EQ(all, std::stol(head[1].str())) << r.output;
  EXPECT_NEAR(share, 100.0, 0.1 * double(calls.size())) << r.output;
  EXPECT_LE(std::stod(head[2].str()), std::stod(head[3].str()) * 1.001) << "the ops lie within the span";
  for (const char* op : {"embedding_forward", "sgu_forward", "sgu_backward_mix", "embedding_backward", "cross_entropy",
                         "adamw_update", "upload"})
    EXPECT_GT(calls[op], 0) << op << " missing from\n" << r.output;
  EXPECT_EQ(calls["sgu_forward"], 3 * calls["embedding_forward"]) << r.output;
  EXPECT_EQ(calls["sgu_backward_mix"], 3 * calls["embedding_backward"]) << r.output;
  EXPECT_EQ(calls["embedding_backward"], 2) << "one backward per step";

  r = test::run_command(run + dir.file("off") + " 2>&1");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(r.output.find("device time per op"), std::string::npos) << r.output;

  r = test::run_command("GMLP_CUDA_PROFILE=yes " + run + dir.file("bad") + " 2>&1");
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_NE(r.output.find("gmlp: error: GMLP_CUDA_PROFILE: 'yes' is not 1"), std::string::npos) << r.output;
  EXPECT_FALSE(std::filesystem::exists(dir.file("bad")));
}

// The emulator's host-only switch (tests/cuda_emu/README.md): launches, products and
// uploads beside counted and skipped, so that a run times gmlp's own side of each step,
// and the time the device would wait for the host summed; a value other than 0 or 1
// ends the run naming the variable.
TEST(CudaCli, TheEmulatorTimesTheHostAloneOnRequest) {
  REQUIRE_GPU();
  if (!std::getenv("GMLP_CUDA_EMULATOR")) GTEST_SKIP() << "a switch of the emulator's: a GPU runs every launch";
  const std::string bench = test::gmlp_exe() + " bench --device cuda --config " + test::source_dir() +
                            "/configs/tiny.json --mode train --warmup 1 --repeats 2 --set model.n_layers=2 2>&1";
  auto r = test::run_command("GMLP_CUDA_EMULATOR_HOST_ONLY=1 " + bench);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  std::smatch m;
  ASSERT_TRUE(std::regex_search(r.output, m, std::regex("host only\\): ([0-9]+) launches, ([0-9]+) matrix products")))
      << r.output;
  EXPECT_GT(std::stol(m[1].str()), 0) << r.output;
  EXPECT_GT(std::stol(m[2].str()), 0) << r.output;
  // The launches by kernel, a line each, add up to them (AdamW's one among them).
  long by_kernel = 0;
  bool adamw = false;
  const std::regex line("host only\\): ([0-9]+) launches of ([^\\n]+)");
  for (auto it = std::sregex_iterator(r.output.begin(), r.output.end(), line); it != std::sregex_iterator(); ++it) {
    by_kernel += std::stol((*it)[1].str());
    adamw = adamw || (*it)[2].str() == "k_adamw";
  }
  EXPECT_EQ(by_kernel, std::stol(m[1].str())) << r.output;
  EXPECT_TRUE(adamw) << r.output;
  // A vision run from files sends every step's images up beside the device's work (the
  // first step's, and then each next one's while the step before runs: src/train/
  // batch_ahead.h); the device's idle time between steps is counted.
  test::TempDir dir("host_only_vision");
  test::write_vision_set(dir.file("data"));
  r = test::run_command("GMLP_CUDA_EMULATOR_HOST_ONLY=1 " + test::gmlp_exe() + " train --device cuda --data " +
                        dir.file("data") +
                        " --task vision --set model.d_model=16 --set model.d_ffn=32"
                        " --set model.n_layers=2 --batch-size 16 --steps 6 --eval-every 100 --no-progress --out " +
                        dir.file("run") + " 2>&1");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  ASSERT_TRUE(std::regex_search(r.output, m,
                                std::regex("matrix products and ([0-9]+) uploads beside skipped; the "
                                           "device waited for the host ([0-9]+) times, ([0-9.]+) ms")))
      << r.output;
  EXPECT_EQ(std::stol(m[1].str()), 6) << r.output;
  EXPECT_GE(std::stol(m[2].str()), 6) << "at least once after each step's read\n" << r.output;
  // A setting the emulator does not understand ends the run with status 2, not an abort.
  r = test::run_command("GMLP_CUDA_EMULATOR_HOST_ONLY=yes " + bench);
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("GMLP_CUDA_EMULATOR_HOST_ONLY=yes: expected 0 or 1"), std::string::npos) << r.output;
  r = test::run_command("GMLP_CUDA_EMULATOR_MEMORY_MIB=lots " + bench);
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("GMLP_CUDA_EMULATOR_MEMORY_MIB=lots: expected a positive number of MiB"), std::string::npos)
      << r.output;
}

// `gmlp bench --grad-accum K` takes each step's batch in K pieces, as `gmlp train` does:
// K times the products of a step (each piece's forward and backward), and the
// activations of a batch K times smaller (the backend's peak). On the emulator, host
// only: every launch counted and skipped.
TEST(CudaCli, ABenchInPiecesTakesEachStepInPieces) {
  REQUIRE_GPU();
  if (!std::getenv("GMLP_CUDA_EMULATOR")) GTEST_SKIP() << "counts the emulator's skipped products";
  struct Run {
    long products;
    double peak_mb;
  };
  auto run = [](int k) {
    const auto r = test::run_command("GMLP_CUDA_EMULATOR_HOST_ONLY=1 " + test::gmlp_exe() +
                                     " bench --device cuda --config " + test::source_dir() +
                                     "/configs/tiny.json --mode train --warmup 1 --repeats 2 --set model.n_layers=2"
                                     " --batch-size 8 --json --grad-accum " +
                                     std::to_string(k) + " 2>&1");
    EXPECT_EQ(r.exit_code, 0) << r.output;
    std::smatch m;
    EXPECT_TRUE(std::regex_search(r.output, m, std::regex("launches, ([0-9]+) matrix products"))) << r.output;
    const auto j = nlohmann::json::parse(r.output.substr(r.output.find('{')));
    EXPECT_EQ(j["grad_accum"].get<int>(), k) << r.output;
    return Run{m.empty() ? 0 : std::stol(m[1].str()), j["device_peak_mb"].get<double>()};
  };
  const Run whole = run(1), pieces = run(4);
  // The peak's own 8 products (gemm_peak_gflops) are taken once in both.
  EXPECT_GT(pieces.products, 3 * whole.products) << whole.products << " then " << pieces.products;
  EXPECT_LT(pieces.peak_mb, 0.6 * whole.peak_mb) << whole.peak_mb << " MiB then " << pieces.peak_mb;
}

// `gmlp bench` under GMLP_CUDA_PROFILE=1 times its timed steps alone: not the warmup,
// not the model's set-up, not the 2048- and 4096-square products it measures the
// device's peak with. On a GPU only (CudaGpuOnly is not among the emulator's suites:
// that peak measurement takes hours there).
TEST(CudaGpuOnly, ABenchProfilesItsTimedStepsAlone) {
  REQUIRE_GPU();
  const auto r = test::run_command("GMLP_CUDA_PROFILE=1 " + test::gmlp_exe() + " bench --device cuda --config " +
                                   test::source_dir() + "/configs/tiny.json --mode train --warmup 2 --repeats 3"
                                   " --set model.n_layers=2 2>&1");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  std::map<std::string, long> calls;
  const std::regex row("\n  ([a-z_0-9]+) +([0-9]+) +[0-9.]+ +[0-9.]+ +[0-9.]+%");
  for (auto it = std::sregex_iterator(r.output.begin(), r.output.end(), row); it != std::sregex_iterator(); ++it)
    calls[(*it)[1].str()] = std::stol((*it)[2].str());
  EXPECT_EQ(calls["embedding_backward"], 3) << r.output;
  EXPECT_EQ(calls["sgu_forward"], 2 * 3) << r.output;
  // One read a step, of the loss and the gradient norm together (Model::read_step): a
  // copy queued behind the step's work (download_queued), then waited for; no other read.
  EXPECT_EQ(calls["download_queued"], 3) << "a timed step reads back its loss and norm once\n" << r.output;
  EXPECT_EQ(calls.count("download"), 0u) << "and nothing else\n" << r.output;
}

// Products over operands of more than 2^31 elements, as a large batch's training step
// makes them (U = h W1^T of [M, f], its weight gradient summing M rows, and the
// out-projection reading [M, g]): cuBLAS and cuBLASLt take each dimension as an int,
// and what lies past 2^31 elements is theirs to index. M = 2^21 + 9 rows of 1,032
// channels: U's 2.16e9 values. Rows at U's start, middle and end, and a few of the
// weight gradient's sums over all M rows, against double sums of the same bf16 values.
// On a GPU only (some 5 GB on the device; hours on the emulator).
TEST(CudaGpuOnly, ProductsPastTwoToThe31ElementsAreTheCpus) {
  REQUIRE_GPU();
  using U16 = std::vector<uint16_t>;
  const int M = (1 << 21) + 9, K = 64, N = 1032, Nout = 8;
  ASSERT_GT(int64_t(M) * N, int64_t(1) << 31);
  const U16 h = bf16_of(randn(size_t(M) * K, 80)), W = bf16_of(randn(size_t(N) * K, 81, 0.2f)),
            W2 = bf16_of(randn(size_t(Nout) * N, 82, 0.1f));
  const Vec b2 = randn(Nout, 83), r = randn(size_t(M) * Nout, 84), dW0 = randn(size_t(N) * K, 85);
  OnDevice d;
  DeviceBuffer<uint16_t> dh(d.be, h.size()), dW(d.be, W.size()), dW2(d.be, W2.size()), U(d.be, size_t(M) * N);
  d.be.upload(dh.data(), h.data(), h.size() * sizeof(uint16_t));
  d.be.upload(dW.data(), W.data(), W.size() * sizeof(uint16_t));
  d.be.upload(dW2.data(), W2.data(), W2.size() * sizeof(uint16_t));
  // U = h W^T, rounded to bf16.
  d.be.gemm_bf16(false, true, M, N, K, dh.data(), K, dW.data(), K, U.data(), N);
  U16 Uh(size_t(M) * N);
  d.be.download(Uh.data(), U.data(), Uh.size() * sizeof(uint16_t));
  for (const int row : {0, M / 2, M - 1})
    for (int j = 0; j < N; ++j) {
      double want = 0;
      for (int k = 0; k < K; ++k)
        want += double(ops::from_bf16(h[size_t(row) * K + k])) * ops::from_bf16(W[size_t(j) * K + k]);
      const float got = ops::from_bf16(Uh[size_t(row) * N + j]);
      ASSERT_NEAR(got, want, 1e-4 + 8e-3 * std::abs(want)) << "U row " << row << " column " << j;
    }
  // The weight gradient's form: dW = 0.5 dW0 + U^T h, a sum over all M rows of U.
  float* g = d.up(dW0);
  d.be.gemm_bf16(true, false, N, K, M, 1.f, U.data(), N, dh.data(), K, 0.5f, g, K);
  const Vec gh = d.down(g, dW0.size());
  for (const auto& [j, k] : {std::pair{0, 0}, {N / 2, 17}, {N - 1, K - 1}}) {
    double want = 0.5 * dW0[size_t(j) * K + k], mag = std::abs(want);
    for (int64_t row = 0; row < M; ++row) {
      const double t = double(ops::from_bf16(Uh[size_t(row) * N + j])) * ops::from_bf16(h[size_t(row) * K + k]);
      want += t;
      mag += std::abs(t);
    }
    EXPECT_NEAR(gh[size_t(j) * K + k], want, 1e-4 * mag) << "dW " << j << ", " << k;
  }
  // The out-projection's form through cuBLASLt: y = r + U W2^T + b2, U read as [M, N].
  float* y = d.up(Vec(r.size()));
  d.be.linear_residual_bf16(U.data(), M, N, dW2.data(), d.up(b2), Nout, d.up(r), y);
  const Vec yh = d.down(y, r.size());
  for (const int row : {0, M / 2, M - 1})
    for (int o = 0; o < Nout; ++o) {
      double want = double(r[size_t(row) * Nout + o]) + b2[o], mag = std::abs(want);
      for (int j = 0; j < N; ++j) {
        const double t = double(ops::from_bf16(Uh[size_t(row) * N + j])) * ops::from_bf16(W2[size_t(o) * N + j]);
        want += t;
        mag += std::abs(t);
      }
      EXPECT_NEAR(yh[size_t(row) * Nout + o], want, 1e-4 * mag) << "y row " << row << " output " << o;
    }
}

TEST(CudaGenerate, CachedDecodingOfACudaModelEqualsItsForward) {
  REQUIRE_GPU();
  for (const char* name : {"lm", "lm_toeplitz", "lm_amlp"}) {
    ModelConfig c;
    for (const auto& v : variants())
      if (v.name == name) c = config_of(v);
    auto gpu = make(c, backend_for(Device::cuda));
    TestBatch tb(c, 1, 31);
    NoGrad no_grad(*gpu);
    Decoder dec(*gpu);
    const int T = c.seq_len, V = c.vocab_size;
    const float* first = dec.prefill(tb.tokens.data(), 4);
    Vec got(first, first + V);
    for (int t = 4; t < T; ++t) {
      // The forward over positions [0, t) on the device: its last row is what the decoder saw.
      gpu->forward(tb.tokens.data(), nullptr, T, 1, t);
      const float* want = gpu->logits() + size_t(t - 1) * V;
      EXPECT_TRUE(test::all_close(got.data(), want, size_t(V), 1e-4f, 1e-3f, std::string(name) + " t=" +
                                                                                  std::to_string(t)));
      const float* next = dec.step(tb.tokens[size_t(t)]);
      got.assign(next, next + V);
    }
  }
}

// The decoder of a CUDA model keeps its caches on the device. Against the CPU decoder
// on the same weights, for every causal variant: three streams prefilled to different
// lengths, then stepped together in changing subsets until their windows are full.
TEST(CudaGenerate, StreamsSteppedTogetherOnTheDeviceMatchTheCpuDecoder) {
  REQUIRE_GPU();
  for (const auto& v : variants()) {
    const ModelConfig c = config_of(v);
    if (!Decoder::supports(c)) continue;
    auto cpu = make(c, cpu_backend());
    auto gpu = make(c, backend_for(Device::cuda));
    const int n = c.seq_len, V = c.vocab_size, S = 3;
    TestBatch tb(c, S, 41);
    Decoder a(*cpu, S), b(*gpu, S);
    const int first[S] = {1, 7, 3};
    for (int k = 0; k < S; ++k) {
      const int32_t* seq = tb.tokens.data() + size_t(k) * n;
      const float* x = a.prefill(seq, first[k], k);
      const float* y = b.prefill(seq, first[k], k);
      ASSERT_TRUE(test::all_close(y, x, size_t(V), 1e-4f, 1e-3f, v.name + " prefill " + std::to_string(k)));
    }
    for (int round = 0; round < 2 * n; ++round) {
      std::vector<int> which;
      Ids tokens;
      for (int k = 0; k < S; ++k)
        if (a.length(k) < n && (k + round) % 4 != 0) which.push_back(k);
      if (which.empty()) continue;
      for (int k : which) tokens.push_back(tb.tokens[size_t(k) * n + size_t(a.length(k))]);
      const float* x = a.step(tokens.data(), which.data(), int(which.size()));
      const float* y = b.step(tokens.data(), which.data(), int(which.size()));
      for (int k : which)
        ASSERT_TRUE(test::all_close(y + size_t(k) * V, x + size_t(k) * V, size_t(V), 1e-4f, 1e-3f,
                                    v.name + " stream " + std::to_string(k) + " at " + std::to_string(a.length(k))));
    }
    for (int k = 0; k < S; ++k) EXPECT_EQ(b.length(k), n) << v.name;
  }
}

// Mixed precision: products with bf16 inputs (8 bits of mantissa) and fp32
// accumulation. Ten AdamW steps of every variant stay close to the CPU's float32 run:
// the losses within 2% (bf16 rounds each input to ~0.4%; sums of many products average
// that out), and the products measurably not float32 (else the path is not taken).
void bf16_steps_stay_near_the_float32_run(Device d, const std::vector<std::string>& only = {}) {
  Fp32Again restore{{d}};
  for (const auto& v : variants()) {
    if (!only.empty() && std::find(only.begin(), only.end(), v.name) == only.end()) continue;
    const ModelConfig c = config_of(v);
    TestBatch tb(c, 3, 22, v.T);
    auto ref = make(c, cpu_backend());  // first: on the CPU the precision is the process's
    AdamW oref(*ref, train_config());
    const auto lc = train_steps(*ref, oref, tb.batch, 10);
    use_precision(d, Precision::bf16);
    auto m = make(c, backend_for(d));
    AdamW om(*m, train_config());
    const auto lb = train_steps(*m, om, tb.batch, 10);
    use_precision(d, Precision::fp32);
    bool differs = false;
    for (size_t s = 0; s < lc.size(); ++s) {
      EXPECT_NEAR(lb[s], lc[s], 2e-2 * std::fabs(lc[s])) << v.name << " step " << s + 1;
      differs = differs || std::fabs(lb[s] - lc[s]) > 1e-5 * std::fabs(lc[s]);
    }
    EXPECT_TRUE(differs) << v.name << ": bf16 gave the float32 losses; were the products rounded at all?";
  }
}

// Under bf16 a GPU training step holds each layer's U and F in bf16 and no float U or F
// (block.h; a forward without gradients takes its float U and F in the bf16 ones'
// bytes, model.cpp), and for the bf16 products the LayerNorm's output, S (and G), dF
// and dS (and, split, dG) in bf16 ([M, d], [M, s], [M, g], [M, s]) where fp32 holds dS
// in float, and each layer's proj_in and proj_out weights in bf16: of the memory a
// model holds after a forward and backward, M f 2 L + M g 2 (L - 2) - 2 M (d + g) +
// 4 M g - 2 L (f d + d s) bytes fewer than in fp32 (s = g, the branch channels), less the
// copies of each layer's spatial W that its products read (ops.h's spatial_w16_head),
// everything else the same.
TEST(CudaBf16, ATrainingArenaHoldsUAndFInHalfTheBytes) {
  REQUIRE_GPU();
  ModelConfig c = tiny(Task::causal_lm);
  c.n_layers = 4;
  const int B = 3, M = B * c.seq_len, d = c.d_model, f = c.d_ffn, g = c.gate_channels(), L = c.n_layers;
  Backend& be = backend_for(Device::cuda);
  Fp32Again restore;
  ScopedEnv fast("GMLP_CUDA_BF16_GEMM", "fast");  // native products would grow a scratch of their own
  auto held = [&](Precision p) {
    use_precision(Device::cuda, p);
    const size_t before = be.bytes_in_use();
    auto m = make(c, be);
    TestBatch tb(c, B, 5);
    m->zero_grad();
    m->forward(tb.batch);
    m->backward();
    return int64_t(be.bytes_in_use()) - int64_t(before);
  };
  held(Precision::fp32);  // the ops' scratch area grows to its size here, once
  const int64_t fp32 = held(Precision::fp32), bf16 = held(Precision::bf16);
  // bf16 keeps each layer's h and G in bf16 besides (block.h): 2 L M (d + g) bytes.
  EXPECT_EQ(fp32 - bf16,
            int64_t(M) * f * 2 * L + int64_t(M) * g * 2 * (L - 2) - int64_t(2) * M * (d + g) + int64_t(4) * M * g -
                int64_t(2) * L * (f + g) * d - int64_t(2) * L * M * (d + g) -
                int64_t(2) * L * c.sgu_heads * ops::spatial_w16_head(c.seq_len))
      << "fp32 " << fp32 << " bytes, bf16 " << bf16;
}


TEST(CudaBf16, TenAdamWStepsOfEveryVariantStayNearTheFloat32Run) {
  REQUIRE_GPU();
  ScopedEnv fast("GMLP_CUDA_BF16_GEMM", nullptr);  // the default, whatever the caller set
  bf16_steps_stay_near_the_float32_run(Device::cuda);
}

TEST(CudaBf16, ABadProductChoiceIsNamedAndWritesNothing) {
  REQUIRE_GPU();
  test::TempDir dir("bf16gemm");
  const std::pair<std::string, std::string> bad[] = {
      {"GMLP_CUDA_BF16_GEMM=bogus", "GMLP_CUDA_BF16_GEMM: 'bogus' is not one of fast, native"},
      {"GMLP_CUDA_LT=maybe", "GMLP_CUDA_LT: 'maybe' is not on or off"},
      {"GMLP_CUDA_LN_WARP_COLUMNS=wide", "GMLP_CUDA_LN_WARP_COLUMNS: 'wide' is not a number of channels from 0 to"},
      {"GMLP_CUDA_LN_WARP_COLUMNS=5000", "GMLP_CUDA_LN_WARP_COLUMNS: '5000' is not a number of channels from 0 to"},
      {"GMLP_CUDA_SPATIAL_COMBINE=sometimes", "GMLP_CUDA_SPATIAL_COMBINE: 'sometimes' is not on or off"}};
  for (const auto& [env, message] : bad) {
    const auto r = test::run_command(env + " " + test::gmlp_exe() + " train --device cuda --precision bf16 --steps 1 " +
                                     "--data " + test::kGplText + " --out " + dir.file("run") + " 2>&1");
    EXPECT_EQ(r.exit_code, 1) << r.output;
    EXPECT_NE(r.output.find("gmlp: error: " + message), std::string::npos) << r.output;
    EXPECT_FALSE(std::filesystem::exists(dir.file("run")));
  }
}

// The in-projection's bf16 products read a copy of its weight rounded at each training
// forward: after the weights change (here on the host, as a checkpoint's load or a
// user's edit would; AdamW's steps change them on the device), a training forward and
// backward are, to the bit, those of a model made with the new weights. A copy made
// once and kept gives the old weights' numbers.
TEST(CudaBf16, TheProductsTakeTheWeightsOfThisStep) {
  REQUIRE_GPU();
  ScopedEnv fast("GMLP_CUDA_BF16_GEMM", nullptr);
  Fp32Again restore;
  use_precision(Device::cuda, Precision::bf16);
  const ModelConfig c = config_of(variants()[0]);
  Backend& be = backend_for(Device::cuda);
  TestBatch tb(c, 3, 26);
  auto a = make(c, be);
  a->zero_grad();
  a->forward(tb.batch);
  a->backward();
  float* w = a->weights();
  for (size_t i = 0; i < a->num_params(); ++i) w[i] *= 1.5f;
  auto b = make(c, be);
  std::copy(w, w + a->num_params(), b->weights());
  double loss[2];
  for (Model* m : {a.get(), b.get()}) {
    m->zero_grad();
    loss[m == b.get()] = m->forward(tb.batch);
    m->backward();
  }
  EXPECT_EQ(loss[0], loss[1]);
  const std::vector<float> ga(a->grads(), a->grads() + a->num_params());
  EXPECT_TRUE(std::equal(ga.begin(), ga.end(), b->grads())) << "the gradients after the weights changed";
}

// Which arena a forward takes under bf16: one without gradients computes in floats even
// in a training arena that holds U and F in bf16 (as in an arena of its own, so that a
// validation loss does not depend on where it ran), and a model whose training arena
// was made under fp32 holds them in bf16 once it trains under bf16.
TEST(CudaBf16, ForwardsWithoutGradientsAndPrecisionChangesTakeTheRightArena) {
  REQUIRE_GPU();
  ScopedEnv fast("GMLP_CUDA_BF16_GEMM", nullptr);
  Fp32Again restore;
  // Two layers (the float U and F in the bf16 ones' bytes), aMLP (F in its float dF) and
  // one layer (U and F in slots of their own).
  ModelConfig amlp = config_of(variants()[0]), one = amlp;
  amlp.d_attn = 8;
  one.n_layers = 1;
  // And vision, whose training forwards cut their patches into bf16 (model.cpp).
  for (const ModelConfig& c : {config_of(variants()[0]), amlp, one, tiny(Task::vision)}) {
    SCOPED_TRACE("d_attn " + std::to_string(c.d_attn) + ", " + std::to_string(c.n_layers) + " layers");
    Backend& be = backend_for(Device::cuda);
    TestBatch tb(c, 3, 25);
    use_precision(Device::cuda, Precision::bf16);
    auto a = make(c, be), b = make(c, be);
    a->zero_grad();
    a->forward(tb.batch);
    a->backward();  // a's arena now holds U and F in bf16
    double la = 0, lb = 0;
    {
      NoGrad no_grad(*a);
      la = a->forward(tb.batch);
    }
    {
      NoGrad no_grad(*b);
      lb = b->forward(tb.batch);
    }
    EXPECT_EQ(la, lb) << "a forward without gradients in a training arena";
    use_precision(Device::cuda, Precision::fp32);  // the kept arena's forwards take floats, as a new one's
    {
      NoGrad no_grad(*a);
      la = a->forward(tb.batch);
    }
    {
      NoGrad no_grad(*b);
      lb = b->forward(tb.batch);
    }
    EXPECT_EQ(la, lb) << "under fp32, a forward without gradients in a bf16 training arena";
    auto p = make(c, be);
    p->zero_grad();
    p->forward(tb.batch);
    p->backward();  // an arena of floats
    use_precision(Device::cuda, Precision::bf16);
    for (Model* m : {p.get(), b.get()}) {
      m->zero_grad();
      m->forward(tb.batch);
      m->backward();
    }
    EXPECT_TRUE(test::all_close(p->grads(), b->grads(), b->num_params(), 1e-6f, 1e-5f, "after fp32, under bf16"));
  }
}

// A bf16 vision model takes its spatial products with the combine in their tiles when
// asked (GMLP_CUDA_SPATIAL_COMBINE=on), whether its T is a multiple of 8 (MNIST at
// patches of 7: 16) or not (at patches of 4: 49; gMLP-S/16's 196); unset or "off",
// cuBLAS's product and the bias + combine pass. A run taken each way, of a vision model
// and of a causal LM, ends with the same weights: to the bit on the emulator, close on
// a GPU.
TEST(CudaBf16, ASpatialProductTakesTheCombineInItsTilesOnlyWhenAsked) {
  REQUIRE_GPU();
  const bool emulated = std::getenv("GMLP_CUDA_EMULATOR") != nullptr;
  if (emulated) {  // the emulator's count of launches by kernel, every launch skipped
    auto kernels = [](const std::string& mode, int patch) {
      const auto r = test::run_command(
          "GMLP_CUDA_EMULATOR_HOST_ONLY=1 " + (mode.empty() ? "" : "GMLP_CUDA_SPATIAL_COMBINE=" + mode + " ") +
          test::gmlp_exe() + " bench --device cuda --precision bf16 --config " + test::source_dir() +
          "/configs/mnist.json --warmup 0 --repeats 1 --batch-size 8" +
          " --set model.patch_height=" + std::to_string(patch) + " --set model.patch_width=" + std::to_string(patch) +
          " --set model.seq_len=" + std::to_string((28 / patch) * (28 / patch)) + " 2>&1");
      EXPECT_EQ(r.exit_code, 0) << r.output;
      std::smatch m;
      const bool fused = std::regex_search(r.output, m, std::regex("launches of k_mix_then"));
      const bool apart = std::regex_search(r.output, m, std::regex("launches of k_bias_combine"));
      EXPECT_NE(fused, apart) << r.output;
      return fused;
    };
    EXPECT_FALSE(kernels("", 4)) << "T = 49";
    EXPECT_FALSE(kernels("", 7)) << "T = 16";
    EXPECT_TRUE(kernels("on", 4)) << "T = 49";
    EXPECT_TRUE(kernels("on", 7)) << "T = 16";
    EXPECT_FALSE(kernels("off", 4)) << "T = 49";
  }
  Fp32Again restore;
  use_precision(Device::cuda, Precision::bf16);
  test::TempDir dir("gpu_combine");
  for (const std::string task : {"vision", "causal_lm"}) {
    std::vector<Vec> weights;
    for (const std::string mode : {"off", "on"}) {
      ScopedEnv env("GMLP_CUDA_SPATIAL_COMBINE", mode.c_str());
      train(test::small_run(task, dir, task + "-" + mode, Device::cuda));
      weights.push_back(test::run_weights(dir.file(task + "-" + mode)));
    }
    if (emulated)
      EXPECT_EQ(weights[1], weights[0]) << task;
    else
      EXPECT_TRUE(
          test::all_close(weights[1].data(), weights[0].data(), weights[0].size(), 1e-3f, 1e-2f, task + " weights"));
  }
}

// Holding U and F in bf16 moves a model's numbers by their rounding alone. Against the
// CPU with the same products (inputs rounded to nearest: GMLP_CPU_BF16=emulate there,
// the products over bf16 copies here), every SGU variant's loss and gradients after a
// forward and backward differ by what rounding U and F makes (per tensor, relative L2
// within 5%), and by more than float rounding (else nothing was held in bf16). A layer
// reading another's slot, or a backward reading values the forward did not hold, is far
// outside it.
TEST(CudaBf16, HoldingUAndFInBf16MovesTheGradientsByTheirRoundingAlone) {
  REQUIRE_GPU();
  ScopedEnv native("GMLP_CUDA_BF16_GEMM", "native"), emulate("GMLP_CPU_BF16", "emulate");
  Fp32Again restore{{Device::cuda, Device::cpu}};
  use_precision(Device::cpu, Precision::bf16);
  use_precision(Device::cuda, Precision::bf16);
  for (const auto& v : variants()) {
    const ModelConfig c = config_of(v);
    if (!c.has_sgu()) continue;
    TestBatch tb(c, 3, 24, v.T);
    auto cpu = make(c, cpu_backend());
    auto gpu = make(c, backend_for(Device::cuda));
    cpu->zero_grad();
    gpu->zero_grad();
    const double lc = cpu->forward(tb.batch), lg = gpu->forward(tb.batch);
    cpu->backward();
    gpu->backward();
    EXPECT_NEAR(lg, lc, 1e-2 * std::fabs(lc)) << v.name;
    double most = 0;
    for (const auto& p : cpu->params()) {
      const L2 l2 = l2_distance(gpu->grads() + p.offset, cpu->grads() + p.offset, p.size);
      const double rel = l2.diff / (l2.norm + 1e-30);
      EXPECT_LE(rel, 5e-2) << v.name << " " << p.name;
      most = std::max(most, rel);
    }
    EXPECT_GT(most, 1e-4) << v.name << ": the gradients are the CPU's to float rounding; was nothing held in bf16?";
  }
}

// The products over bf16 copies (GMLP_CUDA_BF16_GEMM=native) against cuBLAS rounding
// float inputs (fast): products of the same inputs rounded to bf16, so every variant's
// loss and gradients agree up to the order of the sums and the rounding rule cuBLAS
// applies (not documented): measured as a relative L2 distance per tensor, 5% allows a
// different rule, or none, not a wrong operand (50-100% off). A loss within 2% of fp32 is too loose to see a batched product that reads
// one row's operand for every row.
TEST(CudaBf16, ProductsOverBf16CopiesGiveWhatCublasRoundingGives) {
  REQUIRE_GPU();
  Fp32Again restore;
  for (const auto& v : variants()) {
    const ModelConfig c = config_of(v);
    TestBatch tb(c, 3, 23, v.T);
    std::vector<Vec> grads;
    std::vector<double> losses;
    std::vector<ParamInfo> layout;
    for (const char* how : {"fast", "native"}) {
      ScopedEnv env("GMLP_CUDA_BF16_GEMM", how);
      use_precision(Device::cuda, Precision::bf16);
      auto m = make(c, backend_for(Device::cuda));
      m->zero_grad();
      losses.push_back(m->forward(tb.batch));
      m->backward();
      grads.emplace_back(m->grads(), m->grads() + m->num_params());
      layout = m->params();
    }
    EXPECT_NEAR(losses[1], losses[0], 1e-2 * std::fabs(losses[0])) << v.name;
    for (const auto& p : layout) {
      const L2 l2 = l2_distance(grads[1].data() + p.offset, grads[0].data() + p.offset, p.size);
      EXPECT_LE(l2.diff, 5e-2 * l2.norm + 1e-7) << v.name << " " << p.name;
    }
  }
}

TEST(CpuBf16, EmulatedTenAdamWStepsOfEveryVariantStayNearTheFloat32Run) {
  ScopedEnv env("GMLP_CPU_BF16", "emulate");
  bf16_steps_stay_near_the_float32_run(Device::cpu);
}

TEST(CpuBf16, TenAdamWStepsOfEveryVariantOnTheInstructionsStayNearTheFloat32Run) {
  if (!ops::cpu_has_bf16()) GTEST_SKIP() << "this CPU has neither AVX512-BF16 nor AMX-BF16";
  ScopedEnv env("GMLP_CPU_BF16", nullptr);
  bf16_steps_stay_near_the_float32_run(Device::cpu);
}

// A model trained with its gradients sent through DataParallel's reduction path on a
// job of one process (reduce_alone), against the same model trained without: an
// all-reduce over one rank is a copy, so every gradient and weight must agree exactly.
void reduction_path_at_world_size_one_changes_no_number(Backend& be) {
  ASSERT_EQ(world().size(), 1) << "run the test binary without mpirun";
  ModelConfig c;
  for (const auto& v : variants())
    if (v.name == "lm") c = config_of(v);
  c.d_model = 256;  // several 1 MiB buckets, started while backward goes on
  c.d_ffn = 1024;
  auto plain = make(c, be);
  auto reduced = make(c, be);
  TestBatch tb(c, 3, 23);
  AdamW op(*plain, train_config()), orr(*reduced, train_config());
  DataParallel dp(world(), *reduced, /*reduce_alone=*/true);
  EXPECT_EQ(dp.describe().find("NCCL") != std::string::npos, !be.host_memory()) << dp.describe();
  for (int s = 0; s < 5; ++s) {
    for (Model* m : {plain.get(), reduced.get()}) {
      const bool via_dp = m == reduced.get();
      const Batch& b = via_dp ? dp.shard(tb.batch) : tb.batch;
      m->zero_grad();
      EXPECT_TRUE(std::isfinite(m->forward(b)));
      m->backward();
      if (via_dp) dp.finish_backward();
      clip_grad_norm(*m, 0.5f);
      (via_dp ? orr : op).step(*m, learning_rate(train_config(), c.d_model, s + 1));
    }
    EXPECT_EQ(std::memcmp(plain->grads(), reduced->grads(), plain->num_params() * sizeof(float)), 0)
        << "step " << s + 1;
  }
  EXPECT_EQ(std::memcmp(plain->weights(), reduced->weights(), plain->num_params() * sizeof(float)), 0);
}

// The CPU half: the gradient hook, the scaling through the backend and the buckets.
TEST(DataParallelAlone, TheReductionPathOnOneProcessChangesNoNumber) {
  reduction_path_at_world_size_one_changes_no_number(cpu_backend());
}

// On a GPU the same path goes through NCCL. A single GPU cannot hold two NCCL ranks, so
// this is what one GPU can show (docs/distributed.md): NCCL at world size 1, with its
// reduction stream and the default stream's wait on it, against no reduction.
TEST(CudaNccl, TheReductionPathAtWorldSizeOneChangesNoNumber) {
  REQUIRE_GPU();
  reduction_path_at_world_size_one_changes_no_number(backend_for(Device::cuda));
}

}  // namespace
}  // namespace gmlp
