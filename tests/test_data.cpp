// Tokenizers, corpus loading and batching (src/data).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <set>
#include <string>
#include <vector>

#include <unistd.h>

#include "gmlp/dataset.h"
#include "gmlp/error.h"
#include "gmlp/labelled.h"
#include "gmlp/metrics.h"
#include "gmlp/mlm.h"
#include "gmlp/naive_bayes.h"
#include "gmlp/tokenizer.h"
#include "test_util.h"

using namespace gmlp;
namespace fs = std::filesystem;

namespace {

using test::error_of;

#define EXPECT_ERROR_HAS(expr, text) EXPECT_NE(error_of([&] { (void)(expr); }).find(text), std::string::npos) \
    << "message: " << error_of([&] { (void)(expr); })

// A scratch folder per test, removed afterwards.
class TempDir {
 public:
  TempDir() {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    dir_ = fs::temp_directory_path() / ("gmlp_test_data_" + std::string(info->name()) + "_" +
                                        std::to_string(::getpid()));
    fs::create_directories(dir_);
  }
  ~TempDir() { fs::remove_all(dir_); }
  std::string write(const std::string& name, const std::string& content) const {
    const auto p = (dir_ / name).string();
    std::ofstream(p, std::ios::binary) << content;
    return p;
  }
  std::string path(const std::string& name) const { return (dir_ / name).string(); }

 private:
  fs::path dir_;
};

}  // namespace

TEST(ByteTokenizer, RoundTripsArbitraryBytes) {
  auto tok = make_byte_tokenizer();
  EXPECT_EQ(tok->kind(), "byte");
  EXPECT_EQ(tok->vocab_size(), 256);
  std::string all;
  for (int b = 0; b < 256; ++b) all += char(b);
  all += std::string("\x00\xFF\xC3", 3);  // NUL, 0xFF and a truncated UTF-8 lead are all fine
  const auto ids = tok->encode(all);
  ASSERT_EQ(ids.size(), all.size());
  EXPECT_EQ(ids[0], 0);
  EXPECT_EQ(ids[255], 255);
  EXPECT_EQ(tok->decode(ids), all);
  EXPECT_EQ(tok->token_bytes(200), 1);
  EXPECT_ERROR_HAS(tok->decode(256), "256");
  EXPECT_ERROR_HAS(tok->decode(-1), "-1");
}

TEST(CharTokenizer, Utf8RoundTripSortedIds) {
  const std::string text = "café 日本 abc\n";
  auto tok = build_char_tokenizer(text);
  EXPECT_EQ(tok->kind(), "char");
  // distinct, by code point: \n ' ' a b c f é 日 本
  ASSERT_EQ(tok->vocab_size(), 9);
  EXPECT_EQ(tok->decode(0), "\n");
  EXPECT_EQ(tok->decode(1), " ");
  EXPECT_EQ(tok->decode(2), "a");
  EXPECT_EQ(tok->decode(6), "é");
  EXPECT_EQ(tok->decode(7), "日");  // U+65E5 < U+672C
  EXPECT_EQ(tok->decode(8), "本");
  EXPECT_EQ(tok->token_bytes(1), 1);
  EXPECT_EQ(tok->token_bytes(6), 2);
  EXPECT_EQ(tok->token_bytes(8), 3);
  const auto ids = tok->encode(text);
  EXPECT_EQ(ids.size(), 12u);  // code points, not bytes
  EXPECT_EQ(tok->decode(ids), text);
  int bytes = 0;
  for (int32_t id : ids) bytes += tok->token_bytes(id);
  EXPECT_EQ(bytes, int(text.size()));
  EXPECT_ERROR_HAS(tok->decode(9), "outside [0, 9)");
}

TEST(CharTokenizer, FourByteCharacters) {
  const std::string text = "a😀b";  // U+1F600
  auto tok = build_char_tokenizer(text);
  ASSERT_EQ(tok->vocab_size(), 3);
  EXPECT_EQ(tok->decode(2), "😀");
  EXPECT_EQ(tok->token_bytes(2), 4);
  EXPECT_EQ(tok->decode(tok->encode(text)), text);
}

TEST(CharTokenizer, UnknownCharacterNamesCharAndOffset) {
  auto tok = build_char_tokenizer("abcf ");
  const std::string msg = error_of([&] { tok->encode("ab café"); });
  EXPECT_NE(msg.find("'é' (U+00E9) at byte offset 6"), std::string::npos) << msg;
  // The first unknown character is the one reported.
  const std::string first = error_of([&] { tok->encode("ab cfxé"); });
  EXPECT_NE(first.find("'x' (U+0078) at byte offset 5"), std::string::npos) << first;
  const std::string ctl = error_of([&] { tok->encode("a\nb"); });
  EXPECT_NE(ctl.find("'\\n' (U+000A) at byte offset 1"), std::string::npos) << ctl;
}

