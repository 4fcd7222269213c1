// gmlp generate: sample text from a checkpoint, streaming it as it is drawn, or from a
// file of prompts, several at once (--prompts), one JSON line per prompt.
// gmlp eval: loss and bits per byte of a checkpoint on a text file.
#include <cstdio>
#include <nlohmann/json.hpp>

#include "commands.h"
#include "gmlp/checkpoint.h"
#include "gmlp/error.h"
#include "gmlp/evaluate.h"
#include "gmlp/files.h"
#include "gmlp/generate.h"
#include "gmlp/safetensors.h"
#include "gmlp/tokenizer.h"
#include "gmlp/trainer.h"

namespace gmlp::cli {
namespace {

struct GenerateArgs {
  std::string model = "runs/default", prompt = "\n", prompts;
  int max_tokens = 200, batch = 32;
  int64_t seed = 1;
  SamplingOptions sampling;
  std::string device = "auto";
  std::string precision = "fp32";
};

// --prompts FILE: every prompt is read and checked before anything is generated; the
// lines come out in the input's order, each batch as soon as it is done. Prompt k (from 0)
// draws with seed + k, so it gets the text `--prompt` would with that seed.
int run_generate_file(const GenerateArgs& a, Model& model, const Tokenizer& tok) {
  std::vector<std::string> texts;
  const std::string all = read_file(a.prompts);
  for (const std::string_view line : split_lines(all))
    if (!line.empty()) texts.emplace_back(line);
  require(!texts.empty(), "--prompts " + a.prompts + ": no prompts (one per line; empty lines are skipped)");
  const int n = model.config().seq_len;
  std::vector<std::vector<int32_t>> prompts;
  for (size_t k = 0; k < texts.size(); ++k) {
    prompts.push_back(tok.encode(texts[k]));
    require(int(prompts.back().size()) <= n, "--prompts " + a.prompts + ": prompt " + std::to_string(k + 1) + " is " +
                                                 std::to_string(prompts.back().size()) +
                                                 " tokens, longer than the model's window of " + std::to_string(n));
  }
  for (size_t b0 = 0; b0 < prompts.size(); b0 += size_t(a.batch)) {
    const size_t b1 = std::min(prompts.size(), b0 + size_t(a.batch));
    const std::vector<std::vector<int32_t>> batch(prompts.begin() + long(b0), prompts.begin() + long(b1));
    std::vector<Rng> rngs;
    for (size_t k = b0; k < b1; ++k) rngs.emplace_back(uint64_t(a.seed) + k, 3);
    const auto out = generate_batch(model, batch, a.max_tokens, a.sampling, rngs);
    for (size_t k = b0; k < b1; ++k) {
      std::string text;
      for (int32_t id : out[k - b0]) text += tok.decode(id);
      const nlohmann::json line = {{"prompt", texts[k]}, {"text", text}};
      std::printf("%s\n", line.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace).c_str());
    }
    std::fflush(stdout);
  }
  return 0;
}

int run_generate(const GenerateArgs& a) {
  a.sampling.validate();  // before anything is printed
  require(a.max_tokens >= 0, "--max-tokens must be >= 0, got " + std::to_string(a.max_tokens));
  require(a.batch >= 1 && a.batch <= 4096, "--batch must be 1 to 4096, got " + std::to_string(a.batch));
  auto model = load_model(resolve_model_path(a.model), choose_device(a.device, a.precision));
  auto tok = tokenizer_from_json(model->config().tokenizer);
  if (!a.prompts.empty()) return run_generate_file(a, *model, *tok);
  const auto prompt = tok->encode(a.prompt);
  Rng rng(uint64_t(a.seed), 3);
  std::fwrite(a.prompt.data(), 1, a.prompt.size(), stdout);
  std::fflush(stdout);
  generate(*model, prompt, a.max_tokens, a.sampling, rng, [&](int32_t id) {
    const std::string s = tok->decode(id);
    std::fwrite(s.data(), 1, s.size(), stdout);
    std::fflush(stdout);
    return true;
  });
  std::fputs("\n", stdout);
  return 0;
}

struct EvalArgs {
  std::string model = "runs/default", data;
  int batch_size = 16;
  bool json = false;
  std::string device = "auto";
  std::string precision = "fp32";
};

int run_eval(const EvalArgs& a) {
  auto model = load_model(resolve_model_path(a.model), choose_device(a.device, a.precision));
  const Task task = model->config().task;
  if (task == Task::classify || task == Task::vision) return run_classifier_eval(*model, a.data, a.batch_size, a.json);
  if (task == Task::mlm) {
    auto tok = tokenizer_from_json(model->config().tokenizer);
    const auto corpus = TextCorpus::load(a.data, *tok, model->config().seq_len, 0.f);
    const MaskedLmEval r = evaluate_masked_lm(*model, *tok, corpus.train, a.batch_size, 0);
    if (a.json)
      std::printf("%s\n", nlohmann::json({{"data", a.data}, {"loss", r.loss}, {"perplexity", r.perplexity},
                                          {"masked", r.masked}})
                              .dump()
                              .c_str());
    else
      std::printf("%s: masked-token loss %.4f nats, perplexity %.3f over %lld masked tokens (15%%, fixed seed)\n",
                  a.data.c_str(), r.loss, r.perplexity, (long long)r.masked);
    return 0;
  }
  auto tok = tokenizer_from_json(model->config().tokenizer);
  // Every window of the file is scored: val_fraction 0 keeps it all in "train".
  const auto corpus = TextCorpus::load(a.data, *tok, model->config().seq_len + 1, 0.f);
  const EvalResult r = evaluate(*model, *tok, corpus.train, a.batch_size, 0);
  if (a.json) {
    std::printf("%s\n", nlohmann::json({{"data", a.data}, {"loss", r.loss}, {"bits_per_byte", r.bits_per_byte},
                                        {"tokens", r.tokens}, {"bytes", r.bytes}})
                            .dump()
                            .c_str());
  } else {
    std::printf("%s: loss %.4f nats/token, %.4f bits/byte over %lld tokens (%lld bytes)\n", a.data.c_str(), r.loss,
                r.bits_per_byte, (long long)r.tokens, (long long)r.bytes);
  }
  return 0;
}

}  // namespace

