// Tokenizers, corpus loading and batching (src/data).
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <set>
#include <string>
#include <vector>

#include <unistd.h>

#include "gmlp/dataset.h"
#include "gmlp/error.h"
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