TEST(CharTokenizer, InvalidUtf8IsAnError) {
  EXPECT_ERROR_HAS(build_char_tokenizer(std::string("ab\xC3", 3)), "offset 2");       // truncated
  EXPECT_ERROR_HAS(build_char_tokenizer(std::string("a\x80", 2)), "offset 1");        // stray continuation
  EXPECT_ERROR_HAS(build_char_tokenizer(std::string("\xC0\xAF", 2)), "overlong");     // overlong '/'
  EXPECT_ERROR_HAS(build_char_tokenizer(std::string("\xED\xA0\x80", 3)), "surrogate");
  EXPECT_ERROR_HAS(build_char_tokenizer(std::string("x\xFF", 2)), "offset 1");
  EXPECT_ERROR_HAS(build_char_tokenizer(""), "empty");
  auto tok = build_char_tokenizer("abc");
  EXPECT_ERROR_HAS(tok->encode(std::string("ab\xE6\x97", 4)), "not valid UTF-8 at byte offset 2");
}

TEST(TokenizerJson, RoundTrip) {
  auto byte = tokenizer_from_json(make_byte_tokenizer()->to_json());
  EXPECT_EQ(byte->kind(), "byte");
  EXPECT_EQ(byte->vocab_size(), 256);

  const std::string text = "héllo 日本\n";
  auto tok = build_char_tokenizer(text);
  const auto j = tok->to_json();
  EXPECT_EQ(j["kind"], "char");
  // Through text as a checkpoint would store it.
  auto back = tokenizer_from_json(nlohmann::json::parse(j.dump()));
  ASSERT_EQ(back->vocab_size(), tok->vocab_size());
  for (int id = 0; id < tok->vocab_size(); ++id) EXPECT_EQ(back->decode(id), tok->decode(id));
  EXPECT_EQ(back->encode(text), tok->encode(text));
  // Ids follow the stored order, which need not be sorted.
  auto custom = tokenizer_from_json({{"kind", "char"}, {"chars", "zé a"}});
  EXPECT_EQ(custom->encode("a zé"), (std::vector<int32_t>{3, 2, 0, 1}));
}

TEST(TokenizerJson, BadJsonNamesTheField) {
  using nlohmann::json;
  EXPECT_ERROR_HAS(tokenizer_from_json(json::array()), "object");
  EXPECT_ERROR_HAS(tokenizer_from_json(json{{"chars", "ab"}}), "\"kind\"");
  EXPECT_ERROR_HAS(tokenizer_from_json(json{{"kind", 3}}), "\"kind\"");
  EXPECT_ERROR_HAS(tokenizer_from_json(json{{"kind", "bpe"}}), "bpe");
  EXPECT_ERROR_HAS(tokenizer_from_json(json{{"kind", "char"}}), "\"chars\"");
  EXPECT_ERROR_HAS(tokenizer_from_json(json{{"kind", "char"}, {"chars", ""}}), "\"chars\"");
  EXPECT_ERROR_HAS(tokenizer_from_json(json{{"kind", "char"}, {"chars", 5}}), "\"chars\"");
  const std::string dup = error_of([] { tokenizer_from_json(json{{"kind", "char"}, {"chars", "abéb"}}); });
  EXPECT_NE(dup.find("\"chars\" repeats character 'b' (U+0062)"), std::string::npos) << dup;
}

TEST(TextCorpus, SplitSizes) {
  TempDir tmp;
  const std::string text(1000, 'x');
  const auto path = tmp.write("c.txt", text);
  auto tok = make_byte_tokenizer();

  auto c = TextCorpus::load(path, *tok, 17, 0.1f);  // round(0.1 * 1000) = 100 > 17
  EXPECT_EQ(c.path, path);
  EXPECT_EQ(c.train.size(), 900u);
  EXPECT_EQ(c.val.size(), 100u);

  c = TextCorpus::load(path, *tok, 129, 0.01f);  // 10 < window, so one window is held out
  EXPECT_EQ(c.val.size(), 129u);
  EXPECT_EQ(c.train.size(), 871u);

  c = TextCorpus::load(path, *tok, 129, 0.0f);  // no validation set
  EXPECT_TRUE(c.val.empty());
  EXPECT_EQ(c.train.size(), 1000u);

  // The split is a cut, not a shuffle: train then val reproduce the text.
  const auto seq = tmp.write("seq.txt", "abcdefghijklmnopqrstuvwxyz");
  c = TextCorpus::load(seq, *tok, 4, 0.25f);  // round(6.5) = 7 held out
  EXPECT_EQ(tok->decode(c.train), "abcdefghijklmnopqrs");
  EXPECT_EQ(tok->decode(c.val), "tuvwxyz");
}

