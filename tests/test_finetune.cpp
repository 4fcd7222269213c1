// Fine-tuning on a user's labelled data (issue 13): dropout (a seed per training batch,
// none at evaluation, exact resumption; the masks themselves: test_dropout.cpp), model selection on a validation split with early
// stopping and epochs, long texts (head+tail, chunks averaged, Toeplitz windows longer
// than n), the search over settings, and the reports. Each test runs in about a second.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <random>

#include "gmlp/checkpoint.h"
#include "gmlp/classify.h"
#include "gmlp/error.h"
#include "gmlp/evaluate.h"
#include "gmlp/files.h"
#include "gmlp/metrics.h"
#include "gmlp/safetensors.h"
#include "gmlp/tokenizer.h"
#include "gmlp/trainer.h"
#include "test_util.h"

namespace gmlp {
namespace {

namespace fs = std::filesystem;
using test::run_command;
using test::write_sentences;

bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }


const std::string kSizes =
    " --set model.d_model=16 --set model.d_ffn=32 --set model.n_layers=2 --set model.seq_len=48"
    " --batch-size 16 --set train.warmup=5 --no-progress";

ModelConfig tiny_classifier(float dropout, float head_dropout, int seq_len = 12) {
  auto tok = make_byte_tokenizer(mlm_specials());
  ModelConfig c;
  c.task = Task::classify;
  c.n_classes = 3;
  c.d_model = 8;
  c.d_ffn = 16;
  c.n_layers = 2;
  c.seq_len = seq_len;
  c.tokenizer = tok->to_json();
  c.vocab_size = tok->vocab_size();
  c.dropout = dropout;
  c.head_dropout = head_dropout;
  return c;
}

// ---- dropout

TEST(Dropout, ATrainingBatchTakesOneSeedAndOnlyWhereTheConfigDrops) {
  ModelConfig c = tiny_classifier(0.25f, 0.f);
  Rng rng(3), twin(3);
  Batch batch;
  draw_dropout(c, rng, batch);
  EXPECT_TRUE(batch.dropout);
  EXPECT_EQ(batch.dropout_seed, twin.next_u64()) << "the seed is the RNG's next draw";
  EXPECT_EQ(rng.state(), twin.state()) << "and the only one";
  c = tiny_classifier(0.f, 0.5f);  // the head alone drops
  draw_dropout(c, rng, batch);
  EXPECT_TRUE(batch.dropout);
  EXPECT_EQ(batch.dropout_seed, twin.next_u64());
  c = tiny_classifier(0.f, 0.f);
  draw_dropout(c, rng, batch);
  EXPECT_FALSE(batch.dropout);
  EXPECT_EQ(rng.state(), twin.state()) << "no draw without dropout: a run without it is unchanged";
  c.task = Task::mlm;
  c.head_dropout = 0.1f;
  EXPECT_THROW(c.validate(), Error);  // a per-token head has no classifier input to drop
}

// Evaluation and inference draw no masks: a dropout model scores exactly as the same
// weights without dropout, while a training forward with masks differs.
TEST(Dropout, EvaluationIsMaskFreeAndTrainingMasksChangeTheForward) {
  Model with(tiny_classifier(0.5f, 0.5f)), without(tiny_classifier(0.f, 0.f));
  Rng init(7);
  with.init(init);
  std::copy(with.weights(), with.weights() + with.num_params(), without.weights());
  auto tok = tokenizer_from_json(with.config().tokenizer);
  LabelledSet set;
  set.class_names = {"a", "b", "c"};
  set.texts = {"hello there", "a longer sentence here", "x", "zz top"};
  set.labels = {0, 1, 2, 1};
  const ClassEval a = evaluate_texts(with, *tok, set, 3), b = evaluate_texts(without, *tok, set, 3);
  EXPECT_EQ(a.loss, b.loss);
  EXPECT_EQ(a.predictions, b.predictions);
  EXPECT_EQ(classify_text(with, *tok, "hello"), classify_text(without, *tok, "hello"));

  PaddedBatcher pb;
  pb.p = encode_padded(set.texts, *tok, 12);
  const size_t idx[4] = {0, 1, 2, 3};
  Batch batch = pb.make(idx, 4);
  batch.targets = set.labels.data();
  const double plain = with.forward(batch);
  Rng rng(1);
  draw_dropout(with.config(), rng, batch);
  ASSERT_TRUE(batch.dropout);
  EXPECT_THROW(without.forward(batch), Error) << "a model without dropout refuses a dropout batch";
  {
    NoGrad eval(with);
    EXPECT_THROW(with.forward(batch), Error) << "dropout is for training forwards";
  }
  const double dropped = with.forward(batch);
  EXPECT_NE(dropped, plain);
  EXPECT_EQ(with.forward(batch), dropped) << "the same seed drops the same";
  batch.dropout_seed += 1;
  EXPECT_NE(with.forward(batch), dropped) << "another seed drops otherwise";
  with.backward();  // the masked forward's backward runs (its values: the parity tests)
}

TEST(Dropout, ClassifierWithDropoutResumesExactlyAndDropoutChangesTraining) {
  test::TempDir dir("ft_dropout_resume");
  write_sentences(dir.file("train.tsv"), 30, 1);
  const std::string common = test::gmlp_exe() + " train --task classify --data " + dir.file("train.tsv") +
                             " --steps 12 --eval-every 4 --ckpt-every 5 --lr 1e-2" + kSizes;
  const std::string drop = " --set model.dropout=0.3 --set model.head_dropout=0.2";
  auto r = run_command(common + drop + " --out " + dir.file("straight"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  r = run_command(common + drop + " --out " + dir.file("split") + " --stop-after 7");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  r = run_command(test::gmlp_exe() + " train --out " + dir.file("split") + " --resume --no-progress");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(test::train_losses(dir.file("straight")), test::train_losses(dir.file("split")));
  EXPECT_EQ(read_file(model_file(dir.file("straight"))), read_file(model_file(dir.file("split"))));
  EXPECT_EQ(read_file(best_model_file(dir.file("straight"))), read_file(best_model_file(dir.file("split"))));
  r = run_command(common + " --out " + dir.file("plain"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(test::train_losses(dir.file("straight")), test::train_losses(dir.file("plain")));
}

// ---- model selection

// The report.json of the run in `run` (a run directory).
nlohmann::json read_report(const std::string& run) { return parse_json(read_file(report_file(run)), run + " report"); }

TEST(Selection, ValidationSplitBestCheckpointEarlyStopAndOneTestScore) {
  test::TempDir dir("ft_select");
  write_sentences(dir.file("train.tsv"), 40, 1);
  write_sentences(dir.file("test.tsv"), 10, 2);
  const std::string run = dir.file("run");
  // A learning rate too small to move: validation never improves after the first
  // evaluation, so patience 2 stops the run at the third.
  auto r = run_command(test::gmlp_exe() + " train --task classify --data " + dir.file("train.tsv") + " --test " +
                       dir.file("test.tsv") + " --out " + run +
                       " --steps 100 --eval-every 5 --patience 2 --val-fraction 0.25 --lr 1e-9 --set train.min_lr=0" +
                       kSizes);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_TRUE(contains(r.output, "finished after 15 steps")) << r.output;
  EXPECT_TRUE(contains(r.output, "stopped early")) << r.output;
  for (const auto& j : test::read_jsonl(metrics_file(run)))
    if (j.contains("val_acc")) {
      EXPECT_EQ(j["val_examples"], 30) << "validation is a quarter of the training file";
    }
  const auto rep = read_report(run);
  EXPECT_EQ(rep["selected"]["step"], 5);
  EXPECT_EQ(rep["selected"]["checkpoint"], "best.safetensors");
  EXPECT_EQ(rep["early_stopped"], true);
  EXPECT_EQ(rep["test"]["examples"], 30);
  EXPECT_TRUE(rep["test"]["baselines"].contains("naive_bayes"));
  EXPECT_NEAR(rep["test"]["baselines"]["majority"]["accuracy"].get<double>(), 1.0 / 3, 1e-9);
  EXPECT_EQ(rep["test"]["per_class"].size(), 3u);
  // The report's test score is the selected model's: gmlp eval on the run directory
  // (which resolves to best.safetensors) agrees.
  r = run_command(test::gmlp_exe() + " eval --model " + run + " --data " + dir.file("test.tsv") + " --json");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const auto ev = parse_json(r.output.substr(r.output.find('{')), "eval");
  EXPECT_DOUBLE_EQ(ev["accuracy"].get<double>(), rep["test"]["accuracy"].get<double>());
  // Resuming an early-stopped run trains no further.
  r = run_command(test::gmlp_exe() + " train --out " + run + " --resume --no-progress");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_TRUE(contains(r.output, "finished after 15 steps")) << r.output;
}

TEST(Selection, EpochsSetTheStepsAndAValidationFileReplacesTheSplit) {
  test::TempDir dir("ft_epochs");
  write_sentences(dir.file("train.tsv"), 20, 1);
  write_sentences(dir.file("val.tsv"), 4, 3);
  // 60 training texts, batch 16: 2.5 epochs = ceil(150 / 16) = 10 steps.
  auto r = run_command(test::gmlp_exe() + " train --task classify --data " + dir.file("train.tsv") + " --val " +
                       dir.file("val.tsv") + " --out " + dir.file("run") + " --epochs 2.5 --eval-every 5" + kSizes);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_TRUE(contains(r.output, "finished after 10 steps")) << r.output;
  EXPECT_TRUE(contains(r.output, "60 train / 12 validation / 0 test")) << r.output;
  // Another task has no use for validation texts: refused, not ignored.
  r = run_command(test::gmlp_exe() + " train --task mlm --data " + dir.file("train.tsv") + " --val " +
                  dir.file("val.tsv") + " --out " + dir.file("mlm") + kSizes);
  EXPECT_NE(r.exit_code, 0);
  EXPECT_TRUE(contains(r.output, "validation texts (--val) are for text classification")) << r.output;
  EXPECT_FALSE(fs::exists(dir.file("mlm")));
}

// ---- long texts

TEST(LongText, HeadTailAndChunksKeepTheWholeText) {
  auto tok = build_char_tokenizer("abcdefghij", mlm_specials());
  const std::string text = "abcdefghij";  // 10 tokens, ids 0..9
  auto ids = [&](const PaddedTokens& p, int row) {
    return std::vector<int32_t>(p.tokens.begin() + row * p.T, p.tokens.begin() + row * p.T + p.lengths[size_t(row)]);
  };
  const PaddedTokens head = encode_padded({text, "ab"}, *tok, 8, LongText::head);
  EXPECT_EQ(head.rows, 2);
  EXPECT_EQ(head.truncated, 1);
  EXPECT_EQ(ids(head, 0), (std::vector<int32_t>{0, 1, 2, 3, 4, 5, 6, 7}));
  const PaddedTokens ht = encode_padded({text}, *tok, 8, LongText::head_tail);
  EXPECT_EQ(ids(ht, 0), (std::vector<int32_t>{0, 1, 4, 5, 6, 7, 8, 9}));  // 8/4 = 2 head, 6 tail
  const PaddedTokens ch = encode_padded({"ab", text}, *tok, 4, LongText::chunks);
  ASSERT_EQ(ch.rows, 4);
  EXPECT_EQ(ch.owner, (std::vector<int32_t>{0, 1, 1, 1}));
  EXPECT_EQ(ids(ch, 1), (std::vector<int32_t>{0, 1, 2, 3}));
  EXPECT_EQ(ids(ch, 2), (std::vector<int32_t>{4, 5, 6, 7}));
  EXPECT_EQ(ids(ch, 3), (std::vector<int32_t>{6, 7, 8, 9}));  // the last window ends at the text's end
}

TEST(LongText, ChunksAverageTheWindowsProbabilities) {
  ModelConfig c = tiny_classifier(0.f, 0.f, 8);
  c.long_text = LongText::chunks;
  Model m(c);
  Rng init(11);
  m.init(init);
  auto tok = tokenizer_from_json(c.tokenizer);
  const std::string text = "0123456789abcdefghij";  // 20 bytes: windows [0,8), [8,16), [12,20)
  const auto p = classify_text(m, *tok, text);
  std::vector<float> mean(3, 0.f);
  for (const std::string& w : {text.substr(0, 8), text.substr(8, 8), text.substr(12, 8)}) {
    const auto q = classify_text(m, *tok, w);
    for (int j = 0; j < 3; ++j) mean[size_t(j)] += q[size_t(j)] / 3.f;
  }
  for (int j = 0; j < 3; ++j) EXPECT_NEAR(p[size_t(j)], mean[size_t(j)], 1e-6f);
}

TEST(LongText, AToeplitzClassifierRunsAtAWindowLongerThanItsN) {
  ModelConfig c = tiny_classifier(0.f, 0.f, 8);
  c.text_window = 24;
  EXPECT_THROW(c.validate(), Error) << "a full W has only n positions";
  c.spatial = Spatial::toeplitz;
  c.validate();
  Model m(c);
  Rng init(2);
  m.init(init);
  auto tok = tokenizer_from_json(c.tokenizer);
  // The last 16 bytes are inside the window now: they change the prediction.
  const auto a = classify_text(m, *tok, "aaaaaaaaxxxxxxxxxxxxxxxx"), b = classify_text(m, *tok, "aaaaaaaayyyyyyyyyyyyyyyy");
  EXPECT_NE(a, b);
}

TEST(LongText, FinetuneAToeplitzMaskedLmAtALongerWindow) {
  test::TempDir dir("ft_toeplitz");
  write_sentences(dir.file("train.tsv"), 10, 1, 8);
  const std::string mlm = dir.file("mlm");
  auto r = run_command(test::gmlp_exe() + " train --task mlm --data " + test::kGplText + " --out " + mlm +
                       " --steps 3 --set model.spatial=\"toeplitz\" --set model.seq_len=16 --set model.d_model=16"
                       " --set model.d_ffn=32 --set model.n_layers=2 --batch-size 4 --no-progress");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  r = run_command(test::gmlp_exe() + " finetune --init-from " + mlm + " --data " + dir.file("train.tsv") + " --out " +
                  dir.file("ft") + " --steps 4 --batch-size 8 --set model.text_window=64 --no-progress");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_TRUE(contains(r.output, "window 64")) << r.output;
  EXPECT_TRUE(contains(r.output, "of 25 tensors initialised")) << r.output;
  EXPECT_EQ(load_model(model_file(dir.file("ft")))->config().window(), 64);
}

// ---- search and reports

// A classifier trained on 20 sentences of each class (a fifth held out for validation)
// and tested on 5 of each, into `out`, with `options` added.
test::CommandResult classify_run(const test::TempDir& dir, const std::string& out, const std::string& options) {
  write_sentences(dir.file("train.tsv"), 20, 1);
  write_sentences(dir.file("test.tsv"), 5, 2);
  return run_command(test::gmlp_exe() + " train --task classify --data " + dir.file("train.tsv") + " --test " +
                     dir.file("test.tsv") + " --out " + out + " --val-fraction 0.2 " + options + kSizes);
}

TEST(Grid, EverySettingInItsDirectoryChosenByValidationTestScoredOnce) {
  test::TempDir dir("ft_grid");
  const std::string out = dir.file("grid");
  auto r = classify_run(dir, out, "--eval-every 4 --grid lr=1e-9,1e-2 --grid epochs=1,2 --set train.min_lr=0");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const auto g = parse_json(read_file(out + "/grid.json"), "grid.json");
  ASSERT_EQ(g["settings"].size(), 4u);
  for (const auto& s : g["settings"]) {
    const std::string name = s["name"];
    EXPECT_TRUE(fs::exists(out + "/" + name + "/best.safetensors")) << name;
    const auto rep = read_report(out + "/" + name);
    // Only the chosen setting's report has a test score.
    EXPECT_EQ(rep["test"].is_null(), name != g["chosen"].get<std::string>()) << name;
  }
  EXPECT_TRUE(contains(g["chosen"].get<std::string>(), "lr=1e-2")) << g.dump();
  EXPECT_EQ(g["test"]["examples"], 15);
  EXPECT_TRUE(contains(r.output, "<- chosen")) << r.output;
  // Every setting is checked before the first trains: a bad last value trains nothing.
  r = classify_run(dir, dir.file("bad"), "--grid lr=1e-3,-1");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_TRUE(contains(r.output, "search setting lr=-1 [train]: config: 'lr' must be positive")) << r.output;
  EXPECT_FALSE(fs::exists(dir.file("bad")));
}

// --refit: choose by validation, then train the chosen settings again on the training
// and validation texts together for the passes the chosen checkpoint had seen; only
// that model meets the test set.
TEST(Refit, TrainsOnTrainingAndValidationForTheSelectedPassesAndOnlyItIsTested) {
  test::TempDir dir("ft_refit");
  const std::string out = dir.file("run");
  auto r = classify_run(dir, out, "--steps 12 --eval-every 2 --refit");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const auto chosen = read_report(out);
  EXPECT_TRUE(chosen["test"].is_null()) << chosen.dump();  // the test set waits for the refit
  const int64_t best = chosen["selected"]["step"], examples = chosen["train_examples"];
  const int64_t held_out = chosen["selected"]["validation"]["val_examples"];
  ASSERT_GT(best, 0);
  ASSERT_GT(held_out, 0);
  EXPECT_EQ(examples + held_out, 60);  // write_sentences: n sentences for each of 3 classes

  const std::string refit = out + "/refit";
  const auto rep = read_report(refit);
  EXPECT_EQ(rep["train_examples"], 60) << rep.dump();  // the validation texts trained too
  EXPECT_TRUE(rep["selected"]["validation"].is_null()) << rep.dump();
  EXPECT_EQ(rep["test"]["examples"], 15);
  const auto cfg = parse_json(read_file(refit + "/config.json"), "refit config")["train"];
  const double epochs = double(best) * 16 / double(examples);  // batch 16 (kSizes)
  EXPECT_NEAR(cfg["epochs"].get<double>(), epochs, 1e-5);
  EXPECT_EQ(cfg["val_fraction"], 0.0);
  EXPECT_EQ(rep["steps"], int64_t(std::ceil(float(epochs) * 60.0 / 16)));
  EXPECT_TRUE(contains(r.output, "60 train / 0 validation / 15 test texts")) << r.output;
  EXPECT_TRUE(contains(r.output, "refit: the selected step " + std::to_string(best))) << r.output;

  // A refit interrupted resumes as a refit: the validation texts stay in training.
  r = run_command(test::gmlp_exe() + " train --out " + refit + " --resume --steps " +
                  std::to_string(rep["steps"].get<int64_t>() + 2) + " --no-progress");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_TRUE(contains(r.output, "60 train / 0 validation")) << r.output;
}

TEST(Refit, AfterASearchTheRefitModelIsTheOneTested) {
  test::TempDir dir("ft_refit_grid");
  const std::string out = dir.file("grid");
  auto r = classify_run(dir, out, "--steps 8 --eval-every 2 --grid lr=1e-9,1e-2 --set train.min_lr=0 --refit");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const auto g = parse_json(read_file(out + "/grid.json"), "grid.json");
  EXPECT_TRUE(g["refit"].get<bool>());
  EXPECT_EQ(g["model"], model_file(out + "/refit"));
  EXPECT_EQ(g["test"]["examples"], 15);
  for (const auto& s : g["settings"])  // no trial met the test set
    EXPECT_TRUE(read_report(out + "/" + s["name"].get<std::string>())["test"].is_null());
  const auto chosen_cfg = parse_json(read_file(out + "/" + g["chosen"].get<std::string>() + "/config.json"), "c");
  EXPECT_EQ(parse_json(read_file(out + "/refit/config.json"), "refit")["train"]["lr"], chosen_cfg["train"]["lr"]);
  EXPECT_TRUE(contains(r.output, "refitted: test accuracy")) << r.output;
}

TEST(Refit, NeedsValidationAClassifierAndAFreshRunAndWritesNothingOtherwise) {
  test::TempDir dir("ft_refit_bad");
  write_sentences(dir.file("train.tsv"), 10, 1);
  const std::string base = test::gmlp_exe() + " train --data " + dir.file("train.tsv") + " --steps 2" + kSizes +
                           " --refit --out ";
  auto r = run_command(base + dir.file("a") + " --task classify --val-fraction 0");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_TRUE(contains(r.output, "--refit trains again on the validation texts")) << r.output;
  EXPECT_FALSE(fs::exists(dir.file("a")));
  r = run_command(base + dir.file("b") + " --task mlm");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_TRUE(contains(r.output, "--refit is for text classification")) << r.output;
  EXPECT_FALSE(fs::exists(dir.file("b")));
  r = run_command(test::gmlp_exe() + " train --out " + dir.file("c") + " --resume --refit");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_TRUE(contains(r.output, "--refit cannot be combined with --resume")) << r.output;
}

TEST(Reports, ClassReportAndClassifyFileFormats) {
  // 2 classes: 3 of 4 "a" right, 1 of 2 "b" right.
  const auto rep = class_report({3, 1, 1, 1}, {"a", "b"});
  EXPECT_DOUBLE_EQ(rep["accuracy"].get<double>(), 4.0 / 6);
  EXPECT_DOUBLE_EQ(rep["per_class"][0]["precision"].get<double>(), 0.75);
  EXPECT_DOUBLE_EQ(rep["per_class"][0]["recall"].get<double>(), 0.75);
  EXPECT_DOUBLE_EQ(rep["per_class"][1]["precision"].get<double>(), 0.5);
  EXPECT_DOUBLE_EQ(rep["macro_f1"].get<double>(), (0.75 + 0.5) / 2);

  test::TempDir dir("ft_reports");
  write_sentences(dir.file("train.tsv"), 10, 1);
  auto r = run_command(test::gmlp_exe() + " train --task classify --data " + dir.file("train.tsv") + " --out " +
                       dir.file("run") + " --steps 3" + kSizes);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  std::ofstream(dir.file("in.txt")) << "the red cat\na one\n";
  r = run_command(test::gmlp_exe() + " classify --model " + dir.file("run") + " --file " + dir.file("in.txt") +
                  " --format tsv");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_TRUE(contains(r.output, "label\tanimals\tcolours\tnumbers\ttext\n")) << r.output;
  r = run_command(test::gmlp_exe() + " classify --model " + dir.file("run") + " --file " + dir.file("in.txt") +
                  " --format jsonl");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  int lines = 0;
  for (size_t p = 0; (p = r.output.find("{\"label\"", p)) != std::string::npos; ++p) {
    const auto j = parse_json(r.output.substr(p, r.output.find('\n', p) - p), "jsonl");
    double sum = 0;
    for (const auto& [k, v] : j["probabilities"].items()) sum += v.get<double>();
    EXPECT_NEAR(sum, 1.0, 1e-5);
    ++lines;
  }
  EXPECT_EQ(lines, 2);
  // The same texts saved with Windows line ends and a byte-order mark classify the same,
  // with no '\r' left in a text.
  std::ofstream(dir.file("crlf.txt")) << "\xEF\xBB\xBFthe red cat\r\na one\r\n";
  const auto crlf = run_command(test::gmlp_exe() + " classify --model " + dir.file("run") + " --file " +
                                dir.file("crlf.txt") + " --format jsonl");
  ASSERT_EQ(crlf.exit_code, 0) << crlf.output;
  EXPECT_EQ(crlf.output, r.output);
  r = run_command(test::gmlp_exe() + " classify --model " + dir.file("run") + " --text x --format xml");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_TRUE(contains(r.output, "--format")) << r.output;
}

}  // namespace
}  // namespace gmlp
