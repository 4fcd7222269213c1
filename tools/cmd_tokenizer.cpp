// gmlp tokenizer: train a SentencePiece tokenizer into a JSON file, or show how a
// tokenizer encodes a text.
#include <chrono>
#include <cstdio>
#include <filesystem>

#include "commands.h"
#include "gmlp/checkpoint.h"
#include "gmlp/error.h"
#include "gmlp/files.h"
#include "gmlp/safetensors.h"
#include "gmlp/tokenizer.h"

namespace gmlp::cli {
namespace {

struct TokTrainArgs {
  std::string data, out;
  SentencePieceTrainOptions opts;
};

int run_tokenizer_train(const TokTrainArgs& a) {
  const auto t0 = std::chrono::steady_clock::now();
  auto r = train_sentencepiece_tokenizer(a.data, a.opts);
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  write_file_atomic(a.out, r.tokenizer->to_json().dump() + "\n");
  std::printf("gmlp tokenizer: %s vocabulary of %d pieces from %lld lines (%lld bytes) of %s%s in %.1fs\n",
              a.opts.model_type.c_str(), r.tokenizer->vocab_size(), (long long)r.lines, (long long)r.bytes,
              a.data.c_str(), a.opts.exclude_test_chapters ? " (test chapters excluded)" : "", secs);
  std::printf("[PAD] = %d, [MASK] = %d; written to %s\n", r.tokenizer->pad_id(), r.tokenizer->mask_id(),
              a.out.c_str());
  return 0;
}

// A tokenizer JSON file ({"kind": ...}), a run's config.json ({"model": {"tokenizer": ...}})
// or a checkpoint (file or run directory) whose config holds one.
std::unique_ptr<Tokenizer> load_tokenizer_arg(const std::string& arg) {
  namespace fs = std::filesystem;
  if (fs::is_regular_file(arg) && arg.size() >= 5 && arg.compare(arg.size() - 5, 5, ".json") == 0) {
    const auto j = parse_json(read_file(arg), arg);
    if (j.is_object() && j.contains("kind")) return tokenizer_from_json(j);
    if (j.is_object() && j.contains("model") && j["model"].is_object() && j["model"].contains("tokenizer"))
      return tokenizer_from_json(j["model"]["tokenizer"]);
    if (j.is_object() && j.contains("tokenizer")) return tokenizer_from_json(j["tokenizer"]);
    throw Error(arg + ": neither a tokenizer ({\"kind\": ...}) nor a config with a tokenizer");
  }
  const auto file = SafeTensorsFile::load(resolve_model_path(arg));
  auto it = file.metadata().find(kConfigKey);
  require(it != file.metadata().end(), file.path() + ": no " + std::string(kConfigKey) + " metadata");
  const auto j = parse_json(it->second, file.path() + ": " + std::string(kConfigKey) + " metadata");
  require(j.is_object() && j.contains("tokenizer"), file.path() + ": its config holds no tokenizer");
  return tokenizer_from_json(j["tokenizer"]);
}

struct TokEncodeArgs {
  std::string tokenizer, text;
  bool json = false;
};

int run_tokenizer_encode(const TokEncodeArgs& a) {
  const auto tok = load_tokenizer_arg(a.tokenizer);
  const auto ids = tok->encode(a.text);
  nlohmann::json pieces = nlohmann::json::array();
  int64_t bytes = 0;
  for (int32_t id : ids) {
    pieces.push_back(tok->piece(id));
    bytes += tok->token_bytes(id);
  }
  if (a.json) {
    std::printf("%s\n", nlohmann::json({{"kind", tok->kind()}, {"vocab_size", tok->vocab_size()}, {"ids", ids},
                                        {"pieces", pieces}, {"bytes", bytes}})
                            .dump(-1, ' ', false, nlohmann::json::error_handler_t::replace)
                            .c_str());
    return 0;
  }
  std::printf("%s tokenizer, vocabulary %d: %zu tokens for %zu bytes\nids:", tok->kind().c_str(), tok->vocab_size(),
              ids.size(), a.text.size());
  for (int32_t id : ids) std::printf(" %d", id);
  std::printf("\npieces:");
  // Each piece JSON-quoted, so spaces and control bytes are visible.
  for (const auto& p : pieces)
    std::printf(" %s", p.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace).c_str());
  std::printf("\n");
  return 0;
}

}  // namespace

void add_tokenizer(CLI::App& app, int& exit_code) {
  auto* c = app.add_subcommand("tokenizer", "Train a SentencePiece tokenizer, or show how a tokenizer encodes text");
  c->require_subcommand(1);

  auto t = std::make_shared<TokTrainArgs>();
  auto* tr = c->add_subcommand("train", "Train a SentencePiece tokenizer ([PAD]=0, <unk>=1, [MASK]=2) into a JSON file");
  tr->add_option("--data", t->data, "Training text, one sentence per line")->required()->check(CLI::ExistingFile);
  tr->add_option("--out", t->out, "Tokenizer JSON to write (atomically)")->required();
  tr->add_option("--vocab-size", t->opts.vocab_size, "Vocabulary size, specials included")->capture_default_str();
  tr->add_option("--model-type", t->opts.model_type, "unigram or bpe")
      ->check(CLI::IsMember({"unigram", "bpe"}))
      ->capture_default_str();
  tr->add_option("--max-lines", t->opts.max_lines, "Use at most this many lines (0: all)")->capture_default_str();
  tr->add_flag("--exclude-test-chapters", t->opts.exclude_test_chapters,
               "--data is data/kjv.txt-formatted: drop chapters divisible by 5 (the classification test set) and "
               "the verse references");
  tr->callback([t, &exit_code] { exit_code = run_tokenizer_train(*t); });

  auto e = std::make_shared<TokEncodeArgs>();
  auto* en = c->add_subcommand("encode", "Print the ids and pieces of a text");
  en->add_option("--tokenizer", e->tokenizer, "Tokenizer JSON, config.json, or checkpoint file / run directory")
      ->required();
  en->add_option("--text", e->text, "Text to encode")->required();
  en->add_flag("--json", e->json, "One JSON object: ids, pieces, bytes");
  en->callback([e, &exit_code] { exit_code = run_tokenizer_encode(*e); });
}

}  // namespace gmlp::cli