TEST(TextCorpus, ErrorsNameThePath) {
  TempDir tmp;
  auto tok = make_byte_tokenizer();
  const auto missing = tmp.path("nope.txt");
  EXPECT_ERROR_HAS(TextCorpus::load(missing, *tok, 8, 0.1f), missing + " not found");
  const auto empty = tmp.write("empty.txt", "");
  EXPECT_ERROR_HAS(TextCorpus::load(empty, *tok, 8, 0.1f), empty + " is empty");
  const auto small = tmp.write("small.txt", std::string(57, 'a'));
  const std::string msg = error_of([&] { TextCorpus::load(small, *tok, 129, 0.0f); });
  EXPECT_NE(msg.find("corpus " + small + " has 57 tokens, fewer than one window of 129"), std::string::npos) << msg;
  // Enough for one window but not for a window of training plus one of validation.
  const auto tight = tmp.write("tight.txt", std::string(200, 'a'));
  const std::string split = error_of([&] { TextCorpus::load(tight, *tok, 129, 0.1f); });
  EXPECT_NE(split.find(tight), std::string::npos) << split;
  EXPECT_NE(split.find("training part has 71"), std::string::npos) << split;
  EXPECT_ERROR_HAS(TextCorpus::load(tmp.path(""), *tok, 8, 0.1f), "directory");
  EXPECT_ERROR_HAS(TextCorpus::load(small, *tok, 8, 1.0f), "val_fraction");
  EXPECT_ERROR_HAS(TextCorpus::load(small, *tok, 1, 0.1f), "window 1");
  // A character outside a char vocabulary: path plus the tokenizer's offset.
  const auto odd = tmp.write("odd.txt", "abcabcabcZ");
  auto chars = build_char_tokenizer("abc");
  const std::string enc = error_of([&] { TextCorpus::load(odd, *chars, 4, 0.0f); });
  EXPECT_NE(enc.find(odd), std::string::npos) << enc;
  EXPECT_NE(enc.find("'Z' (U+005A) at byte offset 9"), std::string::npos) << enc;
}

TEST(Batching, SampleWindowsInRangeAndDeterministic) {
  std::vector<int32_t> tokens(50);
  for (int i = 0; i < 50; ++i) tokens[i] = i;  // value = position, so windows are checkable
  const int B = 64, W = 9;
  std::vector<int32_t> a(B * W), b(B * W);
  Rng r1(42), r2(42);
  sample_windows(tokens, B, W, r1, a.data());
  sample_windows(tokens, B, W, r2, b.data());
  EXPECT_EQ(a, b);
  std::set<int32_t> starts;
  for (int row = 0; row < B; ++row) {
    const int32_t s = a[row * W];
    EXPECT_GE(s, 0);
    EXPECT_LE(s, 50 - W);
    for (int t = 0; t < W; ++t) EXPECT_EQ(a[row * W + t], s + t);
    starts.insert(s);
  }
  EXPECT_GT(starts.size(), 20u);  // 42 possible starts; 64 draws should hit many
  Rng r3(43);
  sample_windows(tokens, B, W, r3, b.data());
  EXPECT_NE(a, b);
  // A corpus of exactly one window always yields it.
  std::vector<int32_t> one(tokens.begin(), tokens.begin() + W), out(W);
  sample_windows(one, 1, W, r1, out.data());
  EXPECT_EQ(out, one);
  EXPECT_ERROR_HAS(sample_windows(std::vector<int32_t>(5), 1, W, r1, out.data()), "fewer than one window");
}

TEST(Batching, EvalBatchesPredictEveryTokenOnce) {
  for (int n : {9, 10, 16, 17, 100, 101}) {
    std::vector<int32_t> tokens(n);
    for (int i = 0; i < n; ++i) tokens[i] = i;
    const int W = 9, B = 3;
    const int64_t count = eval_window_count(tokens, W);
    EXPECT_EQ(count, (n - 1) / (W - 1));
    std::vector<int> predicted(n, 0);
    std::vector<int32_t> out(B * W);
    int64_t rows_total = 0, k = 0;
    for (int rows; (rows = eval_batch(tokens, W, B, k, out.data())) > 0; ++k) {
      EXPECT_LE(rows, B);
      for (int r = 0; r < rows; ++r) {
        for (int t = 1; t < W; ++t) {  // position t is predicted from 0..t-1
          EXPECT_EQ(out[r * W + t], out[r * W] + t);
          ++predicted[out[r * W + t]];
        }
      }
      rows_total += rows;
    }
    EXPECT_EQ(rows_total, count);
    EXPECT_EQ(k, (count + B - 1) / B);
    // Token 0 has no context; 1 .. count*(W-1) once each; the short tail (< W-1) none.
    const int64_t covered = count * (W - 1);
    EXPECT_LT(n - 1 - covered, W - 1);
    for (int i = 0; i < n; ++i) EXPECT_EQ(predicted[i], (i >= 1 && i <= covered) ? 1 : 0) << "n=" << n << " i=" << i;
  }
  EXPECT_EQ(eval_window_count(std::vector<int32_t>(8), 9), 0);
  EXPECT_EQ(eval_window_count(std::vector<int32_t>(), 9), 0);
  int32_t dummy[9];
  EXPECT_EQ(eval_batch(std::vector<int32_t>(8), 9, 4, 0, dummy), 0);
  EXPECT_ERROR_HAS(eval_batch(std::vector<int32_t>(20), 9, 0, 0, dummy), "batch 0");
}

