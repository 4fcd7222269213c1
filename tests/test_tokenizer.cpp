// Special tokens of the byte and char tokenizers, SentencePiece training, encoding,
// JSON round trips and errors, base64, and the `gmlp tokenizer` command.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "gmlp/error.h"
#include "gmlp/files.h"
#include "gmlp/safetensors.h"
#include "gmlp/tokenizer.h"
#include "test_util.h"

using namespace gmlp;
namespace fs = std::filesystem;
using nlohmann::json;
using test::error_of;

namespace {

#define EXPECT_ERROR_HAS(expr, text)                                                 \
  do {                                                                               \
    const std::string msg_ = error_of([&] { (void)(expr); });                        \
    EXPECT_NE(msg_.find(text), std::string::npos) << "message: " << msg_;            \
  } while (0)

// A real English text present on every Debian system (base-files), 674 lines.
const std::string kText = "/usr/share/common-licenses/GPL-3";

std::vector<std::string> lines_of(const std::string& path) {
  std::ifstream in(path);
  std::vector<std::string> out;
  for (std::string line; std::getline(in, line);) out.push_back(line);
  return out;
}

void write(const std::string& path, const std::string& text) { std::ofstream(path, std::ios::binary) << text; }

// Text SentencePiece leaves as it is: no leading, trailing or doubled spaces.
bool normalised(const std::string& s) {
  return !s.empty() && s.front() != ' ' && s.back() != ' ' && s.find("  ") == std::string::npos &&
         s.find('\t') == std::string::npos;
}

// One model for the tests that only read it (training takes ~0.1 s, but once is enough).
const Tokenizer& gpl_tokenizer() {
  static const auto tok = [] {
    SentencePieceTrainOptions o;
    o.vocab_size = 400;
    return train_sentencepiece_tokenizer(kText, o).tokenizer;
  }();
  return *tok;
}

}  // namespace

// --- specials of the byte and char tokenizers ---

TEST(Specials, ByteTokenizerAppendsThemAfter256) {
  auto tok = make_byte_tokenizer(mlm_specials());
  EXPECT_EQ(tok->vocab_size(), 258);
  EXPECT_EQ(tok->pad_id(), 256);
  EXPECT_EQ(tok->mask_id(), 257);
  EXPECT_EQ(tok->decode(256), "[PAD]");
  EXPECT_EQ(tok->decode(257), "[MASK]");
  EXPECT_EQ(tok->token_bytes(257), 0);
  EXPECT_EQ(tok->token_bytes(65), 1);
  EXPECT_TRUE(tok->is_special(256));
  EXPECT_TRUE(tok->is_special(257));
  EXPECT_FALSE(tok->is_special(255));
  EXPECT_FALSE(tok->is_special(0));
  EXPECT_FALSE(tok->is_special(258));
  EXPECT_FALSE(tok->is_special(-1));
  // The names are not recognised in text: encode gives bytes only.
  const auto ids = tok->encode("a[MASK]");
  EXPECT_EQ(ids.size(), 7u);
  for (int32_t id : ids) EXPECT_LT(id, 256);
  EXPECT_EQ(tok->decode(std::vector<int32_t>{104, 105, 257, 256}), "hi[MASK][PAD]");
  EXPECT_ERROR_HAS(tok->decode(258), "outside [0, 258)");
  EXPECT_ERROR_HAS(tok->token_bytes(-1), "-1");

  const json j = tok->to_json();
  EXPECT_EQ(j, json::parse(R"({"kind":"byte","specials":["[PAD]","[MASK]"]})"));
  auto back = tokenizer_from_json(json::parse(j.dump()));
  EXPECT_EQ(back->vocab_size(), 258);
  EXPECT_EQ(back->mask_id(), 257);
  EXPECT_EQ(back->to_json(), j);
}

TEST(Specials, PlainByteJsonIsUnchanged) {
  auto tok = tokenizer_from_json(json{{"kind", "byte"}});
  EXPECT_EQ(tok->vocab_size(), 256);
  EXPECT_EQ(tok->pad_id(), -1);
  EXPECT_EQ(tok->mask_id(), -1);
  EXPECT_FALSE(tok->is_special(0));
  EXPECT_EQ(tok->to_json(), json({{"kind", "byte"}}));  // no "specials": [] added
  EXPECT_EQ(make_byte_tokenizer()->to_json(), json({{"kind", "byte"}}));
  auto empty = tokenizer_from_json(json{{"kind", "byte"}, {"specials", json::array()}});
  EXPECT_EQ(empty->vocab_size(), 256);
}

