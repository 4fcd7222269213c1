// Files and options from elsewhere are untrusted: each malformed input below used to
// crash, exhaust memory or be accepted silently; now each is an Error (or, through the
// CLI, `gmlp: error:` and exit 1) naming the file and the fault.
#include <gtest/gtest.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>

#include "gmlp/checkpoint.h"
#include "gmlp/config.h"
#include "gmlp/error.h"
#include "gmlp/files.h"
#include "gmlp/image.h"
#include "gmlp/labelled.h"
#include "gmlp/model.h"
#include "gmlp/optimizer.h"
#include "gmlp/safetensors.h"
#include "gmlp/tokenizer.h"
#include "test_util.h"

namespace gmlp {
namespace {

using test::error_of;
namespace fs = std::filesystem;

std::string nested(int depth) { return std::string(size_t(depth), '[') + "1" + std::string(size_t(depth), ']'); }

void write_bytes(const std::string& path, const std::string& bytes) {
  std::ofstream(path, std::ios::binary) << bytes;
}

// A safetensors file from its header text and data, with the header length given.
std::string safetensors_bytes(const std::string& header, const std::string& data, uint64_t hlen) {
  std::string out(8, '\0');
  std::memcpy(out.data(), &hlen, 8);
  return out + header + data;
}

std::string gmlp() { return test::gmlp_exe(); }

// A one-layer byte LM of window n, initialised.
std::unique_ptr<Model> small_lm(int n, Spatial spatial = Spatial::full) {
  ModelConfig c;
  c.d_model = 8;
  c.d_ffn = 16;
  c.n_layers = 1;
  c.seq_len = n;
  c.spatial = spatial;
  auto m = std::make_unique<Model>(c);
  Rng rng(1);
  m->init(rng);
  return m;
}

TEST(Untrusted, DeeplyNestedJsonIsRefusedBeforeParsing) {
  // 100,000 levels overflowed the stack (exit 139) in the code that walks and prints JSON.
  const std::string e = error_of([] { parse_json(nested(100000), "x.json"); });
  EXPECT_NE(e.find("x.json: JSON nested deeper than 64 levels"), std::string::npos) << e;
  EXPECT_EQ(parse_json(nested(60), "ok").dump().size(), 121u);  // shallow JSON still parses
  // Brackets inside strings are text, not nesting.
  EXPECT_EQ(parse_json("[\"" + std::string(1000, '[') + "\"]", "s")[0].get<std::string>().size(), 1000u);

  test::TempDir dir("untrusted_json");
  const std::string header = "{\"t\":{\"dtype\":\"F32\",\"shape\":" + nested(100000) + ",\"data_offsets\":[0,4]}}";
  write_bytes(dir.file("deep.safetensors"), safetensors_bytes(header, std::string(4, '\0'), header.size()));
  EXPECT_NE(error_of([&] { SafeTensorsFile::load(dir.file("deep.safetensors")); }).find("nested deeper"),
            std::string::npos);
  write_bytes(dir.file("deep.json"), "{\"model\": {\"class_names\": " + nested(60000) + "}}");
  EXPECT_NE(error_of([&] { RunConfig::load(dir.file("deep.json")); }).find("nested deeper"), std::string::npos);

  // Through the CLI: a deep --set value, a deep tokenizer file.
  auto r = test::run_command(gmlp() + " train --data " + test::kGplText + " --out " + dir.file("run") +
                             " --set 'model.class_names=" + nested(60000) + "' 2>&1");
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_NE(r.output.find("gmlp: error: --set model.class_names: JSON nested deeper"), std::string::npos) << r.output;
  write_bytes(dir.file("tok.json"), "{\"kind\": \"byte\", \"specials\": " + nested(60000) + "}");
  r = test::run_command(gmlp() + " train --data " + test::kGplText + " --out " + dir.file("run") +
                        " --tokenizer " + dir.file("tok.json") + " 2>&1");
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_NE(r.output.find("tok.json"), std::string::npos) << r.output;
  EXPECT_FALSE(fs::exists(dir.file("run")));
}

TEST(Untrusted, TokenizerJsonOfTheWrongTypeIsAnErrorNotACrash) {
  test::TempDir dir("untrusted_tok");
  for (const std::string& body : {std::string("5"), std::string("{\"kind\": 5}")}) {
    write_bytes(dir.file("tok.json"), body);
    const auto r = test::run_command(gmlp() + " train --data " + test::kGplText + " --out " + dir.file("run") +
                                     " --tokenizer " + dir.file("tok.json") + " 2>&1");
    EXPECT_EQ(r.exit_code, 1) << body << "\n" << r.output;  // exit 2 was an internal error
    EXPECT_NE(r.output.find("gmlp: error:"), std::string::npos) << r.output;
    EXPECT_NE(r.output.find("--tokenizer '" + dir.file("tok.json") + "': tokenizer JSON:"), std::string::npos)
        << r.output;
  }
}

TEST(Untrusted, HeaderLengthMustLeaveTheDataSectionExactlyCovered) {
  test::TempDir dir("untrusted_hlen");
  const std::string header = "{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}} ";  // padded
  std::string data(8, '\0');
  const float v[2] = {1.f, 2.f};
  std::memcpy(data.data(), v, 8);
  write_bytes(dir.file("ok.safetensors"), safetensors_bytes(header, data, header.size()));
  EXPECT_EQ(SafeTensorsFile::load(dir.file("ok.safetensors")).read_f32("a")[1], 2.f);
  // One byte short: the padding space becomes data, every tensor is shifted by a byte.
  write_bytes(dir.file("off.safetensors"), safetensors_bytes(header, data, header.size() - 1));
  const std::string e = error_of([&] { SafeTensorsFile::load(dir.file("off.safetensors")); });
  EXPECT_NE(e.find("the data section has 9 bytes but its tensors cover 8"), std::string::npos) << e;
  // A gap between tensors is refused too.
  const std::string gap = "{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]}}";
  write_bytes(dir.file("gap.safetensors"), safetensors_bytes(gap, data, gap.size()));
  EXPECT_NE(error_of([&] { SafeTensorsFile::load(dir.file("gap.safetensors")); }).find("bytes 0..4"),
            std::string::npos);
}

TEST(Untrusted, NonFiniteWeightsAreRefusedAtLoadNamingTheTensor) {
  test::TempDir dir("untrusted_nan");
  auto model = small_lm(8);
  Model& m = *model;
  const ParamInfo& p = m.param("blocks.0.proj_in.weight");
  m.weights()[p.offset + 5] = std::numeric_limits<float>::quiet_NaN();
  save_model(m, dir.file("nan.safetensors"));
  const std::string e = error_of([&] { load_model(dir.file("nan.safetensors")); });
  EXPECT_NE(e.find("tensor 'blocks.0.proj_in.weight' holds a non-finite value"), std::string::npos) << e;
  EXPECT_NE(e.find("at index 5"), std::string::npos) << e;
  // `gmlp eval` used to print "loss nan" and exit 0.
  const auto r = test::run_command(gmlp() + " eval --model " + dir.file("nan.safetensors") + " --data " +
                                   test::kGplText + " 2>&1");
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_NE(r.output.find("non-finite"), std::string::npos) << r.output;
}

TEST(Untrusted, LabelledFilesWithBomCrOnlyLinesAndBadLabels) {
  test::TempDir dir("untrusted_labels");
  // A byte-order mark is not part of the first label; a lone CR ends a line.
  write_bytes(dir.file("cr.tsv"), "\xEF\xBB\xBFpos\tgood text\rneg\tbad text\r\npos\tmore\n");
  const LabelledSet s = load_labelled(dir.file("cr.tsv"));
  ASSERT_EQ(s.size(), 3u);
  EXPECT_EQ(s.class_names, (std::vector<std::string>{"pos", "neg"}));
  EXPECT_EQ(s.texts[1], "bad text");
  // Labels become class names in checkpoints and reports: valid UTF-8, no control bytes.
  write_bytes(dir.file("utf8.tsv"), "pos\tok\n\xff\xfe\ttext\n");
  const std::string e = error_of([&] { load_labelled(dir.file("utf8.tsv")); });
  EXPECT_NE(e.find(dir.file("utf8.tsv") + ":2: the label"), std::string::npos) << e;
  write_bytes(dir.file("esc.tsv"), "\x1b[31mred\ttext\n");
  EXPECT_NE(error_of([&] { load_labelled(dir.file("esc.tsv")); }).find(":1: the label holds a control character"),
            std::string::npos);
  // Through the CLI it is a clean error and no run directory is left behind.
  const auto r = test::run_command(gmlp() + " train --task classify --data " + dir.file("utf8.tsv") + " --out " +
                                   dir.file("run") + " --steps 2 2>&1");
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_FALSE(fs::exists(dir.file("run/metrics.jsonl"))) << r.output;
}

TEST(Untrusted, ClassNamesWithEscapeSequencesAreRefused) {
  nlohmann::json j = {{"task", "classify"}, {"n_classes", 2}, {"class_names", {"ok", "\x1b]0;owned\x07"}}};
  j["tokenizer"] = {{"kind", "byte"}, {"specials", {"[PAD]", "[MASK]"}}};
  j["vocab_size"] = 258;
  EXPECT_NE(error_of([&] { ModelConfig::from_json(j, "ckpt"); }).find("'class_names' holds a control character"),
            std::string::npos);
}

TEST(Untrusted, OutOfRangeConfigValuesNeverReachTheRunDirectory) {
  test::TempDir dir("untrusted_clip");
  const auto r = test::run_command(gmlp() + " train --data " + test::kGplText + " --out " + dir.file("run") +
                                   " --set train.clip=1e39 2>&1");
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_NE(r.output.find("'clip' must be a finite number"), std::string::npos) << r.output;
  EXPECT_FALSE(fs::exists(dir.file("run")));
}

TEST(Untrusted, AConfigWhoseParameterCountOverflowsIsRefusedBeforeAllocating) {
  // 232 bytes that asked for ~1.8e19 parameters: a heap overflow under finetune --init-from.
  test::TempDir dir("untrusted_huge");
  const nlohmann::json cfg = {{"task", "mlm"},        {"d_model", 349522},   {"d_ffn", 1 << 20},
                              {"n_layers", 32},       {"seq_len", (1 << 20) - 1}, {"sgu_heads", 1 << 19},
                              {"vocab_size", 258},    {"tokenizer", {{"kind", "byte"}, {"specials", {"[PAD]", "[MASK]"}}}}};
  SafeTensorsWriter w;
  const float x = 0.f;
  w.add_f32("embed.weight", {1}, &x);
  w.set_metadata("gmlp.config", cfg.dump());
  w.write(dir.file("huge.safetensors"));
  EXPECT_NE(error_of([&] { load_model(dir.file("huge.safetensors")); }).find("parameters, more than"),
            std::string::npos);
  const auto r = test::run_command(gmlp() + " finetune --init-from " + dir.file("huge.safetensors") + " --out " +
                                   dir.file("run") + " 2>&1");
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_NE(r.output.find("huge.safetensors"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("parameters, more than"), std::string::npos) << r.output;
}

TEST(Untrusted, ABatchWhosePositionsHoldMoreThanTheSpatialMixingTakesIsRefused) {
  // The spatial products take a position's gate channels of every sequence as one row:
  // B x g values, int dimensions in the products and the GPU's kernels.
  ModelConfig c;  // a byte LM
  c.d_model = 8;
  c.d_ffn = 1 << 16;
  c.n_layers = 1;
  c.seq_len = 2;
  Model m(c);
  Rng rng(1);
  m.init(rng);
  const int B = 8193;  // x 32768 gate channels = 2^28 + 32768
  std::vector<int32_t> tokens(size_t(B) * 3, 1);
  Batch b;
  b.B = B;
  b.T = 2;
  b.tokens = tokens.data();
  b.stride = 3;
  b.targets = tokens.data() + 1;
  const std::string e = error_of([&] { m.forward(b); });
  EXPECT_NE(e.find("a batch of 8193 sequences x 32768 gate channels = 268468224 values at each position"),
            std::string::npos)
      << e;
}

TEST(Untrusted, ADeviceIsNotReadAsACorpus) {
  // `--data /dev/zero` used to read without bound.
  test::TempDir dir("untrusted_dev");
  const auto r = test::run_command("timeout 20 " + gmlp() + " train --data /dev/zero --out " + dir.file("run") +
                                   " --steps 1 2>&1");
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_NE(r.output.find("/dev/zero: cannot read: not a regular file"), std::string::npos) << r.output;
}

TEST(Untrusted, ARunDirectoryIsLockedWhileARunUsesIt) {
  test::TempDir dir("untrusted_lock");
  const std::string out = dir.file("run");
  fs::create_directories(out);
  {
    DirLock held(out);
    // A second holder, in this process or another, is refused naming the holder.
    EXPECT_NE(error_of([&] { DirLock again(out); }).find("is in use by another gmlp run (pid " +
                                                          std::to_string(::getpid()) + ")"),
              std::string::npos);
    const auto r = test::run_command(gmlp() + " train --data " + test::kGplText + " --out " + out +
                                     " --steps 2 --no-progress 2>&1");
    EXPECT_EQ(r.exit_code, 1) << r.output;
    EXPECT_NE(r.output.find("'" + out + "' is in use by another gmlp run"), std::string::npos) << r.output;
    EXPECT_FALSE(fs::exists(out + "/metrics.jsonl"));
  }
  DirLock free_again(out);  // released with its holder
}

TEST(Untrusted, TempFilesNeverFollowAPlantedLinkAndStaleOnesAreCleared) {
  test::TempDir dir("untrusted_tmp");
  write_bytes(dir.file("victim"), "precious");
  const std::string target = dir.file("config.json");
  fs::create_symlink(dir.file("victim"), target + ".tmp." + std::to_string(::getpid()));
  write_file_atomic(target, "{}\n");
  EXPECT_EQ(read_file(dir.file("victim")), "precious");
  EXPECT_EQ(read_file(target), "{}\n");
  // A killed writer's temp file is removed when the next run takes the directory.
  write_bytes(dir.file("model.safetensors.tmp.99999"), "half a checkpoint");
  DirLock lock(dir.path().string());
  EXPECT_FALSE(fs::exists(dir.file("model.safetensors.tmp.99999")));
  EXPECT_TRUE(fs::exists(dir.file("victim")));
}

TEST(Untrusted, OverwriteKeepsTheOldCheckpointUntilTheNewRunHasOne) {
  test::TempDir dir("untrusted_overwrite");
  const std::string out = dir.file("run");
  const std::string common = " train --data " + test::kGplText + " --out " + out +
                             " --set model.d_model=16 --set model.d_ffn=32 --set model.n_layers=1 --set model.seq_len=16"
                             " --batch-size 2 --no-progress";
  auto r = test::run_command(gmlp() + common + " --steps 2 2>&1");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const std::string old_model = read_file(out + "/model.safetensors");
  // A new run that ends before its first checkpoint: the old one is set aside, not lost,
  // and --resume no longer finds it.
  r = test::run_command(gmlp() + common + " --steps 0 --overwrite 2>&1");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_FALSE(fs::exists(out + "/model.safetensors"));
  EXPECT_EQ(read_file(out + "/model.safetensors.replaced"), old_model);
  // Its first checkpoint retires the old one.
  r = test::run_command(gmlp() + common + " --steps 2 --overwrite 2>&1");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_TRUE(fs::exists(out + "/model.safetensors"));
  EXPECT_FALSE(fs::exists(out + "/model.safetensors.replaced"));
  EXPECT_FALSE(fs::exists(out + "/train_state.safetensors.replaced"));
}

TEST(Untrusted, ResumingAtAnotherThreadCountIsRefused) {
  test::TempDir dir("untrusted_threads");
  const std::string out = dir.file("run");
  const std::string common = " train --data " + test::kGplText + " --out " + out +
                             " --set model.d_model=16 --set model.d_ffn=32 --set model.n_layers=1 --set model.seq_len=16"
                             " --steps 4 --batch-size 2 --no-progress";
  auto r = test::run_command(gmlp() + " --threads 1" + common + " --stop-after 2 2>&1");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  r = test::run_command(gmlp() + " --threads 2 train --out " + out + " --resume --no-progress 2>&1");
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_NE(r.output.find("was trained at --threads 1; resume it with --threads 1"), std::string::npos) << r.output;
  r = test::run_command(gmlp() + " --threads 1 train --out " + out + " --resume --no-progress 2>&1");
  EXPECT_EQ(r.exit_code, 0) << r.output;
}

TEST(Untrusted, ResumeRefusesAnotherFileOfTheSameSize) {
  // The training state names its data file. Its size alone was checked, so a state
  // pointing at any file of that size (or the file rewritten in place) was trained on.
  test::TempDir dir("untrusted_fingerprint");
  const std::string out = dir.file("run"), data = dir.file("corpus.txt");
  std::string text = read_file(test::kGplText);
  write_bytes(data, text);
  const std::string common = " --threads 1 train --data " + data + " --out " + out +
                             " --set model.d_model=16 --set model.d_ffn=32 --set model.n_layers=1"
                             " --set model.seq_len=16 --steps 4 --batch-size 2 --no-progress";
  auto r = test::run_command(gmlp() + common + " --stop-after 2 2>&1");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const std::string state = read_file(out + "/train_state.safetensors");
  std::reverse(text.begin(), text.end());  // same bytes, same size, other content
  write_bytes(data, text);
  r = test::run_command(gmlp() + " --threads 1 train --out " + out + " --resume --no-progress 2>&1");
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_NE(r.output.find("is not the data this run was trained on: same size, but its content fingerprint"),
            std::string::npos)
      << r.output;
  EXPECT_TRUE(read_file(out + "/train_state.safetensors") == state) << "the refused resume rewrote the state";
  std::reverse(text.begin(), text.end());
  write_bytes(data, text);
  r = test::run_command(gmlp() + " --threads 1 train --out " + out + " --resume --no-progress 2>&1");
  EXPECT_EQ(r.exit_code, 0) << r.output;
}

TEST(Untrusted, ADivergingRunStopsNamingTheStepAndKeepsTheLastGoodCheckpoint) {
  // lr 1e30 makes step 1's update put every weight near 1e30, so step 2's LayerNorm
  // overflows and its loss is NaN. Before, the NaN was applied and checkpointed.
  test::TempDir dir("untrusted_diverge");
  const std::string out = dir.file("run");
  const auto r = test::run_command(
      gmlp() + " --threads 1 train --data " + test::kGplText + " --out " + out +
      " --set model.d_model=16 --set model.d_ffn=32 --set model.n_layers=1 --set model.seq_len=16"
      " --set train.schedule='\"constant\"' --set train.lr=1e30 --set train.ckpt_every=1 --set train.log_every=1"
      " --steps 20 --batch-size 2 --no-progress 2>&1");
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_NE(r.output.find("gmlp: error: training diverged: loss is"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("at step 2"), std::string::npos) << r.output;
  // Step 1's checkpoint is what remains: finite (load_model refuses NaN/Inf) and at step 1.
  std::unique_ptr<Model> model;
  ASSERT_NO_THROW(model = load_model(out + "/model.safetensors"));
  AdamW opt(model->params(), model->num_params(), TrainConfig{});
  EXPECT_EQ(load_train_state(*model, opt, out + "/train_state.safetensors").step, 1);
  const auto log = test::read_jsonl(out + "/metrics.jsonl");
  ASSERT_EQ(log.size(), 1u);
  EXPECT_EQ(log[0]["step"], 1);
}

TEST(Untrusted, AGzipIdxFileCannotUnpackPastItsDeclaredSize) {
  test::TempDir dir("untrusted_gzip");
  // Declares 2 x 2 bytes, then 64 MiB of zeros: about 64 KB gzipped.
  const std::string path = dir.file("bomb-images-idx3-ubyte.gz");
  gzFile gz = gzopen(path.c_str(), "wb9");
  ASSERT_NE(gz, nullptr);
  const unsigned char header[12] = {0, 0, 8, 2, 0, 0, 0, 2, 0, 0, 0, 2};
  gzwrite(gz, header, sizeof header);
  const std::vector<char> zeros(size_t(1) << 20, 0);
  for (int i = 0; i < 64; ++i) gzwrite(gz, zeros.data(), unsigned(zeros.size()));
  gzclose(gz);
  ASSERT_LT(fs::file_size(path), size_t(1) << 20);
  const std::string e = error_of([&] { read_idx(path); });
  EXPECT_NE(e.find("unpacks to more than the 16 bytes its IDX header declares"), std::string::npos) << e;
}

TEST(Untrusted, NoiseIsNotDecodedAsASignaturelessImageFormat) {
  // Found by scripts/fuzz.sh: stb_image took these 143 bytes for a TGA (a format with no
  // signature) and spent seconds decoding it. Only signed formats are decoded now.
  test::TempDir dir("untrusted_image");
  const std::string noise(
      "\x00\x00\x0a\x00\x00\xff\x00\x50\x54\x54\x54\x54\x54\x54\x54\x54\x18\x00\x0a\x32\x20\x32\x0a\x00"
      "\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x30"
      "\x00\x00\x00\x2c\x00\x00\x00\x00\x00\x00\x00\x02\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00"
      "\x00\x00\x31\x35\x0a\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00"
      "\x00\x00\x00\x00\x00\x00\x00\x30\x00\x00\x00\x2c\x00\x00\x00\x00\x00\x00\x00\x02\x00\x00\x00\x00"
      "\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x31\x35\x0a\x30\x20\x35\x0a\x31\x30\x20\x31\x35\x0a",
      143);
  write_bytes(dir.file("noise.img"), noise);
  const std::string e = error_of([&] { read_image(dir.file("noise.img")); });
  EXPECT_NE(e.find("not a readable image"), std::string::npos) << e;
}

TEST(Untrusted, ALongToeplitzWindowDoesNotMaterialiseItsWholeMatrixToGenerate) {
  // n = 65536: the decoder used to allocate n^2 floats (16 GiB) for any prompt.
  test::TempDir dir("untrusted_toeplitz");
  save_model(*small_lm(65536, Spatial::toeplitz), dir.file("long.safetensors"));
  // 2 GiB is far more than the valid work needs, and far less than n^2: as address
  // space, or under AddressSanitizer (which reserves terabytes of shadow address space)
  // as its largest allowed allocation.
#if defined(__SANITIZE_ADDRESS__)
  const std::string bound = "export ASAN_OPTIONS=${ASAN_OPTIONS:+$ASAN_OPTIONS:}max_allocation_size_mb=2048; ";
#else
  const std::string bound = "ulimit -v 2097152; ";
#endif
  const auto r = test::run_command("bash -c '" + bound + gmlp() + " --threads 1 generate --model " +
                                   dir.file("long.safetensors") + " --prompt abc --max-tokens 8 --seed 1' 2>&1");
  EXPECT_EQ(r.exit_code, 0) << r.output;
}

}  // namespace
}  // namespace gmlp