#ifdef GMLP_SOURCE_DIR
// The real corpus when scripts/fetch_data.sh has been run; skipped otherwise.
TEST(TextCorpus, KingJamesBible) {
  const std::string path = std::string(GMLP_SOURCE_DIR) + "/data/kjv.txt";
  // scripts/test.sh fetches the corpus before running the tests, so absence is a failure.
  ASSERT_TRUE(fs::exists(path)) << path << " not fetched (run scripts/fetch_data.sh)";
  std::ifstream in(path, std::ios::binary);
  const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  auto tok = build_char_tokenizer(text);
  EXPECT_LT(tok->vocab_size(), 128);  // plain ASCII
  auto c = TextCorpus::load(path, *tok, 257, 0.05f);
  EXPECT_EQ(c.train.size() + c.val.size(), 4404412u);
  EXPECT_EQ(c.val.size(), 220221u);
}
#endif

// --- labelled sentences ---

TEST(LabelledData, LoadsInFirstAppearanceOrder) {
  TempDir tmp;
  const auto train = tmp.write("train.tsv", "law\tIn the beginning\nwisdom\tThe LORD is my shepherd\r\nlaw\tAnd God said\n"
                                            "gospels+acts\tJesus wept.\twith a tab");  // no final newline
  const LabelledSet s = load_labelled(train);
  EXPECT_EQ(s.class_names, (std::vector<std::string>{"law", "wisdom", "gospels+acts"}));
  EXPECT_EQ(s.labels, (std::vector<int32_t>{0, 1, 0, 2}));
  ASSERT_EQ(s.size(), 4u);
  EXPECT_EQ(s.texts[1], "The LORD is my shepherd");  // '\r' dropped
  EXPECT_EQ(s.texts[3], "Jesus wept.\twith a tab");  // only the first tab separates
  // A test file against the training classes: its own order does not matter.
  const auto test = tmp.write("test.tsv", "gospels+acts\tx\nlaw\ty\n");
  const LabelledSet t = load_labelled(test, s.class_names);
  EXPECT_EQ(t.class_names, s.class_names);
  EXPECT_EQ(t.labels, (std::vector<int32_t>{2, 0}));
}

TEST(LabelledData, ErrorsNameFileAndLine) {
  TempDir tmp;
  const auto empty_line = tmp.write("a.tsv", "law\tx\n\nlaw\ty\n");
  EXPECT_ERROR_HAS(load_labelled(empty_line), empty_line + ":2: empty line");
  const auto no_tab = tmp.write("b.tsv", "law\tx\nlaw y\n");
  EXPECT_ERROR_HAS(load_labelled(no_tab), no_tab + ":2: no tab");
  const auto no_label = tmp.write("c.tsv", "\tx\n");
  EXPECT_ERROR_HAS(load_labelled(no_label), no_label + ":1: empty label");
  const auto no_text = tmp.write("d.tsv", "law\tx\nlaw\t\n");
  EXPECT_ERROR_HAS(load_labelled(no_text), no_text + ":2: empty text");
  const auto unknown = tmp.write("e.tsv", "law\tx\nprophets\ty\n");
  EXPECT_ERROR_HAS(load_labelled(unknown, {"law", "history"}),
                   unknown + ":2: label \"prophets\" is not one of the training classes (law, history)");
  const auto nothing = tmp.write("f.tsv", "");
  EXPECT_ERROR_HAS(load_labelled(nothing), nothing + " holds no lines");
  const auto missing = tmp.path("missing.tsv");
  EXPECT_ERROR_HAS(load_labelled(missing), "cannot read " + missing);
  const auto trailing = tmp.write("g.tsv", "law\tx\n\n");  // a blank last line is an empty line too
  EXPECT_ERROR_HAS(load_labelled(trailing), trailing + ":2: empty line");
}

