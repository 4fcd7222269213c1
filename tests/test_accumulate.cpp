// Gradient accumulation (train.grad_accum, docs/distributed.md "Gradient accumulation"): a step's batch
// taken in pieces, forward and backward one after another, is the step taken whole.
// Each row's gradient is the one it has in the whole batch, so only the sums of the
// weight gradients round differently: the runs agree to float tolerance and differ in
// the last bits (which shows the pieces were taken). Data parallelism with pieces is in
// test_distributed.cpp, the GPU's in test_cuda.cpp.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "gmlp/checkpoint.h"
#include "gmlp/comm.h"
#include "gmlp/files.h"
#include "gmlp/safetensors.h"
#include "gmlp/trainer.h"
#include "test_util.h"
#include "train/data_parallel.h"
#include "train/tasks.h"

namespace gmlp {
namespace {

namespace fs = std::filesystem;

// A small run of each task (test::small_run), in `pieces` a step: each has what makes a
// piece differ from a plain slice of rows: dropout masks by global row, padded rows
// (classify), a masked LM's uneven targets, stochastic depth's per-row keep and shifted
// images (vision).
TrainOptions run_of(const std::string& task, const test::TempDir& dir, const std::string& out, int pieces) {
  TrainOptions o = test::small_run(task, dir, out, Device::cpu);
  o.run.train.grad_accum = pieces;
  return o;
}

// Two runs that must be the same run: their losses, held-out scores and weights agree to
// float tolerance; `taken_apart`: their weights also differ somewhere in the last bits,
// as sums taken in pieces do.
void expect_same_run(const std::string& a, const std::string& b, bool taken_apart) {
  const std::vector<double> la = test::train_losses(a), lb = test::train_losses(b);
  ASSERT_EQ(la.size(), lb.size());
  ASSERT_FALSE(la.empty());
  for (size_t i = 0; i < la.size(); ++i) EXPECT_NEAR(lb[i], la[i], 1e-5 * std::abs(la[i])) << "step " << i + 1;
  std::vector<nlohmann::json> ea, eb;
  for (const auto& j : test::read_jsonl(metrics_file(a)))
    if (j.contains("val_loss")) ea.push_back(j);
  for (const auto& j : test::read_jsonl(metrics_file(b)))
    if (j.contains("val_loss")) eb.push_back(j);
  ASSERT_EQ(ea.size(), eb.size());
  for (size_t i = 0; i < ea.size(); ++i)
    EXPECT_NEAR(eb[i]["val_loss"].get<double>(), ea[i]["val_loss"].get<double>(),
                1e-5 * std::abs(ea[i]["val_loss"].get<double>()));
  const std::vector<float> wa = test::run_weights(a), wb = test::run_weights(b);
  ASSERT_EQ(wa.size(), wb.size());
  EXPECT_TRUE(test::all_close(wb.data(), wa.data(), wa.size(), 2e-5f, 1e-4f, "weights"));
  if (taken_apart) {
    EXPECT_NE(std::memcmp(wa.data(), wb.data(), sizeof(float) * wa.size()), 0);
  }
}

TEST(GradAccum, APieceAtATimeIsTheWholeBatchOnEveryTask) {
  test::TempDir dir("accum_tasks");
  for (const std::string task : {"causal_lm", "mlm", "classify", "vision"}) {
    SCOPED_TRACE(task);
    const TrainSummary whole = train(run_of(task, dir, task + "-1", 1));
    const TrainSummary pieces = train(run_of(task, dir, task + "-4", 4));
    EXPECT_EQ(pieces.steps, whole.steps);
    expect_same_run(dir.file(task + "-1"), dir.file(task + "-4"), true);
    // The setting is part of the run.
    const nlohmann::json saved = parse_json(read_file(dir.file(task + "-4") + "/config.json"), "config.json");
    EXPECT_EQ(saved["train"]["grad_accum"], 4);
  }
}

// Below the trainer: the pieces DataParallel cuts from a batch (one process), each
// forwarded and backpropagated in turn into the same gradients, leave the whole batch's
// loss and gradients; the model ran on a quarter of the rows at a time. A masked LM's
// piece may hold no masked position.
TEST(GradAccum, PiecesOfABatchAddUpToItsLossAndGradients) {
  test::TempDir dir("accum_model");
  for (const std::string task : {"mlm", "vision", "classify"}) {
    SCOPED_TRACE(task);
    TrainOptions o = run_of(task, dir, "unused", 1);
    o.run.train.batch_size = 8;  // pieces of two rows
    RunConfig rc = o.run;
    TaskInputs in{o.data_path, o.test_path, "", nullptr, false};
    auto source = make_task(rc, in);
    Rng rng(3, 1);
    Batch batch = source->next_batch(rng);
    draw_dropout(rc.model, rng, batch);
    // The masked LM's second piece without a masked position: its loss adds nothing, and
    // must not clear the first piece's either.
    std::vector<int32_t> targets;
    if (task == "mlm") {
      targets.assign(batch.targets, batch.targets + size_t(batch.B) * batch.stride);
      std::fill(targets.begin() + 2 * batch.stride, targets.begin() + 4 * batch.stride, -1);
      batch.targets = targets.data();
    }
    Model model(rc.model);
    model.set_sparse_mlm_head(true);  // as the trainer runs a masked LM
    Rng init(7, 1);
    model.init(init);
    model.zero_grad();
    const double whole = model.forward(batch);
    model.backward();
    const std::vector<float> g(model.grads(), model.grads() + model.num_params());

    DataParallel dp(world(), model);
    const Batch& mine = dp.shard(batch);
    const std::vector<Batch>& pieces = dp.pieces(mine, 4);
    ASSERT_EQ(pieces.size(), 4u);
    model.zero_grad();
    double loss = 0.0;
    for (const Batch& p : pieces) {
      EXPECT_EQ(p.B, 2);
      loss = model.forward(p);  // each piece's loss added to the ones before
      model.backward();
      EXPECT_EQ(model.last_B(), 2);
    }
    EXPECT_NEAR(loss, whole, 1e-6 * whole);
    EXPECT_TRUE(test::all_close(model.grads(), g.data(), g.size(), 1e-7f, 1e-5f, "gradients"));
    // One piece is the batch itself, untouched: the same bits as without accumulation.
    const std::vector<Batch>& one = dp.pieces(mine, 1);
    ASSERT_EQ(one.size(), 1u);
    EXPECT_EQ(one[0].mean_over, 0);
    EXPECT_FALSE(one[0].add_loss);
    EXPECT_NE(test::error_of([&] { dp.pieces(mine, 3); }).find("a batch of 8 rows does not divide into 3 pieces"),
              std::string::npos);
  }
}

// A run moved to a machine with less memory resumes in more pieces: the same batches,
// the run it would have been (to rounding), the new setting saved with it.
TEST(GradAccum, AResumeMayTakeItsBatchesInOtherPieces) {
  test::TempDir dir("accum_resume");
  const std::string run = test::gmlp_exe() + " train --data " + test::kGplText +
                          " --set model.d_model=16 --set model.d_ffn=32 --set model.n_layers=2 --set model.seq_len=16"
                          " --set model.dropout=0.1 --batch-size 8 --steps 10 --log-every 1 --eval-every 5"
                          " --set train.eval_batches=2 --no-progress --out ";
  auto whole = test::run_command(run + dir.file("whole") + " 2>&1");
  ASSERT_EQ(whole.exit_code, 0) << whole.output;
  auto half = test::run_command(run + dir.file("moved") + " --grad-accum 2 --stop-after 4 2>&1");
  ASSERT_EQ(half.exit_code, 0) << half.output;
  EXPECT_NE(half.output.find("gradients accumulated over 2 pieces of 4 rows a step"), std::string::npos) << half.output;
  auto rest = test::run_command(test::gmlp_exe() + " train --out " + dir.file("moved") +
                                " --resume --grad-accum 4 --no-progress 2>&1");
  ASSERT_EQ(rest.exit_code, 0) << rest.output;
  EXPECT_NE(rest.output.find("the run took its batches in 2 piece(s) (train.grad_accum), it continues in 4"),
            std::string::npos)
      << rest.output;
  EXPECT_NE(rest.output.find("gradients accumulated over 4 pieces of 2 rows a step"), std::string::npos) << rest.output;
  expect_same_run(dir.file("whole"), dir.file("moved"), true);
  EXPECT_EQ(parse_json(read_file(dir.file("moved") + "/config.json"), "config.json")["train"]["grad_accum"], 4);
}

// Settings that cannot be met end the command with the setting named, before a run
// directory is made or a saved run is touched.
TEST(GradAccum, SettingsThatCannotBeMetAreRefusedBeforeAnythingIsWritten) {
  test::TempDir dir("accum_refused");
  const std::string run = test::gmlp_exe() + " train --data " + test::kGplText +
                          " --set model.d_model=8 --set model.d_ffn=16 --set model.n_layers=1 --set model.seq_len=8"
                          " --steps 2 --no-progress";
  for (const auto& [flags, said] : std::vector<std::pair<std::string, std::string>>{
           {" --batch-size 8 --grad-accum 3", "'batch_size' (8) must be a multiple of 'grad_accum' (3)"},
           {" --grad-accum 0", "'grad_accum' must be positive"},
           {" --grad-accum two", "--grad-accum: not a number: 'two'"},
           {" --set train.grad_accum=1.5", "grad_accum"}}) {
    SCOPED_TRACE(flags);
    const auto r = test::run_command(run + flags + " --out " + dir.file("new") + " 2>&1");
    EXPECT_NE(r.exit_code, 0);
    EXPECT_NE(r.output.find(said), std::string::npos) << r.output;
    EXPECT_FALSE(fs::exists(dir.file("new")));
  }
  // A saved run of batch 4, resumed in 3 pieces: refused, its state as it was.
  const auto made = test::run_command(run + " --batch-size 4 --out " + dir.file("saved") + " 2>&1");
  ASSERT_EQ(made.exit_code, 0) << made.output;
  const std::string state = read_file(state_file(dir.file("saved")));
  const auto r = test::run_command(test::gmlp_exe() + " train --out " + dir.file("saved") +
                                   " --resume --steps 4 --grad-accum 3 --no-progress 2>&1");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.output.find("'batch_size' (4) must be a multiple of 'grad_accum' (3)"), std::string::npos) << r.output;
  EXPECT_EQ(r.output.find("it continues in 3"), std::string::npos) << "announced, then refused:\n" << r.output;
  EXPECT_EQ(read_file(state_file(dir.file("saved"))), state);
  const auto zero = test::run_command(test::gmlp_exe() + " train --out " + dir.file("saved") +
                                      " --resume --grad-accum 0 --no-progress 2>&1");
  EXPECT_NE(zero.exit_code, 0);
  EXPECT_NE(zero.output.find("--grad-accum must be a positive integer (at most 2^31 - 1), got 0"), std::string::npos)
      << zero.output;
}

}  // namespace
}  // namespace gmlp