TEST(Specials, CharTokenizerAppendsThemAfterTheCharacters) {
  auto tok = build_char_tokenizer("cab é", mlm_specials());
  ASSERT_EQ(tok->vocab_size(), 7);  // ' ' a b c é, then [PAD] [MASK]
  EXPECT_EQ(tok->pad_id(), 5);
  EXPECT_EQ(tok->mask_id(), 6);
  EXPECT_EQ(tok->decode(6), "[MASK]");
  EXPECT_EQ(tok->token_bytes(4), 2);
  EXPECT_EQ(tok->token_bytes(5), 0);
  EXPECT_TRUE(tok->is_special(5));
  EXPECT_FALSE(tok->is_special(4));
  EXPECT_EQ(tok->encode("ab é"), (std::vector<int32_t>{1, 2, 0, 4}));
  EXPECT_ERROR_HAS(tok->encode("[MASK]"), "'[' (U+005B)");  // not a character of the corpus
  const json j = tok->to_json();
  EXPECT_EQ(j["specials"], json::parse(R"(["[PAD]","[MASK]"])"));
  auto back = tokenizer_from_json(json::parse(j.dump()));
  EXPECT_EQ(back->vocab_size(), 7);
  EXPECT_EQ(back->decode(5), "[PAD]");
  EXPECT_EQ(back->encode("cab"), tok->encode("cab"));
  // Other names are fine; pad/mask are found by name.
  auto other = tokenizer_from_json(json{{"kind", "char"}, {"chars", "xy"}, {"specials", {"<s>", "[MASK]"}}});
  EXPECT_EQ(other->pad_id(), -1);
  EXPECT_EQ(other->mask_id(), 3);
  EXPECT_TRUE(other->is_special(2));
  EXPECT_EQ(tokenizer_specials(other->to_json()), (std::vector<std::string>{"<s>", "[MASK]"}));
}

TEST(Specials, BadSpecialsNameTheField) {
  EXPECT_ERROR_HAS(tokenizer_from_json(json{{"kind", "byte"}, {"specials", "[PAD]"}}), "\"specials\" must be an array");
  EXPECT_ERROR_HAS(tokenizer_from_json(json{{"kind", "byte"}, {"specials", {"[PAD]", 3}}}), "\"specials\"[1]");
  EXPECT_ERROR_HAS(tokenizer_from_json(json{{"kind", "byte"}, {"specials", {""}}}), "empty string");
  EXPECT_ERROR_HAS(tokenizer_from_json(json{{"kind", "char"}, {"chars", "ab"}, {"specials", {"[PAD]", "[PAD]"}}}),
                   "\"[PAD]\" is listed twice");
  EXPECT_ERROR_HAS(make_byte_tokenizer({"[MASK]", "[MASK]"}), "listed twice");
  EXPECT_ERROR_HAS(tokenizer_from_json(json{{"kind", "sentencepiece"}, {"model", "AAAA"}, {"specials", {"[PAD]"}}}),
                   "\"specials\" is not allowed");
}

TEST(TokenizerVocabSize, EveryKind) {
  EXPECT_EQ(tokenizer_vocab_size(json{{"kind", "byte"}}), 256);
  EXPECT_EQ(tokenizer_vocab_size(json{{"kind", "byte"}, {"specials", {"[PAD]", "[MASK]"}}}), 258);
  EXPECT_EQ(tokenizer_vocab_size(json{{"kind", "char"}, {"chars", "abc"}, {"specials", {"[PAD]"}}}), 4);
  EXPECT_EQ(tokenizer_vocab_size(gpl_tokenizer().to_json()), 400);
  EXPECT_ERROR_HAS(tokenizer_vocab_size(json{{"kind", "char"}}), "\"chars\"");
  EXPECT_ERROR_HAS(tokenizer_vocab_size(json{{"kind", "wordpiece"}}), "\"kind\"");
  EXPECT_ERROR_HAS(tokenizer_vocab_size(json{{"kind", "byte"}, {"specials", 1}}), "\"specials\"");
  EXPECT_ERROR_HAS(tokenizer_vocab_size(json{{"kind", "sentencepiece"}}), "\"model\"");
  EXPECT_ERROR_HAS(tokenizer_vocab_size(json::array()), "object");
}