TEST(LabelledData, EncodePaddedPadsTruncatesAndGathers) {
  auto tok = make_byte_tokenizer(mlm_specials());
  const PaddedTokens p = encode_padded({"ab", "abcdef", "abcd", "x"}, *tok, 4);
  EXPECT_EQ(p.rows, 4);
  EXPECT_EQ(p.T, 4);
  EXPECT_EQ(p.truncated, 1);  // "abcdef" only; "abcd" fits exactly
  EXPECT_EQ(p.lengths, (std::vector<int32_t>{2, 4, 4, 1}));
  const int32_t P = 256;
  EXPECT_EQ(p.tokens, (std::vector<int32_t>{'a', 'b', P, P, 'a', 'b', 'c', 'd', 'a', 'b', 'c', 'd', 'x', P, P, P}));
  const size_t idx[] = {3, 0};
  std::vector<int32_t> rows(8), lengths(2);
  gather_rows(p, idx, 2, rows.data(), lengths.data());
  EXPECT_EQ(rows, (std::vector<int32_t>{'x', P, P, P, 'a', 'b', P, P}));
  EXPECT_EQ(lengths, (std::vector<int32_t>{1, 2}));
  const size_t bad[] = {4};
  EXPECT_ERROR_HAS(gather_rows(p, bad, 1, rows.data(), lengths.data()), "row 4 outside [0, 4)");

  EXPECT_ERROR_HAS(encode_padded({"ab"}, *make_byte_tokenizer(), 4), "no [PAD]");
  EXPECT_ERROR_HAS(encode_padded({"ab"}, *tok, 0), "at least 1");
  EXPECT_ERROR_HAS(encode_padded({"ab", ""}, *tok, 4), "text 1 encodes to no tokens");
  auto chars = build_char_tokenizer("abc", mlm_specials());
  EXPECT_ERROR_HAS(encode_padded({"abc", "abz"}, *chars, 4), "text 1: character 'z'");
  // The char tokenizer pads with its own [PAD] id.
  EXPECT_EQ(encode_padded({"cab"}, *chars, 5).tokens, (std::vector<int32_t>{2, 0, 1, 3, 3}));
}

TEST(LabelledData, ParsesKjvLines) {
  KjvVerse v;
  ASSERT_TRUE(parse_kjv_line("Ge1:1 In the beginning God created the heaven and the earth.", &v));
  EXPECT_EQ(v.book, "Ge");
  EXPECT_EQ(v.chapter, 1);
  EXPECT_EQ(v.verse, 1);
  EXPECT_EQ(v.text, "In the beginning God created the heaven and the earth.");
  ASSERT_TRUE(parse_kjv_line("1Sm17:49 And David put his hand in his bag,", &v));
  EXPECT_EQ(v.book, "1Sm");
  EXPECT_EQ(v.chapter, 17);
  EXPECT_EQ(v.verse, 49);
  ASSERT_TRUE(parse_kjv_line("Psa119:176 I have gone astray  like a lost sheep", &v));
  EXPECT_EQ(v.chapter, 119);
  EXPECT_EQ(v.text, "I have gone astray  like a lost sheep");  // kept byte for byte
  for (const char* bad : {"", "hello world", "Ge1:1", "Ge1:1 ", "Ge:1 x", "Ge1 x", "1:1 x", "Ge1:x y", "Ge1;1 x",
                          "Ge1:1\tx", "12Ge1:1 x"})
    EXPECT_FALSE(parse_kjv_line(bad, &v)) << bad;
}

// --- masked-LM corruption ---

TEST(Masking, StatisticsOverManyDraws) {
  auto tok = make_byte_tokenizer(mlm_specials());  // [PAD] 256, [MASK] 257
  const int T = 64, real = 50;                     // 50 text bytes then 14 pads
  std::vector<int32_t> in(T, tok->pad_id());
  for (int t = 0; t < real; ++t) in[t] = 'a' + t % 26;
  in[7] = tok->mask_id();  // a [MASK] already in the input is special too: never chosen
  const int eligible = real - 1;
  const int k = int(std::lround(0.15 * eligible));  // 7
  Rng rng(123);
  std::vector<int32_t> inputs(T), targets(T);
  std::vector<int> chosen_at(T, 0);
  int64_t chosen = 0, masked = 0, random = 0, kept = 0;
  const int draws = 20000;
  for (int d = 0; d < draws; ++d) {
    ASSERT_EQ(mask_tokens(in.data(), T, inputs.data(), targets.data(), *tok, rng), k);
    int n = 0;
    for (int t = 0; t < T; ++t) {
      if (targets[t] < 0) {
        ASSERT_EQ(targets[t], -1);
        ASSERT_EQ(inputs[t], in[t]) << "unchosen positions are untouched";
        continue;
      }
      ++n;
      ++chosen_at[t];
      ASSERT_FALSE(tok->is_special(in[t])) << "position " << t;
      ASSERT_EQ(targets[t], in[t]);
      if (inputs[t] == tok->mask_id()) {
        ++masked;
      } else if (inputs[t] == in[t]) {
        ++kept;  // includes a random draw of the same byte (1/256 of the 10%)
      } else {
        ++random;
        ASSERT_FALSE(tok->is_special(inputs[t]));
        ASSERT_GE(inputs[t], 0);
        ASSERT_LT(inputs[t], 256);
      }
    }
    ASSERT_EQ(n, k);
    chosen += n;
  }
  const double c = double(chosen);
  EXPECT_NEAR(masked / c, 0.8, 0.01);
  EXPECT_NEAR(random / c, 0.1 * 255.0 / 256.0, 0.008);
  EXPECT_NEAR(kept / c, 0.1 + 0.1 / 256.0, 0.008);
  // Every eligible position is chosen with probability k / eligible; the others never.
  for (int t = 0; t < T; ++t) {
    if (t >= real || t == 7) {
      EXPECT_EQ(chosen_at[t], 0) << t;
    } else {
      EXPECT_NEAR(chosen_at[t] / double(draws), double(k) / eligible, 0.012) << t;
    }
  }
}

