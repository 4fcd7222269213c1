// End-to-end tests through the real `gmlp` binary: training lowers the loss, the same
// seed generates the same text, an interrupted run resumes to the same losses, and
// every bad input gets a clear error, a non-zero exit and no half-written output.
#include <gtest/gtest.h>

#include <sys/wait.h>
#include <unistd.h>

#include <csignal>
#include <filesystem>
#include <fstream>
#include <thread>

#include "gmlp/checkpoint.h"
#include "gmlp/files.h"
#include "gmlp/safetensors.h"
#include "gmlp/trainer.h"
#include "ops/ops.h"
#include "test_util.h"

namespace gmlp {
namespace {

namespace fs = std::filesystem;
using test::run_command;

const std::string kText = test::kGplText;
// A model small enough to train 50 steps in about a second.
const std::string kSmall =
    " --set model.d_model=32 --set model.d_ffn=64 --set model.n_layers=2 --set model.seq_len=32"
    " --batch-size 8 --lr 3e-3 --set train.warmup=5 --eval-every 25 --no-progress";

std::string gmlp() { return test::gmlp_exe(); }

using test::read_jsonl;
using test::train_losses;

TEST(EndToEnd, TrainingLowersTheLossAndCheckpointRoundTrips) {
  test::TempDir dir("e2e_train");
  const std::string out = dir.file("run");
  auto r = run_command(gmlp() + " train --data " + kText + " --out " + out + " --steps 50 --log-every 5" + kSmall);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const auto losses = train_losses(out);
  ASSERT_EQ(losses.size(), 10u);
  EXPECT_GT(losses.front(), 4.0) << "a fresh byte model starts near ln(256) = 5.5";
  EXPECT_LT(losses.back(), losses.front() - 1.5) << r.output;
  EXPECT_NE(r.output.find("bits/byte"), std::string::npos) << r.output;

  // The checkpoint is a complete model: inspect lists every tensor; eval scores a file.
  r = run_command(gmlp() + " inspect " + out);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("blocks.1.sgu.spatial.weight"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("[32, 32]"), std::string::npos) << r.output;
  auto model = load_model(model_file(out));
  EXPECT_NE(r.output.find(std::to_string(model->num_params())), std::string::npos) << r.output;
  r = run_command(gmlp() + " eval --model " + out + " --data " + kText + " --json");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const auto ev = nlohmann::json::parse(r.output);
  EXPECT_LT(ev["bits_per_byte"].get<double>(), 8.0);
  EXPECT_GT(ev["tokens"].get<int64_t>(), 30000);
}

TEST(EndToEnd, SameSeedSameText) {
  test::TempDir dir("e2e_gen");
  const std::string out = dir.file("run");
  auto r = run_command(gmlp() + " train --data " + kText + " --out " + out + " --steps 20" + kSmall);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const std::string gen = gmlp() + " generate --model " + out + " --prompt 'The ' --max-tokens 60 --temperature 1";
  auto a = run_command(gen + " --seed 7"), b = run_command(gen + " --seed 7"), c = run_command(gen + " --seed 8");
  ASSERT_EQ(a.exit_code, 0) << a.output;
  EXPECT_EQ(a.output, b.output);
  EXPECT_NE(a.output, c.output);
  EXPECT_EQ(a.output.rfind("The ", 0), 0u) << "the prompt is echoed first";
  EXPECT_GE(a.output.size(), 60u + 4u);
  // Greedy decoding is deterministic whatever the seed.
  auto g1 = run_command(gen + " --temperature 0 --seed 1"), g2 = run_command(gen + " --temperature 0 --seed 2");
  EXPECT_EQ(g1.output, g2.output);
}

TEST(EndToEnd, ResumedRunReproducesUninterruptedLosses) {
  test::TempDir dir("e2e_resume");
  const std::string common = " train --data " + kText + " --steps 30 --log-every 1 --ckpt-every 7" + kSmall;
  auto r = run_command(gmlp() + common + " --out " + dir.file("straight"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  // Stop after 13 steps (between checkpoints: the stop itself checkpoints), then resume.
  r = run_command(gmlp() + common + " --out " + dir.file("split") + " --stop-after 13");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("interrupted after 13 steps"), std::string::npos) << r.output;
  EXPECT_EQ(train_losses(dir.file("split")).size(), 13u);
  r = run_command(gmlp() + " train --out " + dir.file("split") + " --resume --no-progress");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const auto a = train_losses(dir.file("straight")), b = train_losses(dir.file("split"));
  ASSERT_EQ(a.size(), 30u);
  EXPECT_EQ(a, b) << "losses of the resumed run must equal the uninterrupted run's exactly";
  auto ma = load_model(model_file(dir.file("straight"))), mb = load_model(model_file(dir.file("split")));
  EXPECT_TRUE(std::equal(ma->weights(), ma->weights() + ma->num_params(), mb->weights()));
}

// CTest runs everything at 2 threads; at 3 or more, sums combined in thread-finish
// order once made two identical runs log different losses. Run at 3 (the machine may
// have fewer cores: that only makes it slower).
TEST(EndToEnd, RunsAreDeterministicAtThreeThreads) {
  test::TempDir dir("e2e_threads");
  const std::string common = " --threads 3 train --data " + kText + " --steps 25 --log-every 1" + kSmall;
  for (const char* name : {"a", "b"}) {
    auto r = run_command(gmlp() + common + " --out " + dir.file(name));
    ASSERT_EQ(r.exit_code, 0) << r.output;
  }
  std::vector<nlohmann::json> a = read_jsonl(metrics_file(dir.file("a"))), b = read_jsonl(metrics_file(dir.file("b")));
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    for (const char* key : {"loss", "grad_norm", "val_loss"}) {
      if (a[i].contains(key)) {
        EXPECT_EQ(a[i][key], b[i][key]) << key << " at line " << i;
      }
    }
  }
}

TEST(EndToEnd, CtrlCCheckpointsAndResumes) {
  test::TempDir dir("e2e_sigint");
  const std::string out = dir.file("run");
  const std::string common = " train --data " + kText + " --steps 400 --log-every 1 --ckpt-every 1000" + kSmall;
  // Start it as a child we can signal, wait for some progress, then Ctrl-C it.
  const std::string cmd = gmlp() + common + " --out " + out + " > " + dir.file("log") + " 2>&1";
  const pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    execl("/bin/sh", "sh", "-c", ("exec " + cmd).c_str(), (char*)nullptr);
    _exit(127);
  }
  for (int i = 0; i < 600 && (!fs::exists(metrics_file(out)) || train_losses(out).size() < 5); ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  ASSERT_EQ(kill(pid, SIGINT), 0);
  int status = 0;
  ASSERT_EQ(waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(WIFEXITED(status)) << read_file(dir.file("log"));
  EXPECT_EQ(WEXITSTATUS(status), 130) << "Ctrl-C exits 130 after checkpointing\n" << read_file(dir.file("log"));
  const size_t done = train_losses(out).size();
  ASSERT_LT(done, 400u) << "the run finished before the signal arrived";
  ASSERT_TRUE(fs::exists(state_file(out)));
  auto r = run_command(gmlp() + " train --out " + out + " --resume --no-progress");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  r = run_command(gmlp() + common + " --out " + dir.file("straight"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const auto a = train_losses(out), b = train_losses(dir.file("straight"));
  ASSERT_EQ(a.size(), 400u);
  EXPECT_EQ(a, b) << "interrupted at step " << done;
}

// A stop signal may land anywhere in a step, in a product on oneDNN's JIT code too
// (whose products hold signals until they end: products.cpp; without that, about every
// other run aborted with a corrupted heap). Eight runs, each signalled at another moment
// after its first step: every one checkpoints and exits 143. On oneDNN where the build
// has it, whichever library this CPU would choose.
TEST(EndToEnd, SigtermAtAnyMomentOfAStepStopsTheRunCleanly) {
  test::TempDir dir("e2e_sigterm");
  const std::string out = dir.file("run"), log = dir.file("log");
  const std::string env = ops::have_onednn() ? "GMLP_CPU_GEMM=onednn " : "";
  const std::string script =
      "for d in 0 0.013 0.029 0.047 0.071 0.097 0.131 0.173; do rm -rf " + out + "; " + env + gmlp() +
      " --threads 2 train --data " + kText +
      " --set model.d_model=64 --set model.d_ffn=256 --set model.n_layers=2 --set model.seq_len=64"
      " --set train.batch_size=16 --steps 100000 --log-every 1 --eval-every 100000 --no-progress --out " + out +
      " > " + log + " 2>&1 & P=$!; for i in $(seq 500); do [ -s " + metrics_file(out) + " ] && break; sleep 0.02; done; "
      "sleep $d; kill -TERM $P; wait $P; echo \"rc=$? interrupted=$(grep -c 'interrupted after' " + log +
      ") state=$(test -f " + state_file(out) + " && echo yes)\"; done";
  const auto r = run_command(script);
  size_t lines = 0;
  for (size_t p = 0; (p = r.output.find("rc=", p)) != std::string::npos; ++p, ++lines)
    EXPECT_EQ(r.output.substr(p, r.output.find('\n', p) - p), "rc=143 interrupted=1 state=yes") << r.output;
  EXPECT_EQ(lines, 8u) << r.output;
}

// ---- bad input: a clear message naming the culprit, a non-zero exit, nothing written.

struct BadCase {
  std::string name, args, expect;  // expect: a fragment the error must contain
};

class BadTrainInput : public ::testing::TestWithParam<BadCase> {};

TEST_P(BadTrainInput, FailsClearlyAndWritesNothing) {
  test::TempDir dir("bad_train");
  {
    std::ofstream(dir.file("empty.txt"));
    std::ofstream(dir.file("short.txt")) << "too short for a window";
    std::ofstream(dir.file("unknown_key.json")) << R"({"model": {"d_modle": 64}})";
    std::ofstream(dir.file("bad_json.json")) << R"({"model": {"d_model": 64,}})";
    std::ofstream(dir.file("bad_type.json")) << R"({"train": {"steps": "many"}})";
    std::ofstream(dir.file("latin1.txt")) << std::string(300, 'a') + "caf\xe9 " + std::string(300, 'b');
  }
  std::string args = GetParam().args;
  for (std::string key : {"$DIR", "$TEXT"}) {
    const std::string val = key == "$DIR" ? dir.path().string() : kText;
    for (size_t p; (p = args.find(key)) != std::string::npos;) args.replace(p, key.size(), val);
  }
  const std::string out = dir.file("out");
  auto r = run_command(gmlp() + " train --out " + out + " --steps 5 --no-progress " + args);
  EXPECT_NE(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("error"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find(GetParam().expect), std::string::npos) << "expected '" << GetParam().expect << "' in:\n" << r.output;
  EXPECT_FALSE(fs::exists(out)) << "a failed run must not leave a run directory behind";
}

INSTANTIATE_TEST_SUITE_P(
    Cases, BadTrainInput,
    ::testing::Values(BadCase{"missing_corpus", "--data $DIR/nope.txt", "nope.txt"},
                      BadCase{"empty_corpus", "--data $DIR/empty.txt", "empty"},
                      BadCase{"corpus_shorter_than_window", "--data $DIR/short.txt", "window"},
                      BadCase{"odd_d_ffn", "--data $TEXT --set model.d_ffn=51", "'d_ffn' must be even"},
                      BadCase{"n_below_2", "--data $TEXT --set model.seq_len=1", "'seq_len' (n) must be at least 2"},
                      BadCase{"unknown_config_key", "--data $TEXT --config $DIR/unknown_key.json", "unknown key 'd_modle'"},
                      BadCase{"unknown_set_key", "--data $TEXT --set model.layers=3", "unknown key 'layers'"},
                      BadCase{"config_not_json", "--data $TEXT --config $DIR/bad_json.json", "not valid JSON"},
                      BadCase{"config_wrong_type", "--data $TEXT --config $DIR/bad_type.json", "'steps' must be an integer"},
                      BadCase{"bad_tokenizer", "--data $TEXT --tokenizer words", "--tokenizer must be byte, char or a tokenizer JSON file"},
                      BadCase{"negative_lr", "--data $TEXT --set train.lr=-1", "'lr' must be positive"},
                      BadCase{"zero_lr_flag", "--data $TEXT --lr 0", "'lr' must be positive"},
                      BadCase{"zero_batch_flag", "--data $TEXT --batch-size 0", "'batch_size' must be positive"},
                      BadCase{"text_lr_flag", "--data $TEXT --lr fast", "--lr: not a number"},
                      BadCase{"resume_without_run", "--resume", "no training state"},
                      BadCase{"char_corpus_not_utf8", "--data $DIR/latin1.txt --tokenizer char", "latin1.txt"}),
    [](const auto& info) { return info.param.name; });

TEST(BadTrainInput, OutIsAFile) {
  test::TempDir dir("bad_out");
  const std::string file = dir.file("not_a_dir");
  std::ofstream(file) << "keep me";
  auto r = run_command(gmlp() + " train --data " + kText + " --steps 3 --no-progress --out " + file);
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_NE(r.output.find("cannot use '" + file + "' as the run directory"), std::string::npos) << r.output;
  EXPECT_EQ(read_file(file), "keep me");
}

class BadCheckpoint : public ::testing::Test {
 protected:
  void SetUp() override {
    auto r = run_command(gmlp() + " train --data " + kText + " --out " + run_ + " --steps 3 --tokenizer char" + kSmall);
    ASSERT_EQ(r.exit_code, 0) << r.output;
    good_ = read_file(model_file(run_));
  }
  // Runs `generate` on a checkpoint whose bytes are `bytes`; expects a clean failure.
  void expect_rejected(const std::string& bytes, const std::string& fragment) {
    const std::string path = dir_.file("bad.safetensors");
    write_file_atomic(path, bytes);
    auto r = run_command(gmlp() + " generate --model " + path + " --max-tokens 5");
    EXPECT_EQ(r.exit_code, 1) << r.output;
    EXPECT_NE(r.output.find("bad.safetensors"), std::string::npos) << r.output;
    EXPECT_NE(r.output.find(fragment), std::string::npos) << "expected '" << fragment << "' in:\n" << r.output;
  }
  // The good checkpoint with one tensor rewritten by `edit`.
  std::string with_tensor(const std::string& name, const std::string& dtype, std::vector<int64_t> shape) {
    const auto f = SafeTensorsFile::load(model_file(run_));
    SafeTensorsWriter w;
    std::vector<std::vector<float>> keep;
    std::vector<int32_t> ints(1 << 16, 0);
    for (const auto& n : f.names()) {
      keep.push_back(f.read_f32(n));
      if (n == name && dtype == "I32") w.add_i32(n, shape, ints.data());
      else if (n == name) w.add_f32(n, shape, keep.back().data());
      else w.add_f32(n, f.info(n).shape, keep.back().data());
    }
    for (const auto& [k, v] : f.metadata()) w.set_metadata(k, v);
    const std::string path = dir_.file("edited.safetensors");
    w.write(path);
    return read_file(path);
  }
  test::TempDir dir_{"bad_ckpt"};
  std::string run_ = dir_.file("run");
  std::string good_;
};

TEST_F(BadCheckpoint, TruncatedFile) { expect_rejected(good_.substr(0, good_.size() / 2), "truncated"); }
TEST_F(BadCheckpoint, CorruptHeader) {
  std::string b = good_;
  for (size_t i = 8; i < 40; ++i) b[i] = '#';
  expect_rejected(b, "JSON");
}
TEST_F(BadCheckpoint, TooShortToBeSafetensors) { expect_rejected("abc", "bad.safetensors"); }
TEST_F(BadCheckpoint, WrongTensorShape) {
  expect_rejected(with_tensor("blocks.0.sgu.spatial.weight", "F32", {16, 64}), "blocks.0.sgu.spatial.weight");
}
TEST_F(BadCheckpoint, WrongTensorDtype) {
  expect_rejected(with_tensor("blocks.1.proj_in.bias", "I32", {64}), "dtype I32, expected F32");
}
TEST_F(BadCheckpoint, MissingConfigMetadata) {
  const auto f = SafeTensorsFile::load(model_file(run_));
  SafeTensorsWriter w;
  std::vector<std::vector<float>> keep;
  for (const auto& n : f.names()) {
    keep.push_back(f.read_f32(n));
    w.add_f32(n, f.info(n).shape, keep.back().data());
  }
  w.write(dir_.file("nometa.safetensors"));
  expect_rejected(read_file(dir_.file("nometa.safetensors")), "not a gmlp checkpoint");
}
TEST_F(BadCheckpoint, PromptLongerThanWindow) {
  auto r = run_command(gmlp() + " generate --model " + run_ + " --prompt '" + std::string(40, 'a') + "'");
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_NE(r.output.find("longer than the model's window of 32"), std::string::npos) << r.output;
}
TEST_F(BadCheckpoint, CharOutsideVocabulary) {
  auto r = run_command(gmlp() + " generate --model " + run_ + " --prompt 'caf\xc3\xa9'");
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_NE(r.output.find("U+00E9"), std::string::npos) << r.output;
}
TEST_F(BadCheckpoint, ExistingRunIsNotOverwritten) {
  const std::string before = read_file(state_file(run_));
  auto r = run_command(gmlp() + " train --data " + kText + " --out " + run_ + " --steps 3" + kSmall);
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_NE(r.output.find("--resume"), std::string::npos) << r.output;
  EXPECT_EQ(read_file(state_file(run_)), before);
}
TEST_F(BadCheckpoint, ResumeRefusesOptionsThatWouldChangeTheRun) {
  for (const std::string& opt :
       std::vector<std::string>{"--lr 0.1", "--set model.d_model=64", "--data " + kText, "--tokenizer byte"}) {
    auto r = run_command(gmlp() + " train --out " + run_ + " --resume " + opt);
    EXPECT_EQ(r.exit_code, 1) << opt << "\n" << r.output;
    EXPECT_NE(r.output.find("cannot be combined with --resume"), std::string::npos) << opt << "\n" << r.output;
  }
}

TEST_F(BadCheckpoint, BadSamplingOptions) {
  for (auto [opt, says] : std::vector<std::pair<std::string, std::string>>{{"--temperature -1", "temperature"},
                                                                          {"--top-p 0", "top-p"},
                                                                          {"--top-p 1.5", "top-p"},
                                                                          {"--top-k -3", "top-k"},
                                                                          {"--max-tokens -2", "--max-tokens"}}) {
    auto r = run_command(gmlp() + " generate --model " + run_ + " --prompt 'xyz' " + opt);
    EXPECT_EQ(r.exit_code, 1) << opt << "\n" << r.output;
    EXPECT_NE(r.output.find(says), std::string::npos) << opt << "\n" << r.output;
    EXPECT_EQ(r.output.find("xyz"), std::string::npos) << "nothing is generated, not even the prompt\n" << r.output;
  }
}

}  // namespace
}  // namespace gmlp