// --- base64 ---

TEST(Base64, RoundTripsEveryLengthAndRejectsGarbage) {
  EXPECT_EQ(base64_encode(""), "");
  EXPECT_EQ(base64_encode("f"), "Zg==");
  EXPECT_EQ(base64_encode("fo"), "Zm8=");
  EXPECT_EQ(base64_encode("foo"), "Zm9v");
  EXPECT_EQ(base64_encode("foobar"), "Zm9vYmFy");
  std::string all;
  for (int i = 0; i < 256; ++i) all += char(i);
  for (size_t n = 0; n <= all.size(); n += 1) EXPECT_EQ(base64_decode(base64_encode(all.substr(0, n))), all.substr(0, n));
  EXPECT_EQ(base64_decode("Zm9vYg=="), "foob");
  EXPECT_ERROR_HAS(base64_decode("Zm9", "field \"model\""), "field \"model\": base64 length 3");
  EXPECT_ERROR_HAS(base64_decode("Zm9v!A==", "x"), "invalid base64 character at offset 4");
  EXPECT_ERROR_HAS(base64_decode("Zg==Zm8=", "x"), "offset 2");  // padding only at the end
  EXPECT_ERROR_HAS(base64_decode("Z===", "x"), "offset 1");
}

// --- SentencePiece ---

TEST(SentencePiece, TrainedModelHasPadUnkMaskAndRoundTrips) {
  ASSERT_TRUE(fs::exists(kText));
  const Tokenizer& tok = gpl_tokenizer();
  EXPECT_EQ(tok.kind(), "sentencepiece");
  EXPECT_EQ(tok.vocab_size(), 400);
  EXPECT_EQ(tok.pad_id(), 0);
  EXPECT_EQ(tok.mask_id(), 2);
  EXPECT_EQ(tok.piece(0), "[PAD]");
  EXPECT_EQ(tok.piece(1), "<unk>");
  EXPECT_EQ(tok.piece(2), "[MASK]");
  EXPECT_EQ(tok.decode(0), "[PAD]");
  EXPECT_EQ(tok.decode(2), "[MASK]");
  EXPECT_TRUE(tok.is_special(0));
  EXPECT_FALSE(tok.is_special(1));  // <unk> stands for text
  EXPECT_TRUE(tok.is_special(2));
  for (int id = 3; id < tok.vocab_size(); ++id) EXPECT_FALSE(tok.is_special(id)) << id;
  EXPECT_EQ(tok.token_bytes(0), 0);
  EXPECT_EQ(tok.token_bytes(1), 0);
  EXPECT_EQ(tok.token_bytes(2), 0);
  EXPECT_ERROR_HAS(tok.decode(400), "outside [0, 400)");
  EXPECT_ERROR_HAS(tok.token_bytes(-1), "-1");
  EXPECT_ERROR_HAS(tok.piece(400), "400");

  // Every normalised line: decode(encode) is the line, and the token bytes add up to
  // the line plus its newline (the leading '▁' stands for it).
  int checked = 0;
  for (const auto& line : lines_of(kText)) {
    if (!normalised(line)) continue;
    const auto ids = tok.encode(line);
    ASSERT_FALSE(ids.empty());
    EXPECT_EQ(tok.decode(ids), line);
    int64_t bytes = 0;
    for (int32_t id : ids) {
      EXPECT_GE(id, 3) << "no special and no <unk> in the training text: " << line;
      bytes += tok.token_bytes(id);
    }
    EXPECT_EQ(bytes, int64_t(line.size()) + 1) << line;
    ++checked;
  }
  EXPECT_GT(checked, 250);
  // A piece's decode is its text with '▁' as a space.
  const auto ids = tok.encode("the program");
  ASSERT_GE(ids.size(), 2u);
  EXPECT_EQ(tok.piece(ids[0]).substr(0, 3), "\xE2\x96\x81");
  EXPECT_EQ(tok.decode(ids[0])[0], ' ');
  // [MASK] in the text is the [MASK] token (a user-defined symbol).
  const auto m = tok.encode("the [MASK] program");
  EXPECT_NE(std::find(m.begin(), m.end(), 2), m.end());
  // Unknown characters become <unk>, which decodes to its name and counts 0 bytes.
  const auto u = tok.encode("\xE6\x97\xA5");  // 日
  EXPECT_NE(std::find(u.begin(), u.end(), 1), u.end());
  // Whitespace is normalised: runs collapse, ends drop.
  EXPECT_EQ(tok.decode(tok.encode("  the   program ")), "the program");
  EXPECT_TRUE(tok.encode("").empty());
}