TEST(Masking, RandomReplacementsCoverTheNonSpecialVocabulary) {
  auto tok = build_char_tokenizer("abcd", mlm_specials());  // a b c d [PAD] [MASK]
  std::vector<int32_t> in = {0, 1, 2, 3, 4, 4};
  std::vector<int32_t> inputs(6), targets(6);
  std::map<int32_t, int> replaced;
  Rng rng(5);
  for (int d = 0; d < 20000; ++d) {
    mask_tokens(in.data(), 6, inputs.data(), targets.data(), *tok, rng, 0.5f);  // 2 of 4 chosen
    for (int t = 0; t < 6; ++t)
      if (targets[t] >= 0 && inputs[t] != tok->mask_id()) ++replaced[inputs[t]];
  }
  ASSERT_EQ(replaced.size(), 4u) << "only a b c d, never [PAD]";
  for (auto [id, n] : replaced) EXPECT_LT(id, 4);
}

TEST(Masking, AtLeastOneNoneForAllPadsInPlaceAndDeterministic) {
  auto tok = make_byte_tokenizer(mlm_specials());
  std::vector<int32_t> in = {'h', 'i', 256, 256}, inputs(4), targets(4);
  Rng rng(1);
  // round(0.15 * 2) = 0, but at least one position is chosen.
  EXPECT_EQ(mask_tokens(in.data(), 4, inputs.data(), targets.data(), *tok, rng), 1);
  EXPECT_EQ(std::count_if(targets.begin(), targets.end(), [](int32_t t) { return t >= 0; }), 1);
  EXPECT_EQ(targets[2], -1);
  EXPECT_EQ(targets[3], -1);
  // Only pads: nothing to choose.
  std::vector<int32_t> pads(4, 256);
  EXPECT_EQ(mask_tokens(pads.data(), 4, inputs.data(), targets.data(), *tok, rng), 0);
  EXPECT_EQ(targets, std::vector<int32_t>(4, -1));
  EXPECT_EQ(inputs, pads);
  // In place, and the same seed gives the same corruption.
  std::vector<int32_t> text(40);
  for (int t = 0; t < 40; ++t) text[t] = 'a' + t % 26;
  std::vector<int32_t> a = text, ta(40), b(40), tb(40);
  Rng r1(77), r2(77);
  EXPECT_EQ(mask_tokens(a.data(), 40, a.data(), ta.data(), *tok, r1), 6);  // round(0.15 * 40)
  mask_tokens(text.data(), 40, b.data(), tb.data(), *tok, r2);
  EXPECT_EQ(a, b);
  EXPECT_EQ(ta, tb);
  for (int t = 0; t < 40; ++t) EXPECT_EQ(tb[t] >= 0 ? tb[t] : text[t], text[t]);
  // Errors.
  EXPECT_ERROR_HAS(mask_tokens(in.data(), 4, inputs.data(), targets.data(), *make_byte_tokenizer(), rng), "no [MASK]");
  EXPECT_ERROR_HAS(mask_tokens(in.data(), 4, inputs.data(), targets.data(), *tok, rng, 0.f), "mask_prob");
  EXPECT_ERROR_HAS(mask_tokens(in.data(), 4, inputs.data(), targets.data(), *tok, rng, 1.5f), "mask_prob");
  std::vector<int32_t> out_of_range = {'a', 258};
  EXPECT_ERROR_HAS(mask_tokens(out_of_range.data(), 2, inputs.data(), targets.data(), *tok, rng),
                   "id 258 at position 1");
}

// --- naive Bayes and confusion matrices ---

TEST(NaiveBayes, WordTokens) {
  EXPECT_EQ(word_tokens("And the LORD's word, 12 times: café!"),
            (std::vector<std::string>{"and", "the", "lord", "s", "word", "12", "times", "café"}));
  EXPECT_TRUE(word_tokens(" ,;. ").empty());
}