void add_generate(CLI::App& app, int& exit_code) {
  auto a = std::make_shared<GenerateArgs>();
  auto* c = app.add_subcommand("generate", "Generate text from a checkpoint, streamed as it is sampled");
  c->add_option("--model", a->model, "Checkpoint file or run directory")->capture_default_str();
  c->add_option("--prompt", a->prompt, "Text to continue (at most the model's window in tokens)");
  c->add_option("--prompts", a->prompts,
                "File of prompts, one per line: generates for several at once and prints one JSON line "
                "{\"prompt\", \"text\"} per prompt, in order (prompt k uses seed + k)");
  c->add_option("--batch", a->batch, "With --prompts: prompts decoded together")->capture_default_str();
  c->add_option("--max-tokens", a->max_tokens, "Tokens to generate")->capture_default_str();
  c->add_option("--temperature", a->sampling.temperature, "Sampling temperature; 0 = greedy")->capture_default_str();
  c->add_option("--top-k", a->sampling.top_k, "Sample among the k most likely tokens; 0 = all")->capture_default_str();
  c->add_option("--top-p", a->sampling.top_p, "Nucleus sampling: smallest set with probability >= p")->capture_default_str();
  c->add_option("--seed", a->seed, "Random seed (same seed, same text)")->capture_default_str();
  add_device_option(c, a->device, a->precision);
  c->callback([a, &exit_code] { exit_code = run_generate(*a); });
}

void add_eval(CLI::App& app, int& exit_code) {
  auto a = std::make_shared<EvalArgs>();
  auto* c = app.add_subcommand("eval", "Causal LM: loss (nats/token) and bits per byte on a text file. Masked LM: "
                                       "perplexity on 15% masked tokens. Classifiers: "
                                       "top-1 and the confusion matrix on a labelled file or an image folder's test split");
  c->add_option("--model", a->model, "Checkpoint file or run directory")->capture_default_str();
  c->add_option("--data", a->data, "Text file (LM, MLM), label<TAB>text file (classify) or IDX folder (vision)")
      ->required();
  c->add_option("--batch-size", a->batch_size, "Windows per forward pass")->capture_default_str()->check(CLI::PositiveNumber);
  add_device_option(c, a->device, a->precision);
  c->add_flag("--json", a->json, "Print the result as JSON");
  c->callback([a, &exit_code] { exit_code = run_eval(*a); });
}

}  // namespace gmlp::cli