TEST(SentencePiece, TrainingTwiceGivesTheSameModelBytes) {
  SentencePieceTrainOptions o;
  o.vocab_size = 300;
  const auto lines = lines_of(kText);
  const int64_t non_empty = int64_t(lines.size()) - std::count(lines.begin(), lines.end(), "");
  for (const char* type : {"unigram", "bpe"}) {
    o.model_type = type;
    auto a = train_sentencepiece_tokenizer(kText, o);
    auto b = train_sentencepiece_tokenizer(kText, o);
    EXPECT_EQ(a.tokenizer->to_json(), b.tokenizer->to_json()) << type;
    EXPECT_EQ(a.tokenizer->vocab_size(), 300);
    EXPECT_EQ(a.tokenizer->pad_id(), 0);
    EXPECT_EQ(a.tokenizer->mask_id(), 2);
    EXPECT_EQ(a.lines, non_empty);
  }
  // The two model types differ.
  o.model_type = "unigram";
  auto u = train_sentencepiece_tokenizer(kText, o);
  o.model_type = "bpe";
  auto b = train_sentencepiece_tokenizer(kText, o);
  EXPECT_NE(u.tokenizer->to_json(), b.tokenizer->to_json());
  const std::string line = "This program is free software: you can redistribute it";
  EXPECT_EQ(b.tokenizer->decode(b.tokenizer->encode(line)), line);
}

TEST(SentencePiece, JsonRoundTrip) {
  const Tokenizer& tok = gpl_tokenizer();
  const json j = tok.to_json();
  EXPECT_EQ(j["kind"], "sentencepiece");
  ASSERT_TRUE(j["model"].is_string());
  EXPECT_EQ(j.size(), 2u);
  // Through text, as a checkpoint's metadata would store it.
  auto back = tokenizer_from_json(json::parse(j.dump()));
  EXPECT_EQ(back->kind(), "sentencepiece");
  ASSERT_EQ(back->vocab_size(), tok.vocab_size());
  EXPECT_EQ(back->pad_id(), 0);
  EXPECT_EQ(back->mask_id(), 2);
  for (int id = 0; id < tok.vocab_size(); ++id) {
    EXPECT_EQ(back->piece(id), tok.piece(id));
    EXPECT_EQ(back->token_bytes(id), tok.token_bytes(id));
  }
  for (const auto& line : lines_of(kText)) EXPECT_EQ(back->encode(line), tok.encode(line));
  EXPECT_EQ(back->to_json(), j);
  // The model field is the serialized proto: it loads directly too.
  auto direct = make_sentencepiece_tokenizer(base64_decode(j["model"].get<std::string>()));
  EXPECT_EQ(direct->vocab_size(), 400);
}

TEST(SentencePiece, BadJsonNamesTheModelField) {
  EXPECT_ERROR_HAS(tokenizer_from_json(json{{"kind", "sentencepiece"}}), "\"model\" missing");
  EXPECT_ERROR_HAS(tokenizer_from_json(json{{"kind", "sentencepiece"}, {"model", 7}}), "\"model\"");
  EXPECT_ERROR_HAS(tokenizer_from_json(json{{"kind", "sentencepiece"}, {"model", ""}}), "\"model\" is empty");
  EXPECT_ERROR_HAS(tokenizer_from_json(json{{"kind", "sentencepiece"}, {"model", "not base64!"}}),
                   "tokenizer JSON field \"model\"");
  const std::string garbage = base64_encode("this is not a sentencepiece model");
  EXPECT_ERROR_HAS(tokenizer_from_json(json{{"kind", "sentencepiece"}, {"model", garbage}}),
                   "field \"model\": sentencepiece model does not load");
  // A truncated model.
  std::string model = base64_decode(gpl_tokenizer().to_json()["model"].get<std::string>());
  model.resize(model.size() / 2);
  EXPECT_ERROR_HAS(tokenizer_from_json(json{{"kind", "sentencepiece"}, {"model", base64_encode(model)}}),
                   "\"model\"");
}