TEST(NaiveBayes, TinySetWithAKnownAnswer) {
  LabelledSet train;
  train.class_names = {"fruit", "tool"};
  train.texts = {"apple banana apple", "banana cherry", "hammer nail", "saw hammer banana"};
  train.labels = {0, 0, 1, 1};
  NaiveBayes nb;
  nb.fit(train);
  EXPECT_EQ(nb.n_classes(), 2);
  EXPECT_EQ(nb.vocabulary_size(), 6u);  // apple banana cherry hammer nail saw
  // By hand: fruit has 5 words (apple 2, banana 2, cherry 1), tool 5 (hammer 2, nail 1,
  // saw 1, banana 1); |V| = 6, alpha 1, priors 1/2 each.
  const auto s = nb.scores("Apple, banana and a HAMMER");  // "and", "a" are unknown: ignored
  const double fruit = std::log(0.5) + std::log(3.0 / 11) + std::log(3.0 / 11) + std::log(1.0 / 11);
  const double tool = std::log(0.5) + std::log(1.0 / 11) + std::log(2.0 / 11) + std::log(3.0 / 11);
  ASSERT_EQ(s.size(), 2u);
  EXPECT_NEAR(s[0], fruit, 1e-12);
  EXPECT_NEAR(s[1], tool, 1e-12);
  EXPECT_EQ(nb.predict("Apple, banana and a HAMMER"), 0);
  EXPECT_EQ(nb.predict("a saw and nails and a hammer"), 1);
  EXPECT_EQ(nb.predict("unknown words only"), 0);  // equal priors: the tie goes to class 0
  // alpha changes the estimates: with alpha 0.5, cherry under tool is 0.5 / 8.
  nb.fit(train, 0.5);
  EXPECT_NEAR(nb.scores("cherry")[1], std::log(0.5) + std::log(0.5 / 8), 1e-12);
  // Unequal priors decide a text with no known word.
  train.texts.push_back("nail");
  train.labels.push_back(1);
  nb.fit(train);
  EXPECT_EQ(nb.predict("zzz"), 1);
  EXPECT_ERROR_HAS(nb.fit(LabelledSet{}), "empty");
  EXPECT_ERROR_HAS(nb.fit(train, 0.0), "alpha");
  EXPECT_ERROR_HAS(NaiveBayes().predict("x"), "before fit");
}

TEST(Confusion, MatrixAccuracyAndTable) {
  const std::vector<int32_t> truth = {0, 0, 1, 1, 1, 2}, pred = {0, 1, 1, 1, 0, 2};
  const auto m = confusion_matrix(truth, pred, 3);
  EXPECT_EQ(m, (std::vector<int64_t>{1, 1, 0, 1, 2, 0, 0, 0, 1}));
  EXPECT_NEAR(confusion_accuracy(m), 4.0 / 6, 1e-12);
  EXPECT_EQ(confusion_accuracy(std::vector<int64_t>(4, 0)), 0.0);
  const std::vector<std::string> names = {"law", "history", "letters+revelation"};
  const std::string table = format_confusion(m, names);
  std::istringstream lines(table);
  std::string header, row0, row1, row2;
  std::getline(lines, header);
  std::getline(lines, row0);
  std::getline(lines, row1);
  std::getline(lines, row2);
  EXPECT_NE(header.find("true \\ predicted"), std::string::npos) << table;
  EXPECT_NE(header.find("letters+revelation  total  recall"), std::string::npos) << table;
  EXPECT_EQ(row0.rfind("law ", 0), 0u) << table;
  EXPECT_NE(row0.find("0.500"), std::string::npos) << table;
  EXPECT_NE(row1.find("0.667"), std::string::npos) << table;
  EXPECT_NE(row2.find("1.000"), std::string::npos) << table;
  // Columns line up: every line has the same length.
  EXPECT_EQ(header.size(), row0.size()) << table;
  EXPECT_EQ(row1.size(), row2.size()) << table;
  const auto j = confusion_json(m, names);
  EXPECT_EQ(j["classes"], nlohmann::json(names));
  EXPECT_EQ(j["matrix"], nlohmann::json::parse("[[1,1,0],[1,2,0],[0,0,1]]"));
  EXPECT_ERROR_HAS(format_confusion(m, {"a", "b"}), "9 entries for 2 class names");
  EXPECT_ERROR_HAS(confusion_matrix({0, 3}, {0, 0}, 3), "example 1");
  EXPECT_ERROR_HAS(confusion_matrix({0}, {0, 1}, 3), "1 true labels but 2 predictions");
}

