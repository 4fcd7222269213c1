#include "gmlp/trainer.h"

#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "gmlp/checkpoint.h"
#include "gmlp/error.h"
#include "gmlp/optimizer.h"
#include "gmlp/safetensors.h"
#include "train/progress.h"

namespace gmlp {

std::atomic<bool> g_stop_requested{false};

std::string model_file(const std::string& d) { return (std::filesystem::path(d) / "model.safetensors").string(); }
std::string state_file(const std::string& d) { return (std::filesystem::path(d) / "train_state.safetensors").string(); }
std::string metrics_file(const std::string& d) { return (std::filesystem::path(d) / "metrics.jsonl").string(); }

EvalResult evaluate(Model& model, const Tokenizer& tok, const std::vector<int32_t>& tokens, int batch,
                    int64_t max_batches) {
  const int window = model.config().seq_len + 1;
  NoGrad no_grad(model);
  std::vector<int32_t> buf(size_t(batch) * window);
  EvalResult r;
  double nats = 0.0;
  for (int64_t k = 0; max_batches <= 0 || k < max_batches; ++k) {
    const int rows = eval_batch(tokens, window, batch, k, buf.data());
    if (rows == 0) break;
    const double mean = model.forward(buf.data(), buf.data() + 1, window, rows, window - 1);
    const int64_t n = int64_t(rows) * (window - 1);
    nats += mean * double(n);
    r.tokens += n;
    for (int b = 0; b < rows; ++b)
      for (int t = 1; t < window; ++t) r.bytes += tok.token_bytes(buf[size_t(b) * window + t]);
  }
  if (r.tokens > 0) {
    r.loss = nats / double(r.tokens);
    r.bits_per_byte = nats / (std::log(2.0) * double(r.bytes));
  }
  return r;
}

namespace {

using Clock = std::chrono::steady_clock;
double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

// A char tokenizer without its characters is built from the corpus; errors (invalid
// UTF-8, an empty file) then name the corpus.
std::unique_ptr<Tokenizer> make_tokenizer(const nlohmann::json& spec, const std::string& data_path) {
  if (spec.is_object() && spec.value("kind", "") == "char" && !spec.contains("chars")) {
    const std::string text = read_file(data_path);
    try {
      return build_char_tokenizer(text);
    } catch (const Error& e) {
      throw Error("'" + data_path + "': " + e.what());
    }
  }
  return tokenizer_from_json(spec);
}

// Keeps the metrics lines of steps <= step, so a resumed run's log continues as if
// never interrupted (lines written after the last checkpoint are re-done).
void truncate_metrics(const std::string& path, int64_t step) {
  if (!std::filesystem::exists(path)) return;
  std::ifstream in(path);
  std::string line, kept;
  while (std::getline(in, line)) {
    if (line.empty()) continue;
    try {
      if (nlohmann::json::parse(line).value("step", int64_t(0)) > step) continue;
    } catch (const nlohmann::json::exception&) {
      continue;  // a line torn by a crash
    }
    kept += line + "\n";
  }
  write_file_atomic(path, kept);
}

class MetricsLog {
 public:
  explicit MetricsLog(const std::string& path) : f_(path, std::ios::app) {
    require(f_.good(), "cannot open metrics log '" + path + "' for writing");
  }
  void write(const nlohmann::json& j) {
    f_ << j.dump() << "\n";
    f_.flush();
  }