TEST(SentencePiece, TrainingErrorsNameTheProblem) {
  test::TempDir dir("sp_errors");
  SentencePieceTrainOptions o;
  o.vocab_size = 100;
  const std::string missing = dir.file("missing.txt");
  EXPECT_ERROR_HAS(train_sentencepiece_tokenizer(missing, o), "cannot read corpus " + missing);
  const std::string empty = dir.file("empty.txt");
  write(empty, "\n\n");
  EXPECT_ERROR_HAS(train_sentencepiece_tokenizer(empty, o), empty + " has no non-empty lines");
  const std::string tiny = dir.file("tiny.txt");
  write(tiny, "a b c\nb c a\n");
  EXPECT_ERROR_HAS(train_sentencepiece_tokenizer(tiny, o), "sentencepiece training on " + tiny + " failed");
  auto bad = o;
  bad.model_type = "word";
  EXPECT_ERROR_HAS(train_sentencepiece_tokenizer(kText, bad), "model_type");
  bad = o;
  bad.vocab_size = 2;
  EXPECT_ERROR_HAS(train_sentencepiece_tokenizer(kText, bad), "vocab_size");
  bad = o;
  bad.max_lines = -1;
  EXPECT_ERROR_HAS(train_sentencepiece_tokenizer(kText, bad), "max_lines");
  // Not KJV-formatted: the first such line is named.
  bad = o;
  bad.exclude_test_chapters = true;
  const std::string notkjv = dir.file("notkjv.txt");
  write(notkjv, "Ge1:1 In the beginning.\nGe1:2 And the earth.\nhello world\n");
  EXPECT_ERROR_HAS(train_sentencepiece_tokenizer(notkjv, bad), notkjv + ":3: not a KJV verse line");
}

TEST(SentencePiece, MaxLinesAndExcludeTestChapters) {
  test::TempDir dir("sp_kjv");
  // 12 chapters of 20 verses: chapters 5 and 10 are test chapters.
  std::string text;
  const char* words[] = {"and", "the", "lord", "said", "unto", "moses", "go", "down", "people", "land"};
  for (int c = 1; c <= 12; ++c)
    for (int v = 1; v <= 20; ++v) {
      text += "Ge" + std::to_string(c) + ":" + std::to_string(v) + " ";
      for (int w = 0; w < 8; ++w) text += std::string(w ? " " : "") + words[(c * 7 + v * 3 + w * w) % 10];
      text += c % 5 == 0 ? " zebulun\n" : "\n";  // a word only the test chapters have
    }
  const std::string path = dir.file("kjv.txt");
  write(path, text);
  SentencePieceTrainOptions o;
  o.vocab_size = 20;
  o.exclude_test_chapters = true;
  auto r = train_sentencepiece_tokenizer(path, o);
  EXPECT_EQ(r.lines, 200);
  // Neither the references nor the test chapters' word were seen: 'z' is unknown.
  const auto ids = r.tokenizer->encode("zebulun");
  EXPECT_NE(std::find(ids.begin(), ids.end(), 1), ids.end());
  o.max_lines = 50;
  EXPECT_EQ(train_sentencepiece_tokenizer(path, o).lines, 50);
  // Without the flag every line counts, references included.
  o.exclude_test_chapters = false;
  o.max_lines = 0;
  o.vocab_size = 45;  // the references' digits, 'G', 'e' and ':' need pieces too
  auto all = train_sentencepiece_tokenizer(path, o);
  EXPECT_EQ(all.lines, 240);
  const auto z = all.tokenizer->encode("zebulun");
  EXPECT_EQ(std::find(z.begin(), z.end(), 1), z.end());
}