TEST(Baseline, CommandOnASyntheticSet) {
  TempDir tmp;
  std::string train, test;
  for (int i = 0; i < 20; ++i) {
    train += "red\tcrimson scarlet blood rose " + std::to_string(i) + "\n";
    train += "blue\tsky sea sapphire ocean " + std::to_string(i) + "\n";
  }
  test = "blue\tthe sea and the sky\nred\ta scarlet rose\nred\tthe ocean\n";  // the last is wrong
  const auto tr = tmp.write("train.tsv", train), te = tmp.write("test.tsv", test);
  auto r = test::run_command(test::gmlp_exe() + " baseline --train " + tr + " --test " + te + " --json");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const auto j = nlohmann::json::parse(r.output);
  EXPECT_NEAR(j["accuracy"].get<double>(), 2.0 / 3, 1e-12);
  EXPECT_EQ(j["confusion"]["classes"], nlohmann::json::parse(R"(["red","blue"])"));
  EXPECT_EQ(j["confusion"]["matrix"], nlohmann::json::parse("[[1,1],[0,1]]"));
  r = test::run_command(test::gmlp_exe() + " baseline --train " + tr + " --test " + te);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("accuracy 0.6667 (2 / 3)"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("true \\ predicted"), std::string::npos) << r.output;
  const auto odd = tmp.write("odd.tsv", "green\tgrass\n");
  r = test::run_command(test::gmlp_exe() + " baseline --train " + tr + " --test " + odd);
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_NE(r.output.find(odd + ":1: label \"green\""), std::string::npos) << r.output;
}

#ifdef GMLP_SOURCE_DIR
// The book-group files of scripts/make_kjv_groups.sh (run by scripts/fetch_data.sh).
TEST(KjvGroups, FilesMatchTheSpecAndTheBaselineScoresAbout072) {
  const std::string dir = std::string(GMLP_SOURCE_DIR) + "/data/kjv_groups/";
  ASSERT_TRUE(fs::exists(dir + "train.tsv")) << dir << " not made (run scripts/fetch_data.sh)";
  const LabelledSet train = load_labelled(dir + "train.tsv");
  const LabelledSet test = load_labelled(dir + "test.tsv", train.class_names);
  EXPECT_EQ(train.class_names, (std::vector<std::string>{"law", "history", "wisdom", "prophets", "gospels+acts",
                                                         "letters+revelation"}));
  EXPECT_EQ(train.size(), 25720u);
  EXPECT_EQ(test.size(), 5382u);
  EXPECT_EQ(train.texts.front(), "In the beginning God created the heaven and the earth.");
  // The MLM corpus is the training verses, nothing else.
  std::ifstream pre(dir + "pretrain.txt");
  size_t i = 0;
  for (std::string line; std::getline(pre, line); ++i) {
    ASSERT_LT(i, train.size());
    ASSERT_EQ(line, train.texts[i]) << "pretrain.txt line " << i + 1;
  }
  EXPECT_EQ(i, train.size());
  // fit.tsv and val.tsv split train.tsv (by whole chapters; the script says which):
  // each keeps its order, and together they hold exactly its verses, every class in both.
  const LabelledSet fit = load_labelled(dir + "fit.tsv", train.class_names);
  const LabelledSet val = load_labelled(dir + "val.tsv", train.class_names);
  EXPECT_EQ(fit.size(), 22324u);
  EXPECT_EQ(val.size(), 3396u);
  using Pairs = std::vector<std::pair<int, std::string>>;
  auto pairs = [](const LabelledSet& s) {
    Pairs p;
    for (size_t j = 0; j < s.size(); ++j) p.emplace_back(s.labels[j], s.texts[j]);
    return p;
  };
  const Pairs all = pairs(train);
  for (const LabelledSet* part : {&fit, &val}) {
    const Pairs p = pairs(*part);
    size_t k = 0;
    for (size_t j = 0; j < all.size() && k < p.size(); ++j) k += all[j] == p[k];
    EXPECT_EQ(k, p.size()) << "not in train.tsv's order";
    std::vector<int> per_class(train.class_names.size());
    for (int l : part->labels) ++per_class[size_t(l)];
    for (int n : per_class) EXPECT_GT(n, 300);
  }
  Pairs both = pairs(fit), sorted_all = all;
  const Pairs v = pairs(val);
  both.insert(both.end(), v.begin(), v.end());
  std::sort(both.begin(), both.end());
  std::sort(sorted_all.begin(), sorted_all.end());
  EXPECT_TRUE(both == sorted_all) << "fit.tsv + val.tsv is not train.tsv";
  NaiveBayes nb;
  nb.fit(train);
  int64_t right = 0;
  for (size_t j = 0; j < test.size(); ++j) right += nb.predict(test.texts[j]) == test.labels[j];
  const double acc = double(right) / double(test.size());
  EXPECT_NEAR(acc, 0.72, 0.02);
  EXPECT_EQ(right, 3869);  // deterministic
}
#endif
