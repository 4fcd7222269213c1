// Data-parallel training under mpirun (docs/distributed.md), through the real binary:
// two ranks train the one-process run (causal LM, masked LM, vision with augmentation
// and stochastic depth), resume on the same or another number of ranks, refuse a batch
// that does not divide, and end cleanly when a rank dies or the launcher is signalled;
// `gmlp bench` takes its training step across the ranks and reports once.
// Built only when gmlp has MPI and mpirun is installed (tests/CMakeLists.txt).
#ifdef GMLP_MPIEXEC
#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <filesystem>
#include <functional>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>
#include <string>
#include <tuple>
#include <vector>

#include "gmlp/checkpoint.h"
#include "gmlp/files.h"
#include "gmlp/safetensors.h"
#include "gmlp/trainer.h"
#include "test_util.h"

namespace gmlp {
namespace {

namespace fs = std::filesystem;
using test::read_jsonl;
using test::run_command;
using test::train_losses;

// Every launch is bounded: a hang fails the test instead of stalling the suite.
std::string launch(int P, const std::string& launcher_options = "") {
  return "timeout 120 " GMLP_MPIEXEC " --allow-run-as-root --oversubscribe -np " + std::to_string(P) + " " +
         launcher_options + " " + test::gmlp_exe() + " --threads 1";
}
std::string single() { return test::gmlp_exe() + " --threads 1"; }

bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

// What every run here shares besides its model and batch.
const std::string kRunSettings = " --set train.warmup=2 --set train.eval_batches=4 --no-progress";
const std::string kTiny = " --set model.d_model=16 --set model.d_ffn=32 --set model.n_layers=2 --set model.seq_len=16"
                          " --set train.batch_size=8" + kRunSettings;

// A vision run with RandAugment and repeated augmentation, whose batches mix rows in
// pairs and whose targets are smoothed, and which keeps an average of its weights (its
// batch size given apart); expect_same_average compares two runs' averages.
const std::string kMixedVision =
    " --set model.d_model=16 --set model.d_ffn=32 --set model.n_layers=3 --set train.augment_flip=true"
    " --set train.augment_shift=1 --set train.mixup=0.8 --set train.cutmix=1 --set train.label_smoothing=0.1"
    " --set train.random_erase=0.5 --set train.shuffle=true --set train.auto_augment=rand-m9-mstd0.5-inc1"
    " --set train.repeated_aug=3 --set train.model_ema=0.9"
    " --lr 1e-2 --set train.warmup=2 --no-progress --steps 12 --log-every 1 --eval-every 6";

// The losses of two runs agree to float tolerance (the ranks' sums round differently).
void expect_close_losses(const std::vector<double>& a, const std::vector<double>& b) {
  ASSERT_EQ(a.size(), b.size());
  ASSERT_FALSE(a.empty());
  for (size_t i = 0; i < a.size(); ++i) EXPECT_NEAR(a[i], b[i], 1e-5 * std::abs(a[i]) + 1e-6) << "step " << i + 1;
}

// Every tensor of two checkpoints agrees to float tolerance; and they are not bit-equal
// only by accident of an identical run (that case passes too).
void expect_close_weights(const std::string& a, const std::string& b) {
  const auto fa = SafeTensorsFile::load(a), fb = SafeTensorsFile::load(b);
  ASSERT_EQ(fa.names(), fb.names());
  for (const auto& n : fa.names()) {
    const auto wa = fa.read_f32(n), wb = fb.read_f32(n);
    ASSERT_EQ(wa.size(), wb.size());
    EXPECT_TRUE(test::all_close(wb.data(), wa.data(), wa.size(), 2e-5f, 1e-4f, n));
  }
}

// The held-out metrics of two runs, line by line, to float tolerance.
void expect_close_evals(const std::string& run_a, const std::string& run_b, const std::string& key) {
  std::vector<double> a, b;
  for (const auto& j : read_jsonl(metrics_file(run_a)))
    if (j.contains(key)) a.push_back(j[key].get<double>());
  for (const auto& j : read_jsonl(metrics_file(run_b)))
    if (j.contains(key)) b.push_back(j[key].get<double>());
  ASSERT_FALSE(a.empty()) << key;
  ASSERT_EQ(a.size(), b.size()) << key;
  for (size_t i = 0; i < a.size(); ++i) EXPECT_NEAR(a[i], b[i], 1e-5 * std::abs(a[i]) + 1e-7) << key << " #" << i;
}

// Two runs' averages of their weights (train.model_ema): the saved files and their
// evaluations agree to float tolerance.
void expect_same_average(const std::string& run_a, const std::string& run_b) {
  expect_close_weights(ema_model_file(run_a), ema_model_file(run_b));
  expect_close_evals(run_a, run_b, "ema_val_acc");
}

std::set<std::string> files_in(const std::string& dir) {
  std::set<std::string> names;
  for (const auto& e : fs::directory_iterator(dir)) names.insert(e.path().filename().string());
  return names;
}

// Trains the same run on one process and on two ranks; they must agree. more(p1, p2)
// checks what else the two run directories must share.
// `one` and `two` are the commands up to their arguments (the second under the launcher),
// whose batch gives each rank `rows`.
void same_run(const std::string& one_cmd, const std::string& two_cmd, const std::string& args,
              const std::string& eval_key, const std::function<void(const std::string&, const std::string&)>& more,
              const std::string& two_says = "", int rows = 4) {
  test::TempDir dir("dist_same");
  auto one = run_command(one_cmd + args + " --out " + dir.file("p1"));
  ASSERT_EQ(one.exit_code, 0) << one.output;
  auto two = run_command(two_cmd + args + " --out " + dir.file("p2"));
  ASSERT_EQ(two.exit_code, 0) << two.output;
  EXPECT_TRUE(contains(two.output, two_says)) << two.output;
  EXPECT_TRUE(contains(two.output, "2 ranks, " + std::to_string(rows) + " rows of each batch per rank")) << two.output;
  // Rank 0 alone reports: one summary line, one run directory with the same files.
  size_t summaries = 0;
  for (size_t at = two.output.find("finished after"); at != std::string::npos; at = two.output.find("finished after", at + 1))
    ++summaries;
  EXPECT_EQ(summaries, 1u) << two.output;
  EXPECT_EQ(files_in(dir.file("p1")), files_in(dir.file("p2")));
  EXPECT_EQ(read_jsonl(metrics_file(dir.file("p1"))).size(), read_jsonl(metrics_file(dir.file("p2"))).size());
  expect_close_losses(train_losses(dir.file("p1")), train_losses(dir.file("p2")));
  expect_close_evals(dir.file("p1"), dir.file("p2"), eval_key);
  expect_close_weights(model_file(dir.file("p1")), model_file(dir.file("p2")));
  if (more) more(dir.file("p1"), dir.file("p2"));
}

void same_run_any_p(const std::string& args, const std::string& eval_key,
                    const std::function<void(const std::string&, const std::string&)>& more = {}) {
  same_run(single() + " train", launch(2) + " train", args, eval_key, more);
}

// MPI's communicator is a module opened only under a launcher: a single-process run
// never maps it or MPI's libraries (the dynamic loader's trace, LD_DEBUG=files, lists
// every object a process loads); each rank of an mpirun job opens it.
TEST(Distributed, OnlyALaunchedRunLoadsMpi) {
  test::TempDir dir("dist_libs");
  const std::string args = " train --steps 1 --data " + std::string(test::kGplText) + kTiny;
  const auto one = run_command("LD_DEBUG=files " + single() + args + " --out " + dir.file("p1") + " 2>&1");
  ASSERT_EQ(one.exit_code, 0) << one.output.substr(one.output.size() > 2000 ? one.output.size() - 2000 : 0);
  ASSERT_TRUE(contains(one.output, "file=libopenblas")) << "LD_DEBUG gave no trace";
  for (const char* lib : {"libgmlp_mpi", "libmpi", "libopen-pal"}) EXPECT_FALSE(contains(one.output, lib)) << lib;
  // Each rank's trace to a file of its own (ld.<pid>): mpirun relays the ranks' stderr in
  // chunks that may splice their lines.
  fs::create_directories(dir.file("ld"));
  const auto two = run_command(launch(2, "-x LD_DEBUG=files -x LD_DEBUG_OUTPUT=" + dir.file("ld") + "/ld") + args +
                               " --out " + dir.file("p2") + " 2>&1");
  ASSERT_EQ(two.exit_code, 0) << two.output.substr(two.output.size() > 2000 ? two.output.size() - 2000 : 0);
  std::vector<int> opened;  // per rank, lines like "1234: file=/.../libgmlp_mpi.so [0];  dynamically loaded by ..."
  for (const auto& f : fs::directory_iterator(dir.file("ld"))) {
    std::istringstream lines(read_file(f.path().string()));
    int n = 0;
    for (std::string line; std::getline(lines, line);)
      n += contains(line, "file=") && contains(line, "/libgmlp_mpi.so") && contains(line, "dynamically loaded");
    opened.push_back(n);
  }
  EXPECT_EQ(opened, std::vector<int>({1, 1})) << "each rank opens the MPI module once";
}

TEST(Distributed, CausalLmOnTwoRanksIsTheOneProcessRun) {
  same_run_any_p(" --data " + test::kGplText + kTiny + " --steps 12 --log-every 1 --eval-every 6", "val_loss");
}

#ifdef GMLP_CUDA_EMULATOR_MODULE
// The GPU path of data parallelism where there is no GPU: under the CUDA emulator
// (tests/cuda_emu) each rank runs the CUDA backend's kernels on the CPU and the
// emulator's NCCL sums their gradients in shared memory, so two ranks on "cuda" go
// through device.cpp's NCCL rendezvous, nccl.cpp's reducer and its bucketed, overlapped
// all-reduces, and must end where one process on the CPU ends.
std::string launch_on_emulator(int P) {
  return "GMLP_CUDA_EMULATOR=" GMLP_CUDA_EMULATOR_MODULE " " + launch(P, "-x GMLP_CUDA_EMULATOR") +
         " train --device cuda";
}

TEST(Distributed, TwoRanksOnTheCudaEmulatorSumOverNcclToTheOneProcessRun) {
  same_run(single() + " train --device cpu", launch_on_emulator(2),
           " --data " + test::kGplText + kTiny + " --steps 8 --log-every 1 --eval-every 4", "val_loss", {},
           "gradients over NCCL (the CUDA emulator's stand-in), 2 ranks");
}

// The device's loss over soft targets (label smoothing, mixed rows), and a byte set's
// mixup batches sent as floats: the CPU's run.
TEST(Distributed, AMixedVisionRunOnTwoRanksOnTheCudaEmulatorIsTheOneProcessRun) {
  test::TempDir data("dist_vision_mixed_emu");
  test::write_vision_set(data.file("set"));
  same_run(single() + " train --device cpu", launch_on_emulator(2),
           " --task vision --data " + data.file("set") + kMixedVision + " --batch-size 8", "val_acc",
           expect_same_average, "gradients over NCCL (the CUDA emulator's stand-in), 2 ranks");
}

// A GPU rank draws the whole vision batch, as every rank does, but sends up only its own
// rows of it, beside the step before (src/train/batch_ahead.h).
TEST(Distributed, VisionOnTwoRanksOnTheCudaEmulatorIsTheOneProcessRun) {
  test::TempDir data("dist_vision_emu");
  test::write_vision_set(data.file("set"));
  same_run(single() + " train --device cpu", launch_on_emulator(2),
           " --task vision --data " + data.file("set") +
               " --set model.d_model=16 --set model.d_ffn=32 --set model.n_layers=3 --batch-size 8"
               " --set model.survival_prob=0.6 --set train.augment_shift=1 --lr 1e-2 --set train.warmup=2"
               " --no-progress --steps 8 --log-every 1 --eval-every 4",
           "val_acc", {}, "gradients over NCCL (the CUDA emulator's stand-in), 2 ranks");
}

// Two GPU ranks, each taking its rows in two pieces: the reductions over NCCL start in
// the last piece's backward, over the pieces' summed gradients.
TEST(Distributed, TwoCudaRanksInPiecesAreTheOneProcessRun) {
  test::TempDir data("dist_pieces_emu");
  test::write_vision_set(data.file("set"));
  same_run(single() + " train --device cpu", launch_on_emulator(2) + " --grad-accum 2",
           " --task vision --data " + data.file("set") +
               " --set model.d_model=16 --set model.d_ffn=32 --set model.n_layers=3 --batch-size 8"
               " --set model.survival_prob=0.6 --set train.augment_shift=1 --lr 1e-2 --set train.warmup=2"
               " --no-progress --steps 8 --log-every 1 --eval-every 4",
           "val_acc", {}, "gradients accumulated over 2 pieces of 2 rows a step on each rank");
}
#endif

TEST(Distributed, MaskedLmOnTwoRanksIsTheOneProcessRun) {
  // Each rank holds a different number of masked positions: the gradients are weighted
  // by each rank's share of them.
  same_run_any_p(" --task mlm --data " + test::kGplText + kTiny + " --steps 12 --log-every 1 --eval-every 6", "val_ppl");
}

// Each rank takes its rows in two pieces, each a mean over the rank's masked positions
// (which differ between the pieces and the ranks): the one-process run, whole.
TEST(Distributed, TwoRanksInPiecesAreTheOneProcessRun) {
  same_run(single() + " train", launch(2) + " train --grad-accum 2",
           " --task mlm --data " + test::kGplText + kTiny + " --steps 12 --log-every 1 --eval-every 6", "val_ppl", {},
           "gradients accumulated over 2 pieces of 2 rows a step on each rank");
}

TEST(Distributed, VisionOnTwoRanksIsTheOneProcessRun) {
  test::TempDir data("dist_vision_data");
  test::write_vision_set(data.file("set"));
  // Shifts and stochastic-depth masks are drawn for the whole batch on every rank.
  same_run_any_p(" --task vision --data " + data.file("set") +
                     " --set model.d_model=16 --set model.d_ffn=32 --set model.n_layers=3 --batch-size 8"
                     " --set model.survival_prob=0.6 --set train.augment_shift=1 --lr 1e-2 --set train.warmup=2"
                     " --no-progress --steps 12 --log-every 1 --eval-every 6",
                 "val_acc");
}

// Mixed rows (mixup or CutMix each batch) and smoothed targets: every rank draws the
// batch's mixing, mixes its rows' pairs and takes its rows' second targets and weights.
// Batch 6: rank 0's rows 0-2 and rank 1's 3-5, so the pair of rows 2 and 3 spans the
// ranks (each makes the other's row), and pieces of one row split every pair: the one
// process's run.
TEST(Distributed, AMixedVisionRunOnTwoRanksIsTheOneProcessRun) {
  test::TempDir data("dist_vision_mixed");
  test::write_vision_set(data.file("set"));
  same_run(single() + " train", launch(2) + " train --grad-accum 3",
           " --task vision --data " + data.file("set") + kMixedVision + " --batch-size 6", "val_acc",
           expect_same_average, "mixup (alpha 0.8) or CutMix (alpha 1) in pairs", 3);
}

// Streamed, each rank decodes (and crops and mirrors) only its own rows' images
// (TrainTask::fill_rows): the run is the one process's over the same folder held. The
// normalisation pass, shared between the ranks (each sums its half of the images), gives
// the held set's statistics to the bit.
TEST(Distributed, AStreamedImageFolderOnTwoRanksIsTheOneProcessHeldRun) {
  test::TempDir data("dist_vision_stream");
  test::write_vision_folder(data.file("set"), {"a", "b", "c"});
  same_run(
      single() + " train", launch(2) + " train --set train.stream_images=true",
      " --task vision --data " + data.file("set") +
          " --set model.d_model=16 --set model.d_ffn=32 --set model.n_layers=3 --batch-size 8"
          " --set model.survival_prob=0.6 --set train.augment_shift=1 --lr 1e-2 --set train.warmup=2"
          " --set train.augment_crop=0.3 --set train.augment_flip=true"
          " --no-progress --steps 12 --log-every 1 --eval-every 6",
      "val_acc",
      [](const std::string& p1, const std::string& p2) {
        auto norm = [](const std::string& run) {
          return parse_json(read_file((fs::path(run) / "config.json").string()), "config")["model"]["normalization"];
        };
        ASSERT_TRUE(norm(p1).is_object());
        EXPECT_EQ(norm(p1), norm(p2));
      },
      "streamed from their files");
}

TEST(Distributed, ClassifierWithDropoutAndValidationOnTwoRanksIsTheOneProcessRun) {
  test::TempDir data("dist_classify_data");
  test::write_sentences(data.file("train.tsv"), 20, 1);
  test::write_sentences(data.file("test.tsv"), 4, 2);
  // Dropout masks are drawn for the whole batch on every rank and sliced like its rows;
  // the validation split selects the same best step, which rank 0 alone writes and
  // scores on the test set.
  same_run_any_p(" --task classify --data " + data.file("train.tsv") + " --test " + data.file("test.tsv") + kTiny +
                     " --set model.dropout=0.3 --set model.head_dropout=0.2 --val-fraction 0.25 --patience 5"
                     " --lr 1e-2 --steps 12 --log-every 1 --eval-every 4",
                 "val_acc", [](const std::string& p1, const std::string& p2) {
                   expect_close_weights((fs::path(p1) / "best.safetensors").string(),
                                        (fs::path(p2) / "best.safetensors").string());
                   const auto r1 = parse_json(read_file((fs::path(p1) / "report.json").string()), "report");
                   const auto r2 = parse_json(read_file((fs::path(p2) / "report.json").string()), "report");
                   EXPECT_EQ(r1["selected"]["step"], r2["selected"]["step"]);
                   ASSERT_FALSE(r1["test"].is_null());
                   EXPECT_NEAR(r1["test"]["macro_f1"].get<double>(), r2["test"]["macro_f1"].get<double>(), 1e-9);
                 });
}

TEST(Distributed, AGridAndItsRefitOnTwoRanksAreTheOneProcessSearch) {
  test::TempDir dir("dist_grid");
  test::write_sentences(dir.file("train.tsv"), 20, 1);
  test::write_sentences(dir.file("test.tsv"), 4, 2);
  const std::string args = " train --task classify --data " + dir.file("train.tsv") + " --test " +
                           dir.file("test.tsv") + kTiny +
                           " --val-fraction 0.25 --steps 8 --log-every 1 --eval-every 2 --set train.min_lr=0"
                           " --grid lr=1e-9,1e-2 --refit --out ";
  auto one = run_command(single() + args + dir.file("p1"));
  ASSERT_EQ(one.exit_code, 0) << one.output;
  auto two = run_command(launch(2) + args + dir.file("p2"));
  ASSERT_EQ(two.exit_code, 0) << two.output;
  // Every rank trains every trial and the refit; rank 0 alone prints the table.
  size_t tables = 0;
  for (size_t at = two.output.find("<- chosen"); at != std::string::npos; at = two.output.find("<- chosen", at + 1))
    ++tables;
  EXPECT_EQ(tables, 1u) << two.output;
  const auto g1 = parse_json(read_file(dir.file("p1") + "/grid.json"), "grid 1");
  const auto g2 = parse_json(read_file(dir.file("p2") + "/grid.json"), "grid 2");
  EXPECT_EQ(g1["chosen"], g2["chosen"]);
  ASSERT_EQ(g1["settings"].size(), g2["settings"].size());
  for (size_t i = 0; i < g1["settings"].size(); ++i)
    EXPECT_NEAR(g1["settings"][i]["val_acc"].get<double>(), g2["settings"][i]["val_acc"].get<double>(), 1e-9);
  EXPECT_NEAR(g1["test"]["macro_f1"].get<double>(), g2["test"]["macro_f1"].get<double>(), 1e-9);
  expect_close_losses(train_losses(dir.file("p1/refit")), train_losses(dir.file("p2/refit")));
  expect_close_weights(model_file(dir.file("p1/refit")), model_file(dir.file("p2/refit")));
}

TEST(Distributed, ABatchThatDoesNotDivideIsRefused) {
  test::TempDir dir("dist_batch");
  auto r = run_command(launch(2) + " train --data " + test::kGplText + kTiny + " --set train.batch_size=7 --steps 2 --out " +
                       dir.file("run"));
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.exit_code, 124) << "a refused run must not hang";
  EXPECT_TRUE(contains(r.output, "train.batch_size = 7 is the global batch")) << r.output;
  EXPECT_TRUE(contains(r.output, "multiple of 2")) << r.output;
  EXPECT_FALSE(fs::exists(state_file(dir.file("run"))));
  // Each rank's 4 rows do not divide into 8 pieces.
  r = run_command(launch(2) + " train --data " + test::kGplText + kTiny + " --grad-accum 8 --steps 2 --out " +
                  dir.file("run"));
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.exit_code, 124) << "a refused run must not hang";
  EXPECT_TRUE(contains(r.output, "train.grad_accum = 8 pieces: it must be a multiple of 16")) << r.output;
  EXPECT_FALSE(fs::exists(dir.file("run")));
}