#ifdef GMLP_SOURCE_DIR
// The real corpora, from scripts/fetch_data.sh (which scripts/test.sh runs first).
TEST(SentencePiece, KjvTrainChaptersEqualPretrainCorpus) {
  const std::string kjv = std::string(GMLP_SOURCE_DIR) + "/data/kjv.txt";
  const std::string pre = std::string(GMLP_SOURCE_DIR) + "/data/kjv_groups/pretrain.txt";
  ASSERT_TRUE(fs::exists(kjv) && fs::exists(pre)) << "run scripts/fetch_data.sh";
  // The first 4000 training verses (max_lines counts lines after filtering), to keep it quick.
  SentencePieceTrainOptions o;
  o.vocab_size = 1000;
  o.max_lines = 4000;
  o.exclude_test_chapters = true;
  auto a = train_sentencepiece_tokenizer(kjv, o);
  o.exclude_test_chapters = false;
  auto b = train_sentencepiece_tokenizer(pre, o);
  EXPECT_EQ(a.lines, 4000);
  EXPECT_EQ(b.lines, 4000);
  EXPECT_EQ(a.bytes, b.bytes);
  EXPECT_EQ(a.tokenizer->to_json(), b.tokenizer->to_json());
  // Bits per byte bookkeeping: over the corpus encoded line by line the token bytes add
  // up to the lines' bytes plus their newlines.
  const auto lines = lines_of(pre);
  int64_t bytes = 0, want = 0, tokens = 0;
  for (size_t i = 0; i < 4000; ++i) {
    const auto ids = b.tokenizer->encode(lines[i]);
    tokens += int64_t(ids.size());
    for (int32_t id : ids) bytes += b.tokenizer->token_bytes(id);
    want += int64_t(lines[i].size()) + 1;
  }
  EXPECT_EQ(bytes, want);  // no double space in these (the first, Josh7:2, is line 4926)
  EXPECT_LT(tokens, want / 3);
}
#endif

// --- gmlp tokenizer ---

TEST(TokenizerCommand, TrainWritesJsonAndEncodeShowsPieces) {
  test::TempDir dir("tok_cmd");
  const std::string out = dir.file("tok.json");
  auto r = test::run_command(test::gmlp_exe() + " tokenizer train --data " + kText + " --vocab-size 300 --out " + out);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("unigram vocabulary of 300 pieces"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("[PAD] = 0, [MASK] = 2"), std::string::npos) << r.output;
  const json j = json::parse(read_file(out));
  EXPECT_EQ(j["kind"], "sentencepiece");
  auto tok = tokenizer_from_json(j);
  EXPECT_EQ(tok->vocab_size(), 300);
  // Same options in the library: the same model.
  SentencePieceTrainOptions o;
  o.vocab_size = 300;
  EXPECT_EQ(train_sentencepiece_tokenizer(kText, o).tokenizer->to_json(), j);

  r = test::run_command(test::gmlp_exe() + " tokenizer encode --tokenizer " + out + " --text 'the program [MASK]' --json");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const json e = json::parse(r.output);
  const auto ids = tok->encode("the program [MASK]");
  EXPECT_EQ(e["ids"].get<std::vector<int32_t>>(), ids);
  ASSERT_EQ(e["pieces"].size(), ids.size());
  EXPECT_EQ(e["pieces"].back(), "[MASK]");
  r = test::run_command(test::gmlp_exe() + " tokenizer encode --tokenizer " + out + " --text 'the program'");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("ids:"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("pieces: \"\xE2\x96\x81"), std::string::npos) << r.output;

  // A byte tokenizer with specials, from a JSON file.
  const std::string byte = dir.file("byte.json");
  write(byte, R"({"kind":"byte","specials":["[PAD]","[MASK]"]})");
  r = test::run_command(test::gmlp_exe() + " tokenizer encode --tokenizer " + byte + " --text 'hi' --json");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(json::parse(r.output)["ids"], json::parse("[104, 105]"));
  EXPECT_EQ(json::parse(r.output)["vocab_size"], 258);
}

TEST(TokenizerCommand, ErrorsExitNonZeroAndWriteNothing) {
  test::TempDir dir("tok_cmd_err");
  const std::string out = dir.file("tok.json");
  auto r = test::run_command(test::gmlp_exe() + " tokenizer train --data " + kText + " --vocab-size 100000 --out " + out);
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_NE(r.output.find("gmlp: error: sentencepiece training on " + kText + " failed"), std::string::npos)
      << r.output;
  EXPECT_FALSE(fs::exists(out));
  r = test::run_command(test::gmlp_exe() + " tokenizer train --data " + kText + " --model-type word --out " + out);
  EXPECT_NE(r.exit_code, 0);
  EXPECT_FALSE(fs::exists(out));
  r = test::run_command(test::gmlp_exe() + " tokenizer train --data " + kText + " --exclude-test-chapters --out " + out);
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_NE(r.output.find(kText + ":1: not a KJV verse line"), std::string::npos) << r.output;
  const std::string bad = dir.file("bad.json");
  write(bad, R"({"kind":"sentencepiece","model":"@@@@"})");
  r = test::run_command(test::gmlp_exe() + " tokenizer encode --tokenizer " + bad + " --text x");
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_NE(r.output.find("\"model\""), std::string::npos) << r.output;
}