 private:
  std::ofstream f_;
};

}  // namespace

TrainSummary train(const TrainOptions& opts) {
  namespace fs = std::filesystem;
  RunConfig rc = opts.run;
  std::string data_path = opts.data_path;
  nlohmann::json resume_meta;
  if (opts.resume) {
    // The state file carries the run's config and data path: resume exactly that run.
    const std::string path = state_file(opts.out_dir);
    const auto sf = SafeTensorsFile::load(path);
    auto it = sf.metadata().find("gmlp.train_state");
    require(it != sf.metadata().end(), path + ": not a training state");
    try {
      resume_meta = nlohmann::json::parse(it->second).at("run");
      rc.model = ModelConfig::from_json(resume_meta.at("config").at("model"), path);
      rc.train = TrainConfig::from_json(resume_meta.at("config").at("train"), path);
      data_path = resume_meta.at("data").get<std::string>();
      (void)resume_meta.at("data_tokens").get<int64_t>();
    } catch (const nlohmann::json::exception& e) {
      throw Error(path + ": malformed training-state metadata: " + e.what());
    }
    if (opts.extend_to > rc.train.steps) rc.train.steps = opts.extend_to;  // extend a finished run
  }
  rc.model.validate();
  rc.train.validate();
  const TrainConfig& tc = rc.train;

  auto tok = make_tokenizer(rc.model.tokenizer, data_path);
  rc.model.tokenizer = tok->to_json();
  rc.model.vocab_size = tok->vocab_size();
  const int n = rc.model.seq_len, window = n + 1, B = tc.batch_size;
  require(int64_t(B) * n <= (int64_t(1) << 28), "batch_size x seq_len = " + std::to_string(int64_t(B) * n) +
                                                    " tokens per step is more than one step can hold");
  const TextCorpus corpus = TextCorpus::load(data_path, *tok, window, tc.val_fraction);
  const int64_t corpus_tokens = int64_t(corpus.train.size() + corpus.val.size());
  if (opts.resume)
    require(resume_meta.at("data_tokens").get<int64_t>() == corpus_tokens,
            "'" + data_path + "' has changed since the run started (" + std::to_string(corpus_tokens) +
                " tokens now, " + std::to_string(resume_meta.at("data_tokens").get<int64_t>()) + " then)");

  try {
    fs::create_directories(opts.out_dir);
    if (!opts.resume) {
      // A new run replaces any earlier one here (the CLI asks for --overwrite): its
      // checkpoint must not outlive the config and metrics written below, or a later
      // --resume would continue the old weights under the new run's log.
      fs::remove(state_file(opts.out_dir));
      fs::remove(model_file(opts.out_dir));
    }
  } catch (const fs::filesystem_error& e) {
    throw Error("cannot use '" + opts.out_dir + "' as the run directory: " + e.code().message());
  }
  Model model(rc.model);
  Rng init_rng(tc.seed, 1);
  model.init(init_rng);
  AdamW opt(model.params(), model.num_params(), tc);
  TrainState st;
  st.rng.seed_with(tc.seed, 2);
  double log_sum = 0.0;
  int64_t log_count = 0;
  if (opts.resume) {
    st = load_train_state(model, opt, state_file(opts.out_dir));
    log_sum = resume_meta.value("log_sum", 0.0);
    log_count = resume_meta.value("log_count", int64_t(0));
    truncate_metrics(metrics_file(opts.out_dir), st.step);
  } else {
    write_file_atomic(metrics_file(opts.out_dir), "");
  }
  write_file_atomic((fs::path(opts.out_dir) / "config.json").string(), rc.to_json().dump(2) + "\n");
  MetricsLog log(metrics_file(opts.out_dir));

  auto checkpoint = [&]() {
    st.run = {{"config", rc.to_json()},
              {"data", fs::absolute(data_path).string()},
              {"data_tokens", corpus_tokens},
              {"log_sum", log_sum},
              {"log_count", log_count}};
    save_train_state(model, opt, st, state_file(opts.out_dir));
    save_model(model, model_file(opts.out_dir));
  };

  std::fprintf(stderr, "gmlp train: %zu parameters, %zu train / %zu val tokens from %s, window %d, batch %d\n",
               model.num_params(), corpus.train.size(), corpus.val.size(), data_path.c_str(), n, B);
  if (opts.resume) std::fprintf(stderr, "gmlp train: resuming %s at step %lld\n", opts.out_dir.c_str(), (long long)st.step);

  Progress bar(tc.steps, opts.progress_bar && isatty(fileno(stderr)));
  std::vector<int32_t> batch(size_t(B) * window);
  TrainSummary sum;
  const int64_t first = st.step;
  auto t_start = Clock::now();
  const double elapsed_before = st.elapsed_s;
  double window_time = 0.0;
  int64_t window_tokens = 0;

  while (st.step < tc.steps) {
    if (g_stop_requested.load() || (opts.stop_after > 0 && st.step - first >= opts.stop_after)) {
      sum.interrupted = true;
      break;
    }
    auto t0 = Clock::now();
    sample_windows(corpus.train, B, window, st.rng, batch.data());
    model.zero_grad();
    const double loss = model.forward(batch.data(), batch.data() + 1, window, B, n);
    require(std::isfinite(loss), "training diverged: loss is " + std::to_string(loss) + " at step " +
                                     std::to_string(st.step + 1) + " (try a lower lr)");
    model.backward();
    const double gnorm = clip_grad_norm(model.grads(), model.num_params(), tc.clip);
    const float lr = learning_rate(tc, rc.model.d_model, st.step + 1);
    opt.step(model.weights(), model.grads(), lr);
    ++st.step;
    window_time += seconds_since(t0);
    window_tokens += int64_t(B) * n;
    log_sum += loss;
    ++log_count;
    sum.last_loss = loss;

    if (st.step % tc.log_every == 0 || st.step == tc.steps) {
      const double tps = window_time > 0 ? double(window_tokens) / window_time : 0.0;
      const double mean = log_sum / double(log_count);
      log.write({{"step", st.step}, {"loss", mean}, {"lr", lr}, {"grad_norm", gnorm}, {"tokens_per_s", tps},
                 {"elapsed_s", elapsed_before + seconds_since(t_start)}});
      bar.update(st.step, mean, tps);
      log_sum = 0.0;
      log_count = 0;
      window_time = 0.0;
      window_tokens = 0;
    }
    if (!corpus.val.empty() && (st.step % tc.eval_every == 0 || st.step == tc.steps)) {
      const EvalResult ev = evaluate(model, *tok, corpus.val, B, tc.eval_batches);
      log.write({{"step", st.step}, {"val_loss", ev.loss}, {"val_bpb", ev.bits_per_byte}, {"val_tokens", ev.tokens}});
      bar.note("step " + std::to_string(st.step) + ": val loss " + std::to_string(ev.loss) + " nats, " +
               std::to_string(ev.bits_per_byte) + " bits/byte");
      sum.val = ev;
    }
    st.elapsed_s = elapsed_before + seconds_since(t_start);
    if (st.step % tc.ckpt_every == 0 || st.step == tc.steps) checkpoint();
  }
  st.elapsed_s = elapsed_before + seconds_since(t_start);
  if (sum.interrupted && st.step > first) checkpoint();
  bar.finish();
  sum.steps = st.step;
  sum.elapsed_s = st.elapsed_s;
  const double run_s = seconds_since(t_start);
  sum.tokens_per_s = run_s > 0 ? double(st.step - first) * B * n / run_s : 0.0;
  return sum;
}

}  // namespace gmlp