TEST(Distributed, ResumesOnTheSameAndOnAnotherNumberOfRanks) {
  test::TempDir dir("dist_resume");
  const std::string args = " train --data " + test::kGplText + kTiny + " --steps 12 --log-every 1 --eval-every 5 --ckpt-every 4";
  auto r = run_command(launch(2) + args + " --out " + dir.file("straight"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  // Two ranks, interrupted, resumed on two ranks: exactly the uninterrupted run.
  r = run_command(launch(2) + args + " --out " + dir.file("split") + " --stop-after 5");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_TRUE(contains(r.output, "interrupted after 5 steps")) << r.output;
  r = run_command(launch(2) + " train --resume --no-progress --out " + dir.file("split"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(train_losses(dir.file("straight")), train_losses(dir.file("split")));
  EXPECT_TRUE(read_file(model_file(dir.file("straight"))) == read_file(model_file(dir.file("split"))))
      << "the checkpoints differ";
  // Written by two ranks, resumed on one: the same batches, rounded differently; and on
  // one in two pieces a step, each the memory of one rank's rows.
  for (const auto& [out, flags, says] :
       {std::tuple<std::string, std::string, std::string>{"moved", "", "trained on 2 rank(s), it continues on 1"},
        {"halved", " --grad-accum 2", "gradients accumulated over 2 pieces of 4 rows a step"}}) {
    SCOPED_TRACE(out);
    r = run_command(launch(2) + args + " --out " + dir.file(out) + " --stop-after 5");
    ASSERT_EQ(r.exit_code, 0) << r.output;
    r = run_command(single() + " train --resume" + flags + " --no-progress --out " + dir.file(out));
    ASSERT_EQ(r.exit_code, 0) << r.output;
    EXPECT_TRUE(contains(r.output, says)) << r.output;
    expect_close_losses(train_losses(dir.file("straight")), train_losses(dir.file(out)));
    expect_close_weights(model_file(dir.file("straight")), model_file(dir.file(out)));
  }
}

// Every tensor of two safetensors files is bit-identical (their metadata may differ).
void expect_same_tensors(const std::string& a, const std::string& b) {
  const auto fa = SafeTensorsFile::load(a), fb = SafeTensorsFile::load(b);
  ASSERT_EQ(fa.names(), fb.names());
  for (const auto& n : fa.names()) EXPECT_TRUE(fa.read_f32(n) == fb.read_f32(n)) << n;
}

// ZeRO-1 (--shard-optimizer): each rank keeps the moments of half the parameters, and
// the run is bit for bit the unsharded one: weights, moments, losses; interrupted and
// resumed sharded, it is still that run. `two` is the two-rank command up to its
// arguments; the unsharded run is left in dir's "plain".
void expect_sharding_changes_no_number(const std::string& two, const std::string& args, const test::TempDir& dir) {
  auto r = run_command(two + args + " --out " + dir.file("plain"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  r = run_command(two + args + " --shard-optimizer --out " + dir.file("zero"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const size_t total = load_model(model_file(dir.file("zero")))->num_params();
  EXPECT_TRUE(contains(r.output, "AdamW's moments for " + std::to_string(total / 2 + total % 2) + " of " +
                                     std::to_string(total) + " parameters"))
      << r.output;
  EXPECT_EQ(train_losses(dir.file("plain")), train_losses(dir.file("zero")));
  expect_same_tensors(model_file(dir.file("plain")), model_file(dir.file("zero")));
  expect_same_tensors(state_file(dir.file("plain")), state_file(dir.file("zero")));  // moments gathered whole
  r = run_command(two + args + " --shard-optimizer --stop-after 5 --out " + dir.file("split"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  r = run_command(two + " --resume --shard-optimizer --no-progress --out " + dir.file("split"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(train_losses(dir.file("plain")), train_losses(dir.file("split")));
  expect_same_tensors(state_file(dir.file("plain")), state_file(dir.file("split")));
}

// ... and resumed on one process, it goes on.
TEST(Distributed, ShardedOptimizerStateChangesNoNumber) {
  test::TempDir dir("dist_zero");
  const std::string args = " --data " + test::kGplText + kTiny + " --steps 12 --log-every 1 --eval-every 5 --ckpt-every 4";
  expect_sharding_changes_no_number(launch(2) + " train", args, dir);
  auto r = run_command(launch(2) + " train" + args + " --shard-optimizer --stop-after 5 --out " + dir.file("moved"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  r = run_command(single() + " train --resume --no-progress --out " + dir.file("moved"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  expect_close_weights(model_file(dir.file("plain")), model_file(dir.file("moved")));
}

#ifdef GMLP_CUDA_EMULATOR_MODULE
// ZeRO-1 on GPUs: each rank's AdamW moments in device memory for its block of the
// parameters, the updated blocks broadcast over NCCL; on the emulator, as above.
TEST(Distributed, ShardedOptimizerStateOnTheCudaEmulatorChangesNoNumber) {
  test::TempDir dir("dist_zero_cuda");
  expect_sharding_changes_no_number(
      launch_on_emulator(2), " --data " + test::kGplText + kTiny + " --steps 8 --log-every 1 --eval-every 4 --ckpt-every 4",
      dir);
}
#endif

// `gmlp bench` under a launcher: the ranks take each training step together, each on its
// rows of the global batch, and rank 0 alone reports, with the global batch's rate.
const std::string kBenchTiny =
    " bench --config " + test::source_dir() + "/configs/tiny.json --set model.n_layers=2 --warmup 1 --repeats 2 --json";

// The JSON objects on a run's stdout and stderr (the ranks' lines interleave).
std::vector<nlohmann::json> json_lines(const std::string& out) {
  std::vector<nlohmann::json> objects;
  std::istringstream lines(out);
  for (std::string line; std::getline(lines, line);)
    if (!line.empty() && line.front() == '{') objects.push_back(nlohmann::json::parse(line));
  return objects;
}

TEST(Distributed, ABenchOnTwoRanksTakesEachStepTogetherAndReportsOnce) {
  // A causal LM, and a masked LM (whose ranks hold different numbers of targets: the
  // loss and gradients weighted by each rank's share), in two pieces a rank.
  const std::string mlm = " bench --config " + test::source_dir() +
                          "/configs/mlm-kjv.json --set model.n_layers=1 --set model.seq_len=32 --warmup 1 --repeats 2"
                          " --json --grad-accum 2";
  for (const std::string& bench : {kBenchTiny, mlm}) {
    const auto r = run_command(launch(2) + bench + " --batch-size 8 2>&1");
    ASSERT_EQ(r.exit_code, 0) << r.output;
    const auto reports = json_lines(r.output);
    ASSERT_EQ(reports.size(), 1u) << r.output;
    const nlohmann::json& j = reports[0];
    EXPECT_EQ(j["ranks"].get<int>(), 2) << r.output;
    EXPECT_EQ(j["batch_size"].get<int>(), 8) << r.output;
    EXPECT_TRUE(contains(j["comm"].get<std::string>(), "MPI")) << r.output;
    // The global batch's tokens over the step.
    EXPECT_NEAR(j["tokens_per_s"].get<double>(), 8.0 * j["seq_len"].get<int>() / j["median_s"].get<double>(),
                1e-6 * j["tokens_per_s"].get<double>());
    // The step is the one-process step of the same batch: its first loss, to float tolerance.
    const auto one = run_command(single() + bench + " --batch-size 8 2>&1");
    ASSERT_EQ(one.exit_code, 0) << one.output;
    const auto alone = json_lines(one.output);
    ASSERT_EQ(alone.size(), 1u) << one.output;
    EXPECT_EQ(alone[0]["ranks"].get<int>(), 1);
    const double want = alone[0]["first_loss"].get<double>();
    EXPECT_NEAR(j["first_loss"].get<double>(), want, 1e-6 * std::abs(want)) << bench;
  }
  // The text report names the split.
  const auto text = run_command(launch(2) + " bench --config " + test::source_dir() +
                                "/configs/tiny.json --set model.n_layers=2 --warmup 1 --repeats 2 --batch-size 8 2>&1");
  ASSERT_EQ(text.exit_code, 0) << text.output;
  EXPECT_TRUE(contains(text.output, "2 ranks, 4 rows of each batch per rank")) << text.output;
  EXPECT_TRUE(contains(text.output, "of the 2 ranks' measured sgemm peak")) << text.output;
}

TEST(Distributed, ABenchThatCannotRunAcrossTheRanksIsRefusedOnEveryRank) {
  struct Case {
    std::string args, says;
  } cases[] = {{" --batch-size 7", "a batch of 7 rows is the global batch, split evenly over the 2 processes"},
               {" --batch-size 8 --grad-accum 8", "does not divide into grad_accum = 8 pieces on each of 2 processes"},
               {" --batch-size 8 --mode infer",
                "2 processes take only training steps together (data parallel); time inference and generation in one"}};
  for (const Case& c : cases) {
    const auto r = run_command(launch(2) + kBenchTiny + c.args + " 2>&1");
    EXPECT_NE(r.exit_code, 0) << c.args;
    EXPECT_NE(r.exit_code, 124) << c.args << ": a refused bench must not hang";
    EXPECT_TRUE(contains(r.output, c.says)) << r.output;
    EXPECT_TRUE(json_lines(r.output).empty()) << r.output;
  }
}

#ifdef GMLP_CUDA_EMULATOR_MODULE
// On GPUs the ranks' gradients go over NCCL, and each rank holds its own rows alone,
// activations and images: a rank of two at a global batch peaks where one process at
// half of it does (a vision model's images: 1.5 MiB apart were every rank to hold all
// of them). On the emulator with its launches skipped (the step's work is not what is
// checked here).
TEST(Distributed, ABenchOnTwoGpuRanksHoldsEachRanksRowsAndReducesOverNccl) {
  const std::string emulate = "GMLP_CUDA_EMULATOR=" GMLP_CUDA_EMULATOR_MODULE " GMLP_CUDA_EMULATOR_HOST_ONLY=1 ";
  const std::string vision = " bench --config " + test::source_dir() +
                             "/configs/mnist.json --set model.n_layers=1 --warmup 1 --repeats 2 --json";
  for (const auto& [bench, B] : {std::pair{kBenchTiny, 8}, std::pair{vision, 1024}}) {
    const auto two = run_command(emulate + launch(2, "-x GMLP_CUDA_EMULATOR -x GMLP_CUDA_EMULATOR_HOST_ONLY") + bench +
                                 " --device cuda --precision bf16 --batch-size " + std::to_string(B) + " 2>&1");
    ASSERT_EQ(two.exit_code, 0) << two.output;
    const auto one = run_command(emulate + single() + bench + " --device cuda --precision bf16 --batch-size " +
                                 std::to_string(B / 2) + " 2>&1");
    ASSERT_EQ(one.exit_code, 0) << one.output;
    const auto a = json_lines(two.output), b = json_lines(one.output);
    ASSERT_EQ(a.size(), 1u) << two.output;
    ASSERT_EQ(b.size(), 1u) << one.output;
    EXPECT_TRUE(contains(a[0]["comm"].get<std::string>(), "gradients over NCCL")) << two.output;
    EXPECT_EQ(b[0]["ranks"].get<int>(), 1);
    EXPECT_NEAR(a[0]["device_peak_mb"].get<double>(), b[0]["device_peak_mb"].get<double>(), 0.5) << bench;
  }
}
#endif

// Starts a long two-rank run in the background, waits for its first checkpoint, does
// `act` (a shell snippet; $MPIRUN is the launcher's pid, $RANK1 rank 1's), and waits
// for the launcher. Prints "launcher exit N after S s".
//
// Its model is larger than kTiny: mpirun stops reading the ranks' output when it is
// signalled, before it signals them, and rank 0 logs every step; at kTiny's ~2,000 steps
// a second the 64 KB pipe filled first, and rank 0 blocked in a write never reached the
// step's stop vote (SIGKILL a second later). This one runs ~250 steps a second.
const std::string kBackgroundModel =
    " --set model.d_model=64 --set model.d_ffn=256 --set model.n_layers=2 --set model.seq_len=64"
    " --set train.batch_size=16" + kRunSettings;

std::string background_run(const std::string& out, const std::string& act) {
  const std::string log = out + ".log";
  return launch(2) + " train --data " + test::kGplText + kBackgroundModel +
         " --steps 1000000 --log-every 1 --eval-every 1000000 --ckpt-every 5 --out " + out + " > " + log +
         " 2>&1 & T=$!\n"
         "for i in $(seq 600); do [ -f " + state_file(out) + " ] && break; sleep 0.1; done\n"
         "MPIRUN=$(pgrep -P $T)\n"
         "for p in $(pgrep -P $MPIRUN); do tr '\\0' '\\n' < /proc/$p/environ | grep -qx OMPI_COMM_WORLD_RANK=1 && RANK1=$p; done\n"
         "SECONDS=0\n" + act + "\nwait $T; echo \"launcher exit $? after $SECONDS s\"; cat " + log;
}

TEST(Distributed, ARankKilledEndsTheJobAndKeepsTheCheckpoint) {
  test::TempDir dir("dist_kill");
  const std::string out = dir.file("run");
  auto r = run_command(background_run(out, "kill -9 $RANK1"));
  EXPECT_TRUE(contains(r.output, "launcher exit 137 after")) << r.output;  // mpirun's 128 + 9; 124 would be a hang
  EXPECT_TRUE(contains(r.output, "rank 1 with PID")) << r.output;           // mpirun names the dead rank
  EXPECT_TRUE(contains(r.output, "exited on signal 9")) << r.output;
  EXPECT_TRUE(contains(r.output, "gmlp: rank 0: Terminated, stopping")) << r.output;  // the survivor says so
  // The last checkpoint loads and the run resumes (on one process).
  ASSERT_TRUE(fs::exists(model_file(out)));
  EXPECT_NO_THROW(load_model(model_file(out)));
  r = run_command(single() + " train --resume --no-progress --stop-after 2 --out " + out);
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_TRUE(contains(r.output, "interrupted after")) << r.output;
}

TEST(Distributed, SigtermOnTheLauncherStopsEveryRankAfterTheSameStep) {
  test::TempDir dir("dist_term");
  const std::string out = dir.file("run");
  auto r = run_command(background_run(out, "sleep 0.5; kill -TERM $MPIRUN"));
  EXPECT_FALSE(contains(r.output, "launcher exit 124")) << r.output;
  EXPECT_TRUE(contains(r.output, "interrupted after")) << r.output;
  EXPECT_TRUE(contains(r.output, "resume with")) << r.output;
  // The checkpoint is the last logged step, written once by rank 0.
  const auto lines = read_jsonl(metrics_file(out));
  ASSERT_FALSE(lines.empty());
  const int64_t stopped = lines.back()["step"].get<int64_t>();
  ASSERT_GT(stopped, 0);
  EXPECT_TRUE(contains(r.output, "interrupted after " + std::to_string(stopped) + " steps")) << r.output;
  // Resumed on two ranks for a few more steps, it is exactly the run that never stopped
  // (the same total steps, so the same schedule).
  r = run_command(launch(2) + " train --resume --no-progress --stop-after 3 --out " + out);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  r = run_command(launch(2) + " train --data " + test::kGplText + kBackgroundModel + " --steps 1000000 --stop-after " +
                  std::to_string(stopped + 3) + " --log-every 1 --eval-every 1000000 --ckpt-every 5 --out " +
                  dir.file("straight"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(train_losses(out).size(), size_t(stopped + 3));
  EXPECT_EQ(train_losses(out), train_losses(dir.file("straight")));
}

}  // namespace
}  // namespace gmlp
#endif  // GMLP_MPIEXEC
