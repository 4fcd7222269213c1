// The training loop of every task (gmlp/trainer.h): the task's batches, forward,
// backward, clipping, AdamW under the schedule, evaluation, the metrics log and
// atomic checkpoints, with exact resumption; on one process or data-parallel over the
// ranks of a communicator (src/train/data_parallel.h), where rank 0 alone writes.
#include "gmlp/trainer.h"

#include <omp.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <optional>
#include <span>
#include <sstream>

#include "gmlp/checkpoint.h"
#include "gmlp/error.h"
#include "gmlp/evaluate.h"
#include "gmlp/files.h"
#include "gmlp/metrics.h"
#include "gmlp/optimizer.h"
#include "gmlp/progress.h"
#include "gmlp/safetensors.h"
#include "train/batch_ahead.h"
#include "train/data_parallel.h"
#include "train/selection.h"
#include "train/tasks.h"

namespace gmlp {

std::atomic<bool> g_stop_requested{false};

std::string model_file(const std::string& d) { return (std::filesystem::path(d) / "model.safetensors").string(); }
std::string state_file(const std::string& d) { return (std::filesystem::path(d) / "train_state.safetensors").string(); }
std::string metrics_file(const std::string& d) { return (std::filesystem::path(d) / "metrics.jsonl").string(); }
std::string best_model_file(const std::string& d) { return (std::filesystem::path(d) / "best.safetensors").string(); }
std::string report_file(const std::string& d) { return (std::filesystem::path(d) / "report.json").string(); }
std::string ema_model_file(const std::string& d) {
  return (std::filesystem::path(d) / "model_ema.safetensors").string();
}

namespace {

using Clock = std::chrono::steady_clock;
double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

// The state file carries the run's config and data paths: a resumed run is exactly that
// run (only its total steps may grow). Returns the saved run metadata.
nlohmann::json read_resume(const TrainOptions& opts, RunConfig& rc, TaskInputs& in) {
  const std::string path = state_file(opts.out_dir);
  const auto sf = SafeTensorsFile::load(path);
  auto it = sf.metadata().find("gmlp.train_state");
  require(it != sf.metadata().end(), path + ": not a training state");
  nlohmann::json meta;
  try {
    meta = parse_json(it->second, path + ": training-state metadata").at("run");
    rc.model = ModelConfig::from_json(meta.at("config").at("model"), path);
    rc.train = TrainConfig::from_json(meta.at("config").at("train"), path);
    in.data_path = meta.at("data").get<std::string>();
    in.test_path = meta.value("test", std::string());
    // A run on in-memory data resumes only with data in memory again (the signature
    // below checks that it is the same data).
    require(meta.contains("memory") == (opts.data != nullptr),
            meta.contains("memory") ? "'" + opts.out_dir + "' was trained on data in memory; resume it with that data"
                                    : "'" + opts.out_dir + "' was trained on '" + in.data_path +
                                          "'; it resumes from that file, not from data in memory");
    in.val_path = meta.value("val", std::string());
    in.join_validation = meta.value("join_validation", false);
    (void)meta.at("data_tokens").get<int64_t>();
  } catch (const nlohmann::json::exception& e) {
    throw Error(path + ": malformed training-state metadata: " + e.what());
  }
  // Sums split across threads round differently at another thread count: the run
  // would go on, but no longer as the uninterrupted run would have.
  if (meta.contains("threads") && meta["threads"] != omp_get_max_threads())
    throw Error("'" + opts.out_dir + "' was trained at --threads " + meta["threads"].dump() + "; resume it with --threads " +
                meta["threads"].dump() + " (this process has " + std::to_string(omp_get_max_threads()) +
                "), or its results will differ in rounding from the uninterrupted run's");
  // Another number of ranks is allowed (the reason to resume elsewhere): the batches are
  // the same, only the rounding of the sums differs (docs/distributed.md).
  const int ranks = meta.value("ranks", 1);
  if (ranks != world().size() && world().rank() == 0)
    std::fprintf(stderr, "gmlp train: the run was trained on %d rank(s), it continues on %d: the same batches, "
                 "but its sums round differently from the uninterrupted run's\n", ranks, world().size());
  if (opts.extend_to > rc.train.steps) rc.train.steps = opts.extend_to;  // extend a finished run
  return meta;
}

constexpr const char* kReplacedSuffix = ".replaced";

// A run's checkpoints, which a new run in its directory sets aside until it has its own.
std::array<std::string, 4> checkpoint_files(const std::string& out_dir) {
  return {state_file(out_dir), model_file(out_dir), best_model_file(out_dir), ema_model_file(out_dir)};
}

void drop_replaced(const std::string& out_dir) {
  std::error_code ec;
  for (const std::string& f : checkpoint_files(out_dir)) std::filesystem::remove(f + kReplacedSuffix, ec);
}

// Creates and locks the run directory for the run's lifetime; a new run then clears
// an earlier one's checkpoints.
std::unique_ptr<DirLock> prepare_run_dir(const std::string& out_dir, bool resume) {
  namespace fs = std::filesystem;
  try {
    fs::create_directories(out_dir);
  } catch (const fs::filesystem_error& e) {
    throw Error("cannot use '" + out_dir + "' as the run directory: " + e.code().message());
  }
  auto lock = std::make_unique<DirLock>(out_dir);
  if (!resume) {
    // A new run replaces any earlier one here (the CLI asks for --overwrite): its
    // checkpoint must not stay under the names --resume reads, or a later --resume
    // would continue the old weights under the new run's log. It is set aside, not
    // deleted, until the new run has a checkpoint of its own (drop_replaced).
    std::error_code ec;
    for (const std::string& f : checkpoint_files(out_dir))
      if (!ec && fs::exists(f, ec)) fs::rename(f, f + kReplacedSuffix, ec);
    fs::remove(report_file(out_dir), ec);
    if (ec) throw Error("cannot clear '" + out_dir + "' for a new run: " + ec.message());
  }
  return lock;
}

std::string hex64(uint64_t v) {
  char buf[17];
  std::snprintf(buf, sizeof buf, "%016llx", (unsigned long long)v);
  return buf;
}

// The first parameter tensor whose gradient holds a NaN or Inf.
std::string first_non_finite_grad(const Model& model) {
  for (const auto& p : model.params())
    for (size_t i = 0; i < p.size; ++i)
      if (!std::isfinite(model.grads()[p.offset + i])) return p.name;
  return "?";
}

// The end of a finished run: the selected model (the best validation score, else the
// last) is scored once on the test set, and report.json says what was chosen and how
// it did. The test set chooses nothing.
nlohmann::json finish_report(Model& model, TrainTask& task, const Selection& sel, const std::string& out_dir, int B,
                             int64_t steps, bool early_stopped, bool score_test, ModelEma* ema) {
  if (sel.has_best()) load_weights(model, SafeTensorsFile::load(best_model_file(out_dir)));
  nlohmann::json r = {{"steps", steps},
                      {"train_examples", task.examples()},
                      {"early_stopped", early_stopped},
                      {"selected", {{"step", sel.has_best() ? sel.best_step() : steps},
                                    {"checkpoint", sel.has_best() ? "best.safetensors" : "model.safetensors"},
                                    {"by", sel.has_best() ? sel.to_json()["metric"] : nlohmann::json("last step")},
                                    {"validation", sel.best_metrics()}}},
                      {"test", score_test ? task.test_report(model, B) : nlohmann::json()}};
  // The average of the last step's weights (train.model_ema), scored too: the model a
  // recipe with it reports.
  if (ema && score_test && !r["test"].is_null())
    ema->swapped_in(model, [&] { r["ema"] = {{"test", task.test_report(model, B)}}; });
  write_file_atomic(report_file(out_dir), r.dump(2) + "\n");
  return r;
}

}  // namespace

TrainSummary train(const TrainOptions& opts) {
  namespace fs = std::filesystem;
  Communicator& comm = world();
  const bool lead = comm.rank() == 0;  // prints, logs, checkpoints and holds the run directory
  RunConfig rc = opts.run;
  TaskInputs in{opts.data_path, opts.test_path, opts.val_path, opts.data.get(), opts.join_validation, &comm};
  std::string init_from = opts.init_from;
  nlohmann::json resume_meta;
  if (opts.resume) resume_meta = read_resume(opts, rc, in);
  // The pieces may change on a resume too (a run moved to a machine with less memory,
  // or fewer GPUs): the same batches, summed in other pieces.
  const int saved_pieces = rc.train.grad_accum;
  if (opts.grad_accum > 0) rc.train.grad_accum = opts.grad_accum;
  rc.model.validate(/*open=*/true);
  rc.train.validate();
  auto task = make_task(rc, in);  // completes and validates the model config
  // Epochs are a budget over the training examples; the steps they make are saved with
  // the run, so a resumed run keeps them.
  if (!opts.resume && rc.train.epochs > 0)
    rc.train.steps = std::max<int64_t>(
        1, int64_t(std::ceil(double(rc.train.epochs) * double(task->examples()) / double(rc.train.batch_size))));
  const TrainConfig& tc = rc.train;
  const int B = tc.batch_size, pieces = tc.grad_accum;
  // Held-out data is scored in batches of B / pieces, as many more of them: the same
  // examples (the batches of a text task's held-out windows are consecutive); one
  // layer's activations of them, where a training piece's arena holds every layer's.
  const int eval_B = B / pieces;
  const int64_t eval_batches = tc.eval_batches * int64_t(pieces);
  require(int64_t(B) * rc.model.seq_len <= (int64_t(1) << 28),
          "batch_size x seq_len = " + std::to_string(int64_t(B) * rc.model.seq_len) +
              " tokens per step is more than one step can hold");
  require(B % comm.size() == 0, "train.batch_size = " + std::to_string(B) + " is the global batch, split evenly over the " +
                                    std::to_string(comm.size()) + " processes of this job: it must be a multiple of " +
                                    std::to_string(comm.size()));
  require(B % (comm.size() * pieces) == 0, [&] {
    return "train.batch_size = " + std::to_string(B) + " is split over " + std::to_string(comm.size()) +
           " process(es), each taking its rows in train.grad_accum = " + std::to_string(pieces) +
           " pieces: it must be a multiple of " + std::to_string(comm.size() * pieces);
  });
  if (opts.resume && pieces != saved_pieces && comm.rank() == 0)
    std::fprintf(stderr,
                 "gmlp train: the run took its batches in %d piece(s) (train.grad_accum), it continues in %d: "
                 "the same batches, but its sums round differently from the uninterrupted run's\n",
                 saved_pieces, pieces);
  if (comm.size() > 1 && opts.device == Device::cuda) {
    // A GPU model's gradients are summed by NCCL: opened here, before anything is
    // written, so that a machine without it ends the job with nothing half-made.
    device_reducer(opts.device, comm);
  }
  const int64_t signature = task->data_signature();
  const std::string fingerprint = hex64(task->data_fingerprint());
  if (opts.resume) {
    require(resume_meta.at("data_tokens").get<int64_t>() == signature,
            "'" + in.data_name() + "' has changed since the run started (" + std::to_string(signature) + " now, " +
                std::to_string(resume_meta.at("data_tokens").get<int64_t>()) + " then)");
    // States written before fingerprints existed carry only the size.
    if (resume_meta.contains("data_fingerprint"))
      require(resume_meta["data_fingerprint"] == fingerprint,
              "'" + in.data_name() + "' is not the data this run was trained on: same size, but its content " +
                  "fingerprint is " + fingerprint + ", the run's is " + resume_meta["data_fingerprint"].dump());
  }

  const auto lock = lead ? prepare_run_dir(opts.out_dir, opts.resume) : nullptr;
  Model model(rc.model, opts.device);
  model.set_sparse_mlm_head(true);  // masked LM: the output layer only where there are targets
  Rng init_rng(tc.seed, 1);
  model.init(init_rng);
  if (!opts.resume && !init_from.empty()) {
    const size_t copied = init_from_checkpoint(model, init_from);
    if (lead)
      std::fprintf(stderr, "gmlp train: %zu of %zu tensors initialised from %s (new head)\n", copied,
                 model.params().size(), init_from.c_str());
  }
  AdamW opt(model, tc);
  // ZeRO-1: each rank keeps the moments of its block of the parameters, updates that
  // block, and the ranks exchange the updated blocks. The same numbers, 1/P of the
  // moments' memory per rank.
  if (opts.shard_optimizer && comm.size() > 1) {
    const Block mine = block_of(model.num_params(), comm.rank(), comm.size());
    opt.shard(mine.begin, mine.end);
  }
  Selection selection = Selection::from_json(opts.resume ? resume_meta.value("selection", nlohmann::json()) : nullptr);
  TrainState st;
  st.rng.seed_with(tc.seed, 2);
  double log_sum = 0.0;
  int64_t log_count = 0;
  std::vector<float> saved_ema;  // the weights' average a resumed run saved
  if (opts.resume) {
    st = load_train_state(model, opt, state_file(opts.out_dir), tc.model_ema > 0 ? &saved_ema : nullptr);
    log_sum = resume_meta.value("log_sum", 0.0);
    log_count = resume_meta.value("log_count", int64_t(0));
    if (lead) {
      truncate_metrics(metrics_file(opts.out_dir), st.step);
      // A kill between the state's and the model's renames leaves the model a checkpoint
      // behind: the state is the run, so the model file follows it.
      save_model(model, model_file(opts.out_dir));
    }
  } else if (lead) {
    write_file_atomic(metrics_file(opts.out_dir), "");
  }
  // The weights' average (train.model_ema): from the model as it starts, or as saved.
  std::optional<ModelEma> ema;
  if (tc.model_ema > 0) {
    ema.emplace(model, tc.model_ema);
    if (opts.resume) {
      ema->set_weights(saved_ema);
      // As the model file, it follows the state.
      if (lead) save_model(model, ema_model_file(opts.out_dir), saved_ema.data());
      std::vector<float>().swap(saved_ema);  // the device holds it now
    }
  }
  std::optional<MetricsLog> log;
  if (lead) {
    write_file_atomic((fs::path(opts.out_dir) / "config.json").string(), rc.to_json().dump(2) + "\n");
    log.emplace(metrics_file(opts.out_dir));
  }
  DataParallel dp(comm, model);
  dp.check_in_sync(st.step);  // every rank starts from the same weights
  task->place_batches(model.backend());
  // Each rank makes only its own rows of a batch (a batch that does not divide among the
  // ranks is refused at the first step, by DataParallel::shard).
  if (rc.train.batch_size % comm.size() == 0) {
    const DataParallel::Rows mine = dp.rows(rc.train.batch_size);
    task->fill_rows(mine.first, mine.count);
  }
  task->seek(st.step * int64_t(rc.train.batch_size));
  BatchAhead ahead(*task, rc.model, dp, model.backend());

  int64_t saved_step = -1;
  std::vector<float> whole_m, whole_v;  // a sharded optimizer's moments, gathered on rank 0 to be saved
  auto checkpoint = [&]() {
    dp.check_in_sync(st.step);
    saved_step = st.step;
    if (opt.sharded()) {
      if (lead) {
        whole_m.resize(model.num_params());
        whole_v.resize(model.num_params());
      }
      comm.gather_blocks(whole_m.data(), opt.m().data(), model.num_params(), 0);
      comm.gather_blocks(whole_v.data(), opt.v().data(), model.num_params(), 0);
    }
    if (!lead) return;
    auto absolute = [&](const std::string& p) { return p.empty() || in.memory ? std::string() : fs::absolute(p).string(); };
    st.run = {{"config", rc.to_json()},
              {"data", absolute(in.data_path)},
              {"test", absolute(in.test_path)},
              {"val", absolute(in.val_path)},
              {"selection", selection.to_json()},
              {"data_tokens", signature},
              {"data_fingerprint", fingerprint},
              {"threads", omp_get_max_threads()},
              {"ranks", comm.size()},
              {"log_sum", log_sum},
              {"log_count", log_count}};
    if (in.memory) st.run["memory"] = in.memory->name;
    if (in.join_validation) st.run["join_validation"] = true;
    const std::vector<float> ema_now = ema ? ema->weights() : std::vector<float>();
    const float* ema_saved = ema ? ema_now.data() : nullptr;
    if (opt.sharded())
      save_train_state(model, whole_m.data(), whole_v.data(), opt.steps_taken(), st, state_file(opts.out_dir),
                       ema_saved);
    else
      save_train_state(model, opt, st, state_file(opts.out_dir), ema_saved);
    save_model(model, model_file(opts.out_dir));
    if (ema) save_model(model, ema_model_file(opts.out_dir), ema_saved);
    drop_replaced(opts.out_dir);
  };

  if (lead) {
    std::fprintf(stderr, "gmlp train: %s, %zu parameters; %s, batch %d\n", name_of(rc.model.task).c_str(),
                 model.num_params(), task->describe().c_str(), B);
    if (model.device() != Device::cpu)
      std::fprintf(stderr, "gmlp train: on %s\n", model.backend().device_name().c_str());
    if (comm.size() > 1)
      std::fprintf(stderr, "gmlp train: %s, %d rows of each batch per rank\n", dp.describe().c_str(),
                   B / comm.size());
    if (pieces > 1)
      std::fprintf(stderr, "gmlp train: gradients accumulated over %d pieces of %d rows a step%s\n", pieces,
                   B / (comm.size() * pieces), comm.size() > 1 ? " on each rank" : "");
    if (opt.sharded())
      std::fprintf(stderr, "gmlp train: optimizer state sharded (ZeRO-1): each rank keeps AdamW's moments for %zu of "
                   "%zu parameters\n", opt.m().size(), model.num_params());
    if (opts.resume)
      std::fprintf(stderr, "gmlp train: resuming %s at step %lld\n", opts.out_dir.c_str(), (long long)st.step);
  }

  Progress bar(tc.steps, lead && opts.progress_bar && isatty(fileno(stderr)), task->unit());
  TrainSummary sum;
  const int64_t first = st.step;
  auto t_start = Clock::now();
  const double elapsed_before = st.elapsed_s;
  double window_time = 0.0, window_wait = 0.0;
  int64_t window_units = 0;
  const std::string per_s = std::string(task->unit()) + "_per_s";

  bool stop = false;  // on_log asked to stop (rank 0's; the step vote carries it to the others)
  auto write_log = [&](const nlohmann::json& line) {
    if (!lead) return;
    log->write(line);
    if (opts.on_log && !opts.on_log(line)) stop = true;
  };
  // An early-stopped run stays stopped: resuming it only finishes it again.
  sum.early_stopped = selection.exhausted(tc.patience);
  // The pipeline (TrainOptions::pipeline): on a device, whether the next step's forward
  // has been queued (forwarded), and the run's RNG before its batch was drawn.
  const bool ahead_of_reads = opts.pipeline && !model.backend().host_memory();
  bool forwarded = false;
  Rng rng_before_forward;
  // A step's batch in its pieces (one without accumulation): the first forwarded here
  // (or ahead, by the pipeline), the rest by queue_train_step.
  std::span<const Batch> rest;
  // The training loss smooths its targets (train.label_smoothing); evaluations score the
  // plain ones.
  auto forward_first = [&](Batch mine) {
    mine.label_smoothing = tc.label_smoothing;
    const std::vector<Batch>& p = dp.pieces(mine, pieces);
    model.forward_queued(p[0]);
    rest = std::span<const Batch>(p).subspan(1);
  };
  // What follows step n (counted from 1) besides its log line: the loop below and the
  // pipeline's choice ask the same questions.
  auto evaluates_after = [&](int64_t n) { return n % tc.eval_every == 0 || n == tc.steps; };
  auto checkpoints_after = [&](int64_t n) { return n % tc.ckpt_every == 0 || n == tc.steps; };
  auto stops_after = [&](int64_t n) { return opts.stop_after > 0 && n - first >= opts.stop_after; };
  while (st.step < tc.steps && !sum.early_stopped) {
    // With several ranks a stop request waits for the step's vote below, which every
    // rank takes part in: they all stop after the same step. Early stopping needs no
    // vote: every rank computes the same validation score (evaluation is reduced).
    if ((comm.size() == 1 && (stop || g_stop_requested.load())) || stops_after(st.step)) {
      sum.interrupted = true;
      break;
    }
    auto t0 = Clock::now();
    if (!forwarded) forward_first(ahead.take(st.rng));
    forwarded = false;
    const float lr = learning_rate(tc, rc.model.d_model, st.step + 1);
    // The backward starts the gradients' reductions across ranks, layer by layer. A step
    // whose loss or gradient is not finite updates nothing (decided on the device; the
    // host waits once a step, for its loss and norm), and the run ends on it below: the weights
    // and the last checkpoint stay the last good state.
    queue_train_step(
        model, opt, tc.clip, lr, [&] { window_wait += dp.finish_backward(); },
        [&] {
          if (opt.sharded()) dp.allgather_weights();
          if (ema) ema->update(model);
          if (st.step + 1 < tc.steps) ahead.draw(st.rng);  // while the device runs this step
        },
        comm.size() > 1, rest);
    // The next step's forward goes in behind this step's update, before its loss is read
    // back: the device runs on while the host reads, checks and logs this step and queues
    // the next one's backward. Its batch's draws move the run's RNG, so the RNG as this
    // step left it is kept for a stop in between (below). Only where nothing this step
    // ends in reads the model (an evaluation, a checkpoint) or could stop the run but an
    // interruption, which leaves the forward unused: it changes no weight, moment or
    // gradient, so this step's divergence, too, is reported as it would be without it.
    const double share = dp.share();  // this step's, before the next batch's take moves it
    const int64_t done = st.step + 1;
    if (ahead_of_reads && !evaluates_after(done) && !checkpoints_after(done) && !stops_after(done) && !stop &&
        !g_stop_requested.load()) {
      rng_before_forward = st.rng;
      forward_first(ahead.take(st.rng));
      forwarded = true;
    }
    const StepResult r = finish_train_step(model, opt, comm.size() > 1);
    const DataParallel::Vote vote = dp.agree(r.loss, share, stop || g_stop_requested.load());
    const double loss = vote.loss, gnorm = r.grad_norm;
    require(std::isfinite(loss), [&] {
      return "training diverged: loss is " + std::to_string(loss) + " at step " + std::to_string(st.step + 1) +
             " (try a lower lr); the last checkpoint is kept";
    });
    require(std::isfinite(gnorm), [&] {
      return "training diverged: the gradient of '" + first_non_finite_grad(model) + "' is not finite at step " +
             std::to_string(st.step + 1) + " (try a lower lr); the last checkpoint is kept";
    });
    ++st.step;
    window_time += seconds_since(t0);
    window_units += task->units_per_batch();
    log_sum += loss;
    ++log_count;
    sum.last_loss = loss;

    if (st.step % tc.log_every == 0 || st.step == tc.steps) {
      const double ups = window_time > 0 ? double(window_units) / window_time : 0.0;
      const double mean = log_sum / double(log_count);
      nlohmann::json line = {{"step", st.step}, {"loss", mean}, {"lr", lr}, {"grad_norm", gnorm}, {per_s, ups},
                             {"elapsed_s", elapsed_before + seconds_since(t_start)}};
      // Seconds per step spent waiting for gradient reductions: what backward did not hide.
      if (comm.size() > 1) line["comm_wait_s"] = window_wait / double(log_count);
      write_log(line);
      if (lead) bar.update(st.step, mean, ups);
      log_sum = 0.0;
      log_count = 0;
      window_time = window_wait = 0.0;
      window_units = 0;
    }
    if (evaluates_after(st.step)) {
      nlohmann::json ev = task->evaluate(model, eval_B, eval_batches, comm);
      if (!ev.is_null()) {
        nlohmann::json line = {{"step", st.step}};
        line.update(ev);
        std::string note = "step " + std::to_string(st.step) + ": " + task->summarize(ev);
        // The average's evaluation (every rank, as the model's), logged as ema_<metric>.
        nlohmann::json ema_line = nlohmann::json::object();
        if (ema) {
          nlohmann::json ee;
          ema->swapped_in(model, [&] { ee = task->evaluate(model, eval_B, eval_batches, comm); });
          for (const auto& [k, v] : ee.items()) ema_line["ema_" + k] = v;
          note += "; average of the weights: " + task->summarize(ee);
        }
        line.update(ema_line);
        write_log(line);
        if (lead) bar.note(note);
        sum.val_metrics = ev;
        sum.val_metrics.update(ema_line);
        // Every rank keeps the same selection (the evaluation is reduced); rank 0 writes.
        if (task->selects_on_validation() && selection.update(ev, st.step) && lead)
          save_model(model, best_model_file(opts.out_dir));
        sum.early_stopped = selection.exhausted(tc.patience);
      }
    }
    st.elapsed_s = elapsed_before + seconds_since(t_start);
    if (checkpoints_after(st.step) || sum.early_stopped) checkpoint();
    if (sum.early_stopped) {
      if (lead)
        bar.note("step " + std::to_string(st.step) + ": no better validation score in " + std::to_string(tc.patience) +
                 " evaluations; stopping (best at step " + std::to_string(selection.best_step()) + ")");
      break;
    }
    if (vote.stop && st.step < tc.steps) {
      sum.interrupted = true;
      break;
    }
  }
  st.elapsed_s = elapsed_before + seconds_since(t_start);
  // A step's forward queued ahead of a stop never runs its step: the run resumes from the
  // RNG that drew its batch.
  if (forwarded) st.rng = rng_before_forward;
  if (sum.interrupted && st.step > first && saved_step != st.step) checkpoint();
  if (lead) bar.finish();
  sum.best_step = selection.best_step();
  if (selection.has_best()) sum.best_metrics = selection.best_metrics();
  if (!sum.interrupted && lead)
    sum.report = finish_report(model, *task, selection, opts.out_dir, eval_B, st.step, sum.early_stopped,
                               opts.score_test, ema ? &*ema : nullptr);
  sum.steps = st.step;
  sum.train_examples = task->examples();
  sum.elapsed_s = st.elapsed_s;
  const double run_s = seconds_since(t_start);
  sum.tokens_per_s = run_s > 0 ? double(st.step - first) * double(task->units_per_batch()) / run_s : 0.0;
  sum.device_peak_mb = double(model.backend().peak_bytes()) / double(1 << 20);
  return sum;
}

bool holds_out_validation(const TrainOptions& o) {
  return !o.val_path.empty() || o.run.train.val_fraction > 0 || (o.data && o.data->val_texts.size() > 0);
}

TrainOptions refit_options(const TrainOptions& chosen, const TrainSummary& result, const std::string& out_dir) {
  require(!result.interrupted, "--refit: the run was interrupted before it chose a model; resume it first");
  require(result.best_step > 0 && result.train_examples > 0,
          "--refit needs a run that chose its checkpoint by validation (--val FILE or --val-fraction above 0)");
  TrainOptions o = chosen;
  o.out_dir = out_dir;
  o.resume = false;
  o.extend_to = 0;
  o.stop_after = 0;
  o.join_validation = true;
  o.score_test = true;
  o.run.train.val_fraction = 0.0f;
  o.run.train.epochs =
      float(double(result.best_step) * double(chosen.run.train.batch_size) / double(result.train_examples));
  return o;
}

}  // namespace gmlp
