// Image data: IDX files (raw and gzipped) and every way they can be malformed,
// normalisation, shift augmentation, and single image files (PGM, PNG) with channel
// conversion and resizing.
#include <gtest/gtest.h>
#include <zlib.h>

#include <array>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <numeric>
#include <random>
#include <set>

#include "gmlp/error.h"
#include "gmlp/files.h"
#include "gmlp/image.h"
#include "gmlp/plot.h"
#include "gmlp/safetensors.h"  // read_file
#include "test_util.h"

namespace gmlp {
namespace {

namespace fs = std::filesystem;
using test::error_of;
using test::TempDir;

using Bytes = std::vector<uint8_t>;

void write_bytes(const std::string& path, const Bytes& b) {
  std::ofstream f(path, std::ios::binary);
  f.write(reinterpret_cast<const char*>(b.data()), std::streamsize(b.size()));
  ASSERT_TRUE(f.good()) << path;
}

void write_text(const std::string& path, const std::string& s) {
  std::ofstream f(path, std::ios::binary);
  f << s;
}

// gzip (not zlib) framing via deflateInit2's windowBits 16 + 15.
Bytes gzip(const Bytes& in) {
  z_stream zs{};
  EXPECT_EQ(deflateInit2(&zs, 6, Z_DEFLATED, 16 + MAX_WBITS, 8, Z_DEFAULT_STRATEGY), Z_OK);
  Bytes out(deflateBound(&zs, uLong(in.size())) + 64);
  zs.next_in = const_cast<Bytef*>(in.data());
  zs.avail_in = uInt(in.size());
  zs.next_out = out.data();
  zs.avail_out = uInt(out.size());
  EXPECT_EQ(deflate(&zs, Z_FINISH), Z_STREAM_END);
  out.resize(zs.total_out);
  deflateEnd(&zs);
  return out;
}

// An IDX file: magic 00 00 <type> <ndims>, big-endian dims, then the data.
Bytes idx(const std::vector<uint32_t>& dims, const Bytes& data, uint8_t type = 0x08) {
  Bytes b = {0, 0, type, uint8_t(dims.size())};
  for (uint32_t d : dims)
    for (int s = 24; s >= 0; s -= 8) b.push_back(uint8_t(d >> s));
  b.insert(b.end(), data.begin(), data.end());
  return b;
}

// 3 images of 4x5 with pixel k = (7 * k + i) % 256 and labels 2, 0, 1.
struct Small {
  Bytes pixels, labels = {2, 0, 1};
  Small() {
    for (int i = 0; i < 3; ++i)
      for (int k = 0; k < 20; ++k) pixels.push_back(uint8_t((7 * k + 40 * i) % 256));
  }
  Bytes images_file() const { return idx({3, 4, 5}, pixels); }
  Bytes labels_file() const { return idx({3}, labels); }
};

void expect_small(const ImageSet& s, const Small& want) {
  EXPECT_EQ(s.n, 3);
  EXPECT_EQ(s.channels, 1);
  EXPECT_EQ(s.height, 4);
  EXPECT_EQ(s.width, 5);
  ASSERT_TRUE(s.as_bytes);  // an IDX file's bytes, as they are: a quarter of floats' memory
  EXPECT_TRUE(s.pixels.empty());
  EXPECT_EQ(s.bytes, want.pixels);
  for (size_t i = 0; i < s.bytes.size(); ++i) ASSERT_EQ(s.value(i), float(want.pixels[i]) * (1.0f / 255.0f)) << i;
  EXPECT_EQ(s.labels, (std::vector<int32_t>{2, 0, 1}));
}

TEST(Idx, RawAndGzippedRoundTrip) {
  TempDir dir("idx");
  Small sm;
  write_bytes(dir.file("im"), sm.images_file());
  write_bytes(dir.file("lb"), sm.labels_file());
  write_bytes(dir.file("im.gz"), gzip(sm.images_file()));
  write_bytes(dir.file("lb.gz"), gzip(sm.labels_file()));
  const ImageSet raw = load_idx(dir.file("im"), dir.file("lb"));
  expect_small(raw, sm);
  EXPECT_EQ(raw.n_classes, 3);  // largest label + 1
  const ImageSet gz = load_idx(dir.file("im.gz"), dir.file("lb.gz"), 10);
  expect_small(gz, sm);
  EXPECT_EQ(gz.n_classes, 10);
  // A set holds its bytes and no slack (the file's own vector, its header shifted out;
  // gunzip's grown to the size the header declares), so it costs its size for the run.
  for (const ImageSet* s : {&raw, &gz}) EXPECT_LE(s->bytes.capacity(), s->bytes.size() + 16);
  EXPECT_EQ(raw.image_bytes(1)[0], 40);
  // Mixed forms, and the raw bytes behind read_maybe_gzipped are the same.
  expect_small(load_idx(dir.file("im"), dir.file("lb.gz")), sm);
  EXPECT_EQ(read_maybe_gzipped(dir.file("im.gz")), sm.images_file());
}

TEST(Idx, ConcatenatedGzipMembers) {
  TempDir dir("idx");
  Small sm;
  const Bytes whole = sm.images_file();
  Bytes a(whole.begin(), whole.begin() + 10), b(whole.begin() + 10, whole.end());
  Bytes two = gzip(a), gb = gzip(b);
  two.insert(two.end(), gb.begin(), gb.end());
  write_bytes(dir.file("im.gz"), two);
  EXPECT_EQ(read_maybe_gzipped(dir.file("im.gz")), whole);
}

TEST(Idx, DatasetFolderFindsRawOrGzNames) {
  TempDir dir("idxset");
  Small sm;
  write_bytes(dir.file("train-images-idx3-ubyte.gz"), gzip(sm.images_file()));
  write_bytes(dir.file("train-labels-idx1-ubyte.gz"), gzip(sm.labels_file()));
  write_bytes(dir.file("t10k-images-idx3-ubyte"), sm.images_file());
  write_bytes(dir.file("t10k-labels.idx1-ubyte"), sm.labels_file());  // the '.' form of some mirrors
  expect_small(load_image_dataset(dir.path().string(), "train", 10), sm);
  expect_small(load_image_dataset(dir.path().string(), "test", 10), sm);
  // Errors: a bad split, a missing folder, a missing file (naming what was tried).
  EXPECT_NE(error_of([&] { load_image_dataset(dir.path().string(), "val"); }).find("\"train\" or \"test\""),
            std::string::npos);
  const std::string nodir = dir.file("nope");
  EXPECT_NE(error_of([&] { load_image_dataset(nodir, "train"); }).find(nodir + ": not a directory"), std::string::npos);
  fs::remove(dir.file("t10k-images-idx3-ubyte"));
  const std::string e = error_of([&] { load_image_dataset(dir.path().string(), "test"); });
  EXPECT_NE(e.find("no test images file"), std::string::npos) << e;
  EXPECT_NE(e.find("t10k-images-idx3-ubyte.gz"), std::string::npos) << e;
}

// Each malformed file gets an error that names the file and says what is wrong.
TEST(Idx, MalformedFilesNameTheFileAndTheFault) {
  TempDir dir("idxbad");
  Small sm;
  const std::string lb = dir.file("labels"), im = dir.file("images");
  write_bytes(lb, sm.labels_file());
  write_bytes(im, sm.images_file());
  struct Case {
    std::string name;
    Bytes bytes;
    bool as_labels;  // the file stands in for the labels (else the images)
    std::string want;
  };
  Bytes bad_magic = sm.images_file();
  bad_magic[0] = 0x12;
  Bytes trailing = sm.images_file();
  trailing.push_back(0);
  Bytes truncated = sm.images_file();
  truncated.resize(truncated.size() - 7);
  Bytes gz_truncated = gzip(sm.images_file());
  gz_truncated.resize(gz_truncated.size() / 2);
  Bytes gz_corrupt = gzip(sm.images_file());
  gz_corrupt[gz_corrupt.size() - 8] ^= 0x5a;  // the CRC-32 of the data
  Bytes gz_junk = gzip(sm.images_file());
  gz_junk.push_back('x');
  const std::vector<Case> cases = {
      {"bad_magic", bad_magic, false, "bad magic 0x12 0x00"},
      {"float_type", idx({3, 4, 5}, Bytes(240, 0), 0x0D), false, "type code 0x0D (float32) is not supported"},
      {"image_rank", idx({3, 20}, sm.pixels), false, "must have 3 dims [n, height, width], found [3, 20]"},
      {"label_rank", idx({3, 1}, sm.labels), true, "must have 1 dim [n], found [3, 1]"},
      {"zero_dim", idx({3, 0, 5}, {}), false, "dimension 1 is 0"},
      {"no_dims", idx({}, {}), false, "0 dimensions"},
      {"short_header", Bytes{0, 0, 8, 3, 0, 0}, false, "truncated IDX header"},
      {"tiny", Bytes{0, 0}, false, "not an IDX file: only 2 bytes"},
      {"truncated", truncated, false, "truncated IDX data: dims [3, 4, 5] need 60 bytes, found 53"},
      {"trailing", trailing, false, "1 extra bytes"},
      {"count", idx({2}, {0, 1}), true, "2 labels but " + im + " holds 3 images"},
      {"gz_truncated", gz_truncated, false, "truncated gzip data"},
      {"gz_corrupt", gz_corrupt, false, "corrupt gzip data"},
      {"gz_junk", gz_junk, false, "trailing garbage"},
  };
  for (const auto& c : cases) {
    const std::string path = dir.file(c.name);
    write_bytes(path, c.bytes);
    const std::string e = c.as_labels ? error_of([&] { load_idx(im, path, 10); })
                                      : error_of([&] { load_idx(path, lb, 10); });
    EXPECT_NE(e.find(path), std::string::npos) << c.name << ": " << e;
    EXPECT_NE(e.find(c.want), std::string::npos) << c.name << ": " << e;
  }
  // A label at or above n_classes.
  write_bytes(dir.file("big_label"), idx({3}, {2, 0, 9}));
  std::string e = error_of([&] { load_idx(im, dir.file("big_label"), 5); });
  EXPECT_NE(e.find(dir.file("big_label") + ": label 9 at index 2 is out of range for 5 classes"), std::string::npos) << e;
  // A missing file and a directory.
  e = error_of([&] { load_idx(dir.file("missing"), lb); });
  EXPECT_NE(e.find(dir.file("missing") + ": cannot open"), std::string::npos) << e;
  e = error_of([&] { load_idx(dir.path().string(), lb); });
  EXPECT_NE(e.find("is a directory"), std::string::npos) << e;
}

ImageSet two_channel_set() {
  // 2 images, 2 channels, 2x2: channel 0 = {0, 1, 2, 3} + 4i, channel 1 = 5 everywhere.
  ImageSet s;
  s.n = 2, s.channels = 2, s.height = 2, s.width = 2, s.n_classes = 2;
  for (int i = 0; i < 2; ++i) {
    for (int k = 0; k < 4; ++k) s.pixels.push_back(float(k + 4 * i));
    for (int k = 0; k < 4; ++k) s.pixels.push_back(5.0f);
  }
  s.labels = {0, 1};
  return s;
}

TEST(Normalization, PerChannelMeanStdAndJson) {
  ImageSet s = two_channel_set();
  const Normalization n = compute_normalization(s);
  ASSERT_EQ(n.mean.size(), 2u);
  EXPECT_NEAR(n.mean[0], 3.5f, 1e-6);
  EXPECT_NEAR(n.std[0], std::sqrt(5.25f), 1e-6);  // population variance of 0..7
  EXPECT_NEAR(n.mean[1], 5.0f, 1e-6);
  EXPECT_EQ(n.std[1], 1.0f);  // a constant channel keeps its scale
  normalize(s, n);
  double m = 0, v = 0;
  for (int i = 0; i < 2; ++i)
    for (int k = 0; k < 4; ++k) m += s.image(i)[k];
  m /= 8;
  for (int i = 0; i < 2; ++i)
    for (int k = 0; k < 4; ++k) v += (s.image(i)[k] - m) * (s.image(i)[k] - m);
  EXPECT_NEAR(m, 0.0, 1e-6);
  EXPECT_NEAR(v / 8, 1.0, 1e-5);
  EXPECT_EQ(s.image(1)[4], 0.0f);  // channel 1: 5 - 5

  const Normalization back = Normalization::from_json(n.to_json(), "test");
  EXPECT_EQ(back.mean, n.mean);
  EXPECT_EQ(back.std, n.std);
  // Through text too (as stored in a checkpoint's config).
  const Normalization text = Normalization::from_json(nlohmann::json::parse(n.to_json().dump()), "test");
  EXPECT_EQ(text.mean, n.mean);

  EXPECT_NE(error_of([] { Normalization::from_json({{"mean", {0.5}}, {"std", {0.0}}}, "cfg.json"); })
                .find("cfg.json: normalization channel 0 needs a finite mean and std > 0"),
            std::string::npos);
  EXPECT_NE(error_of([] { Normalization::from_json({{"mean", {0.5, 1}}, {"std", {1}}}, "cfg.json"); })
                .find("mean has 2 entries but normalization.std has 1"),
            std::string::npos);
  EXPECT_NE(error_of([] { Normalization::from_json({{"mean", {0.5}}}, "cfg.json"); }).find("normalization.std must be"),
            std::string::npos);
  EXPECT_NE(error_of([] { Normalization::from_json({{"mean", {"a"}}, {"std", {1}}}, "cfg.json"); })
                .find("non-number"),
            std::string::npos);
  EXPECT_NE(error_of([] { Normalization::from_json({{"mean", {0}}, {"std", {1}}, {"x", 1}}, "cfg.json"); })
                .find("unknown key normalization.x"),
            std::string::npos);
  ImageSet one = two_channel_set();
  one.channels = 1, one.n = 4;
  EXPECT_NE(error_of([&] { normalize(one, n); }).find("normalization has 2 channels but the images have 1"),
            std::string::npos);
  // The identity normalisation leaves pixels alone.
  ImageSet same = two_channel_set();
  normalize(same, Normalization{});
  EXPECT_EQ(same.pixels, two_channel_set().pixels);
}

// A set held as bytes has the statistics of the floats it stands for, bit for bit, is
// not normalised in place, and byte_table gives for each byte what normalising its
// float gives.
TEST(Normalization, BytesStandForTheirFloatsToTheBit) {
  ImageSet bytes;
  bytes.n = 3, bytes.channels = 2, bytes.height = 3, bytes.width = 5, bytes.n_classes = 1, bytes.as_bytes = true;
  for (size_t k = 0; k < 3 * bytes.image_size(); ++k) bytes.bytes.push_back(uint8_t((k * 53 + k / 11) % 256));
  bytes.labels = {0, 0, 0};
  ImageSet floats = bytes;
  floats.as_bytes = false;
  floats.bytes.clear();
  for (uint8_t b : bytes.bytes) floats.pixels.push_back(float(b) * (1.0f / 255.0f));  // as IDX files were read
  const Normalization nb = compute_normalization(bytes), nf = compute_normalization(floats);
  EXPECT_EQ(nb.mean, nf.mean);
  EXPECT_EQ(nb.std, nf.std);
  EXPECT_NE(error_of([&] { normalize(bytes, nb); }).find("held as bytes is normalised by the model"),
            std::string::npos);
  normalize(floats, nf);
  const std::vector<float> table = byte_table(nb, 2);
  ASSERT_EQ(table.size(), 512u);
  const size_t hw = 15;
  for (size_t k = 0; k < bytes.bytes.size(); ++k)
    ASSERT_EQ(table[k / hw % 2 * 256 + bytes.bytes[k]], floats.pixels[k]) << k;
  for (int b = 0; b < 256; ++b) EXPECT_EQ(byte_table(Normalization{}, 1)[size_t(b)], float(b) * (1.0f / 255.0f)) << b;
}

TEST(Augment, ShiftZeroIsIdentityAndContentMoves) {
  const int C = 2, H = 5, W = 6;
  std::vector<float> src(C * H * W), dst(src.size(), -7.0f);
  std::iota(src.begin(), src.end(), 1.0f);
  shift_image(src.data(), dst.data(), C, H, W, 0, 0);
  EXPECT_EQ(dst, src);
  // Down 2, left 1: dst[c, y, x] = src[c, y-2, x+1]; the rest is the fill.
  shift_image(src.data(), dst.data(), C, H, W, 2, -1, -1.0f);
  for (int c = 0; c < C; ++c)
    for (int y = 0; y < H; ++y)
      for (int x = 0; x < W; ++x) {
        const int sy = y - 2, sx = x + 1;
        const float want = (sy >= 0 && sy < H && sx >= 0 && sx < W) ? src[(c * H + sy) * W + sx] : -1.0f;
        ASSERT_EQ(dst[(c * H + y) * W + x], want) << c << " " << y << " " << x;
      }
  // Bytes shift as floats do.
  std::vector<uint8_t> bsrc(src.size()), bdst(src.size(), 9);
  for (size_t i = 0; i < src.size(); ++i) bsrc[i] = uint8_t(src[i]);
  shift_image(bsrc.data(), bdst.data(), C, H, W, 2, -1, uint8_t(0));
  for (size_t i = 0; i < dst.size(); ++i) ASSERT_EQ(float(bdst[i]), dst[i] < 0 ? 0.0f : dst[i]) << i;
  // A shift past the border leaves only fill.
  shift_image(src.data(), dst.data(), C, H, W, 0, 9);
  for (float v : dst) EXPECT_EQ(v, 0.0f);

  // Random shifts: max 0 copies and draws nothing; otherwise a single bright pixel lands
  // at (y + dy, x + dx), with |dy|, |dx| <= k, and every offset turns up.
  Rng rng(42);
  const uint64_t before = rng.state();
  auto r0 = random_shift(src.data(), dst.data(), C, H, W, 0, rng);
  EXPECT_EQ(r0, std::make_pair(0, 0));
  EXPECT_EQ(dst, src);
  EXPECT_EQ(rng.state(), before);
  std::vector<float> dot(1 * 9 * 9, 0.0f), out(dot.size());
  dot[4 * 9 + 4] = 1.0f;
  std::set<std::pair<int, int>> seen;
  for (int t = 0; t < 400; ++t) {
    const auto [dy, dx] = random_shift(dot.data(), out.data(), 1, 9, 9, 2, rng);
    ASSERT_LE(std::abs(dy), 2);
    ASSERT_LE(std::abs(dx), 2);
    seen.insert({dy, dx});
    ASSERT_EQ(out[(4 + dy) * 9 + 4 + dx], 1.0f);
    ASSERT_EQ(std::accumulate(out.begin(), out.end(), 0.0f), 1.0f);
  }
  EXPECT_EQ(seen.size(), 25u);
  // Same seed, same shifts.
  Rng a(7), b(7);
  for (int t = 0; t < 20; ++t)
    EXPECT_EQ(random_shift(dot.data(), out.data(), 1, 9, 9, 3, a), random_shift(dot.data(), out.data(), 1, 9, 9, 3, b));
}

// An image folder: classes are the sorted folder names, images in class then file-name
// order, each held as bytes (an image of the set's size as its own bytes; another size or
// channel count converted and resized, rounded to bytes), hidden and other files skipped;
// a test split takes the training split's classes. Each malformed layout names the place.
TEST(ImageFolder, ClassesFromFolderNamesImagesAsBytes) {
  TempDir dir("imgfolder");
  auto pnm = [&](const std::string& rel, int channels, int h, int w, int seed) {
    fs::create_directories(fs::path(dir.file(rel)).parent_path());
    std::ofstream f(dir.file(rel), std::ios::binary);
    f << (channels == 3 ? "P6\n" : "P5\n") << w << " " << h << "\n255\n";
    Bytes px(size_t(channels) * h * w);
    for (size_t k = 0; k < px.size(); ++k) px[k] = uint8_t((k * 37 + size_t(seed) * 101) % 256);
    f.write(reinterpret_cast<const char*>(px.data()), std::streamsize(px.size()));
    return px;
  };
  const Bytes a = pnm("set/train/cat/a.pgm", 1, 4, 6, 1);
  pnm("set/train/cat/b.PGM", 1, 4, 6, 2);
  pnm("set/train/ant/z.pgm", 1, 4, 6, 3);
  pnm("set/train/dog/c.ppm", 3, 8, 12, 4);  // colour and twice the size: made grey and halved
  std::ofstream(dir.file("set/train/dog/notes.txt")) << "not an image";
  pnm("set/train/dog/.hidden.pgm", 1, 2, 2, 5);
  pnm("set/train/.cache/x.pgm", 1, 2, 2, 6);
  pnm("set/test/dog/d.pgm", 1, 4, 6, 7);

  std::vector<std::string> names;
  const ImageSet s = load_image_dataset(dir.file("set"), "train", 0, {}, &names);
  EXPECT_EQ(names, (std::vector<std::string>{"ant", "cat", "dog"}));
  ASSERT_TRUE(s.as_bytes);
  EXPECT_EQ(s.n, 4);
  EXPECT_EQ(s.n_classes, 3);
  EXPECT_EQ(s.labels, (std::vector<int32_t>{0, 1, 1, 2}));
  EXPECT_EQ((std::vector<int>{s.channels, s.height, s.width}), (std::vector<int>{1, 4, 6}));  // ant/z.pgm's
  EXPECT_EQ(Bytes(s.image_bytes(1), s.image_bytes(1) + 24), a);                               // cat/a.pgm, as it is
  const Image dog = load_image(dir.file("set/train/dog/c.ppm"), 1, 4, 6);
  for (size_t k = 0; k < 24; ++k) ASSERT_EQ(s.image_bytes(3)[k], uint8_t(std::lround(dog.pixels[k] * 255.0f))) << k;
  // A shape asked for: every image brought to it.
  const ImageSet rgb = load_image_dataset(dir.file("set"), "train", 0, {3, 2, 3}, &names);
  EXPECT_EQ((std::vector<int>{rgb.n, rgb.channels, rgb.height, rgb.width}), (std::vector<int>{4, 3, 2, 3}));
  EXPECT_EQ(rgb.bytes.size(), 4u * 18);
  // The test split by the training classes: its only folder is class 2.
  const ImageSet t = load_image_dataset(dir.file("set"), "test", 3, {1, 4, 6}, &names);
  EXPECT_EQ(t.labels, (std::vector<int32_t>{2}));
  EXPECT_EQ(t.n_classes, 3);
  // A model whose names repeat (ImageNet's "crane"): a folder of that name is ambiguous.
  std::vector<std::string> twice = {"dog", "cat", "dog"};
  EXPECT_NE(error_of([&] {
              load_image_dataset(dir.file("set"), "test", 3, {1, 4, 6}, &twice);
            }).find("class folder 'dog' names more than one of the model's classes (0, 2)"),
            std::string::npos);

  pnm("set/test/bird/e.pgm", 1, 4, 6, 8);
  EXPECT_NE(error_of([&] {
              load_image_dataset(dir.file("set"), "test", 3, {1, 4, 6}, &names);
            }).find("class folder 'bird' is not one of the model's classes (ant, cat, dog)"),
            std::string::npos);
  EXPECT_NE(
      error_of([&] { load_image_dataset(dir.file("set"), "train", 2); }).find("3 classes, more than the model's 2"),
      std::string::npos);
  fs::create_directories(dir.file("set/train/emu"));
  std::ofstream(dir.file("set/train/emu/readme.md")) << "x";
  EXPECT_NE(error_of([&] { load_image_dataset(dir.file("set"), "train"); }).find("emu: no images"), std::string::npos);
  fs::remove_all(dir.file("set/train/emu"));
  std::ofstream(dir.file("set/train/cat/broken.png")) << "not a png";
  const std::string e = error_of([&] { load_image_dataset(dir.file("set"), "train"); });
  EXPECT_NE(e.find("broken.png"), std::string::npos) << e;
  // Too many classes for the model is said before any image is decoded (a large folder's
  // decoding takes minutes): not the broken image.
  const std::string classes = error_of([&] { load_image_dataset(dir.file("set"), "train", 2); });
  EXPECT_NE(classes.find("3 classes, more than the model's 2"), std::string::npos) << classes;
  fs::remove(dir.file("set/train/cat/broken.png"));
  fs::remove_all(dir.file("set/test"));
  EXPECT_NE(error_of([&] { load_image_dataset(dir.file("set"), "test"); }).find("nor a test/ folder of class folders"),
            std::string::npos);
  fs::create_directories(dir.file("set/test"));
  EXPECT_NE(error_of([&] { load_image_dataset(dir.file("set"), "test"); }).find("no class subfolders"),
            std::string::npos);
  // A folder name that is no UTF-8 (it would become a class name), a link to itself.
  fs::create_directories(dir.file("set/test/caf\xe9"));
  EXPECT_NE(error_of([&] { load_image_dataset(dir.file("set"), "test"); }).find("the class folder's name"),
            std::string::npos);
  fs::remove_all(dir.file("set/test/caf\xe9"));
  pnm("set/test/cat/ok.pgm", 1, 4, 6, 9);
  fs::create_symlink(dir.file("set/test/cat/loop.png"), dir.file("set/test/cat/loop.png"));
  const std::string loop = error_of([&] { load_image_dataset(dir.file("set"), "test"); });
  EXPECT_NE(loop.find("loop.png: cannot read"), std::string::npos) << loop;
  // An IDX file of either split makes it an IDX set: a folder is never read beside it.
  fs::remove(dir.file("set/test/cat/loop.png"));
  write_bytes(dir.file("set/train-images-idx3-ubyte"), Small().images_file());
  write_bytes(dir.file("set/train-labels-idx1-ubyte"), Small().labels_file());
  EXPECT_NE(error_of([&] { load_image_dataset(dir.file("set"), "test"); }).find("no test images file"),
            std::string::npos);
}

// Streamed, an image folder names its files and holds no image; read_images decodes any
// of them, in any order, to the bytes the held set holds (PNG and PPM of other sizes and
// channel counts converted and resized alike), and the normalisation computed over it is
// the held set's, bit for bit. A file that cannot be read is found when it is read, the
// first in the order asked for named.
TEST(ImageFolder, AStreamedSetReadsTheBytesAHeldSetHolds) {
  TempDir dir("imgstream");
  std::mt19937 gen(4);
  for (int i = 0; i < 40; ++i) {
    const std::string cls = std::string("set/train/") + char('a' + i % 3);
    fs::create_directories(dir.file(cls));
    const int h = 5 + i % 7, w = 4 + i % 5;
    if (i % 4 == 0) {  // a colour PNG
      plot::Canvas cv(w, h, plot::kBlack);
      for (int y = 0; y < h; ++y)
        for (int x = 0; x < w; ++x) cv.set(x, y, {uint8_t(gen()), uint8_t(gen()), uint8_t(gen())});
      cv.write_png(dir.file(cls + "/" + std::to_string(i) + ".png"));
    } else {
      Bytes px(size_t(h) * w);
      for (auto& v : px) v = uint8_t(gen());
      test::write_pgm(dir.file(cls + "/" + std::to_string(i) + ".pgm"), px, h, w);
    }
  }
  for (const ImageShape shape : {ImageShape{3, 6, 7}, ImageShape{1, 9, 4}}) {
    std::vector<std::string> held_names, streamed_names;
    const ImageSet held = load_image_dataset(dir.file("set"), "train", 0, shape, &held_names);
    const ImageSet s = load_image_dataset(dir.file("set"), "train", 0, shape, &streamed_names, /*stream=*/true);
    ASSERT_FALSE(held.streamed());
    ASSERT_TRUE(s.streamed());
    EXPECT_TRUE(s.bytes.empty());
    EXPECT_EQ(s.files.size(), 40u);
    EXPECT_EQ(held_names, streamed_names);
    EXPECT_EQ(held.labels, s.labels);
    EXPECT_EQ((std::vector<int>{s.n, s.channels, s.height, s.width, s.n_classes}),
              (std::vector<int>{held.n, held.channels, held.height, held.width, held.n_classes}));
    std::vector<int> which(size_t(s.n));
    std::iota(which.begin(), which.end(), 0);
    std::shuffle(which.begin(), which.end(), gen);
    which.push_back(which[0]);  // an image twice in one read
    Bytes got(which.size() * s.image_size()), want(got.size());
    read_images(s, which.data(), int(which.size()), got.data());
    read_images(held, which.data(), int(which.size()), want.data());  // a held set's: copied
    for (size_t r = 0; r < which.size(); ++r)
      ASSERT_TRUE(std::equal(want.begin() + r * s.image_size(), want.begin() + (r + 1) * s.image_size(),
                             held.image_bytes(which[r])))
          << r;
    EXPECT_TRUE(got == want);
    const Normalization a = compute_normalization(held), b = compute_normalization(s);
    EXPECT_EQ(a.mean, b.mean);
    EXPECT_EQ(a.std, b.std);
  }
  // Unreadable files: listed as any other; found when read, the first asked for named.
  write_text(dir.file("set/train/a/zz-broken.png"), "not a png");
  write_text(dir.file("set/train/b/zz-empty.png"), "");
  const ImageSet s = load_image_dataset(dir.file("set"), "train", 0, {1, 4, 4}, nullptr, true);
  int broken = -1, empty = -1;
  for (int i = 0; i < s.n; ++i) {
    if (s.files[size_t(i)].find("zz-broken") != std::string::npos) broken = i;
    if (s.files[size_t(i)].find("zz-empty") != std::string::npos) empty = i;
  }
  ASSERT_GE(broken, 0);
  ASSERT_GE(empty, 0);
  Bytes out(3 * s.image_size());
  for (const auto& [order, named] : {std::pair{std::vector<int>{0, empty, broken}, "zz-empty"},
                                     std::pair{std::vector<int>{broken, 1, empty}, "zz-broken"}}) {
    const std::string e = error_of([&] { read_images(s, order.data(), 3, out.data()); });
    EXPECT_NE(e.find(named), std::string::npos) << e;
  }
  EXPECT_NE(error_of([&] { compute_normalization(s); }).find("zz-broken"), std::string::npos);
  const int outside = s.n;
  EXPECT_NE(error_of([&] { read_images(s, &outside, 1, out.data()); }).find("image 42 of a set of 42"),
            std::string::npos);
  // Held, the same folder stops at its load, naming the file.
  EXPECT_NE(error_of([&] {
              load_image_dataset(dir.file("set"), "train", 0, {1, 4, 4});
            }).find("zz-broken"),
            std::string::npos);
}

// A streamed row's crop is of its file at the file's own size (here 20x12, 27x12 and
// 12x34 grey and colour files brought to 3x8x8): read_images gives resize_box of the file's
// pixels, converted, over crop_box of the file's size, rounded to bytes.
TEST(ImageFolder, AStreamedCropIsOfTheFileAtItsOwnSize) {
  TempDir dir("imgcrop");
  std::mt19937 gen(6);
  const std::vector<std::array<int, 3>> files = {{1, 12, 20}, {3, 12, 27}, {1, 34, 12}};  // channels, h, w
  for (size_t i = 0; i < files.size(); ++i) {
    const auto [c, h, w] = files[i];
    fs::create_directories(dir.file("set/train/k"));
    std::ofstream f(dir.file("set/train/k/" + std::to_string(i) + (c == 3 ? ".ppm" : ".pgm")), std::ios::binary);
    f << (c == 3 ? "P6\n" : "P5\n") << w << " " << h << "\n255\n";
    for (int k = 0; k < c * h * w; ++k) f.put(char(gen() % 256));
  }
  const ImageSet s = load_image_dataset(dir.file("set"), "train", 0, {3, 8, 8}, nullptr, /*stream=*/true);
  ASSERT_EQ(s.n, 3);
  Rng rng(12);
  std::vector<CropDraw> crops;
  std::vector<int> which = {2, 0, 1, 2};
  for (size_t r = 0; r < which.size(); ++r) crops.push_back(draw_crop(rng));
  Bytes got(which.size() * s.image_size());
  read_images(s, which.data(), int(which.size()), got.data(), crops.data(), 0.2f);
  for (size_t r = 0; r < which.size(); ++r) {
    const Image src = convert_channels(read_image(s.files[size_t(which[r])]), 3);
    const Image want = resize_box(src, crop_box(crops[r], 0.2f, src.width, src.height), 8, 8);
    for (size_t k = 0; k < want.pixels.size(); ++k)
      ASSERT_EQ(got[r * s.image_size() + k], uint8_t(std::lround(want.pixels[k] * 255.0f))) << r << " " << k;
  }
}

// What a rank may hold: the least of the system's available memory and what its cgroup's
// limit leaves (the reclaimable file cache not counted as used), shared among the ranks on
// the machine; a full cgroup leaves nothing (refused), not "unknown".
TEST(ImageFolder, TheMemoryARankMayHoldIsTheLeastTheSystemAndItsCgroupLeave) {
  const uint64_t G = 1000000000;
  EXPECT_FALSE(memory_to_hold({}).has_value());
  EXPECT_EQ(memory_to_hold({8 * G, 0, 0, 0, 1}), 8 * G);
  EXPECT_EQ(memory_to_hold({8 * G, 0, 0, 0, 4}), 2 * G);
  EXPECT_EQ(memory_to_hold({8 * G, 16 * G, 15 * G, 12 * G, 1}), 8 * G);  // the cache freed: 13 GB left
  EXPECT_EQ(memory_to_hold({8 * G, 16 * G, 15 * G, 0, 1}), 1 * G);
  EXPECT_EQ(memory_to_hold({0, 16 * G, 10 * G, 0, 2}), 3 * G);
  EXPECT_EQ(memory_to_hold({8 * G, 16 * G, 17 * G, 0, 1}), 0u);
  const MemoryReport here = read_memory_report();
  EXPECT_GT(here.available, 0u) << "/proc/meminfo's MemAvailable";
  // The ranks on the machine: only a launched process's, by the first count set (a count
  // of 1 is a count), Slurm's "4(x2)" as 4.
  const char* vars[] = {"OMPI_COMM_WORLD_SIZE",       "PMIX_RANK",       "PMI_SIZE",
                        "OMPI_COMM_WORLD_LOCAL_SIZE", "MPI_LOCALNRANKS", "SLURM_STEP_TASKS_PER_NODE"};
  std::vector<std::pair<std::string, std::string>> saved;
  for (const char* v : vars)
    if (const char* x = std::getenv(v)) saved.emplace_back(v, x);
  for (const char* v : vars) unsetenv(v);
  auto ranks = [&](std::vector<std::pair<const char*, const char*>> env) {
    for (const auto& [k, v] : env) setenv(k, v, 1);
    const int n = read_memory_report().local_ranks;
    for (const auto& [k, v] : env) unsetenv(k);
    return n;
  };
  EXPECT_EQ(ranks({}), 1);
  EXPECT_EQ(ranks({{"OMPI_COMM_WORLD_LOCAL_SIZE", "4"}}), 1) << "not launched";
  EXPECT_EQ(ranks({{"OMPI_COMM_WORLD_SIZE", "8"}, {"OMPI_COMM_WORLD_LOCAL_SIZE", "4"}}), 4);
  EXPECT_EQ(ranks({{"OMPI_COMM_WORLD_SIZE", "8"},
                   {"OMPI_COMM_WORLD_LOCAL_SIZE", "1"},
                   {"SLURM_STEP_TASKS_PER_NODE", "1000000"}}),
            1);
  EXPECT_EQ(ranks({{"PMIX_RANK", "0"}, {"SLURM_STEP_TASKS_PER_NODE", "4(x2)"}}), 4);
  EXPECT_EQ(ranks({{"PMI_SIZE", "6"}, {"MPI_LOCALNRANKS", "3"}}), 3);
  for (const auto& [k, v] : saved) setenv(k.c_str(), v.c_str(), 1);
}

// A held folder whose bytes would not fit in the memory the system has free is refused
// before any image is decoded, naming what it needs and how to stream it; streamed, the
// same folder loads (nothing is decoded until used).
TEST(ImageFolder, AHeldSetLargerThanTheFreeMemoryIsRefusedBeforeDecoding) {
  uint64_t avail = 0;
  {
    std::ifstream f("/proc/meminfo");
    for (std::string key; f >> key;) {
      uint64_t kb = 0;
      f >> kb;
      if (key == "MemAvailable:") avail = kb * 1024;
      f.ignore(1 << 20, '\n');
    }
  }
  if (avail == 0) GTEST_SKIP() << "/proc/meminfo gives no MemAvailable";
  TempDir dir("imgbig");
  fs::create_directories(dir.file("set/train/a"));
  // Images of 3 x 30000 x 30000 (2.7 GB each), enough of them to pass the free memory.
  const double each = 3.0 * 30000 * 30000;
  const int n = int(double(avail) / each) + 2;
  for (int i = 0; i < n; ++i) test::write_pgm(dir.file("set/train/a/" + std::to_string(i) + ".pgm"), Bytes(4, 9), 2, 2);
  const std::string e = error_of([&] { load_image_dataset(dir.file("set"), "train", 0, {3, 30000, 30000}); });
  EXPECT_NE(e.find(std::to_string(n) + " images of 3x30000x30000 need"), std::string::npos) << e;
  EXPECT_NE(e.find("--set train.stream_images=true"), std::string::npos) << e;
  const ImageSet s = load_image_dataset(dir.file("set"), "train", 0, {3, 30000, 30000}, nullptr, true);
  EXPECT_EQ(s.n, n);
  EXPECT_TRUE(s.bytes.empty());
}

// A batch's mixing weight is Beta(alpha, alpha) (Rng::beta: its mean 1/2 and variance
// 1 / (4 (2 alpha + 1)), below 1 and above), and a CutMix box lies in the image, its
// weight the share outside it; with both alphas a batch takes either at even odds.
TEST(ImageFile, MixDrawsAreBetaWeightsAndBoxesInTheImage) {
  // A tiny alpha puts nearly all its draws at 0 or 1, none at 1/2 (its Gamma draws
  // underflow a double: taken as logarithms).
  for (const double alpha : {0.001, 0.2, 0.8, 1.0, 4.0}) {
    SCOPED_TRACE(alpha);
    Rng rng(17);
    const int n = 40000;
    double sum = 0, sq = 0;
    int middle = 0;
    for (int i = 0; i < n; ++i) {
      const double w = rng.beta(alpha, alpha);
      ASSERT_TRUE(w >= 0.0 && w <= 1.0) << w;
      sum += w;
      sq += w * w;
      middle += std::abs(w - 0.5) < 0.01;
    }
    const double mean = sum / n, var = sq / n - mean * mean, want = 1.0 / (4.0 * (2.0 * alpha + 1.0));
    EXPECT_NEAR(mean, 0.5, 0.01);
    EXPECT_NEAR(var, want, 0.05 * want);
    if (alpha < 0.01) {
      EXPECT_LT(middle, 10);
    }
  }
  Rng rng(3);
  int cuts = 0;
  for (int i = 0; i < 2000; ++i) {
    const MixDraw m = draw_mix(0.8f, 1.f, 13, 9, rng);
    cuts += m.cut;
    if (!m.cut) continue;
    ASSERT_TRUE(0 <= m.y0 && m.y0 <= m.y1 && m.y1 <= 13 && 0 <= m.x0 && m.x0 <= m.x1 && m.x1 <= 9);
    EXPECT_FLOAT_EQ(m.weight, 1.f - float((m.y1 - m.y0) * (m.x1 - m.x0)) / float(13 * 9));
  }
  EXPECT_GT(cuts, 900);
  EXPECT_LT(cuts, 1100);
  // One alpha: always that kind; no box for mixup.
  const MixDraw blend = draw_mix(0.8f, 0.f, 13, 9, rng), cut = draw_mix(0.f, 1.f, 13, 9, rng);
  EXPECT_FALSE(blend.cut);
  EXPECT_EQ(blend.y1 - blend.y0, 0);
  EXPECT_TRUE(cut.cut);
}

// Random erasing: a box drawn (probability 1) is narrower and shorter than the image, its
// area share in [0.02, 1/3] but for the rounding of its sides; probability 0 takes one
// uniform and erases nothing. The noise is standard normal, the same for the same seed
// and row and another for another row, and nothing outside the box changes.
TEST(ImageFile, ErasingDrawsABoxAndFillsItWithNoise) {
  constexpr int C = 3, H = 20, W = 16;
  Rng rng(9);
  for (int i = 0; i < 500; ++i) {
    const EraseDraw e = draw_erase(1.f, H, W, rng);
    if (!e.on) continue;
    ASSERT_TRUE(e.h >= 1 && e.w >= 1 && e.h < H && e.w < W && e.y0 >= 0 && e.x0 >= 0 && e.y0 + e.h <= H &&
                e.x0 + e.w <= W);
    const double share = double(e.h) * e.w / (H * W);
    EXPECT_GT(share, 0.005);
    EXPECT_LT(share, 0.45);
  }
  Rng none(4), one(4);
  EXPECT_FALSE(draw_erase(0.f, H, W, none).on);
  one.uniform();
  EXPECT_EQ(none.state(), one.state());
  // The noise over one large box, many times.
  EraseDraw big;
  big.on = true;
  big.y0 = 2, big.x0 = 3, big.h = 15, big.w = 11;
  double sum = 0, sq = 0;
  size_t n = 0;
  std::vector<float> first;
  for (int row = 0; row < 40; ++row) {
    std::vector<float> img(size_t(C) * H * W, 7.f);
    erase_image(img.data(), C, H, W, big, 1234, row);
    for (int c = 0; c < C; ++c)
      for (int y = 0; y < H; ++y)
        for (int x = 0; x < W; ++x) {
          const float v = img[(size_t(c) * H + y) * W + x];
          const bool in = y >= big.y0 && y < big.y0 + big.h && x >= big.x0 && x < big.x0 + big.w;
          if (!in) {
            ASSERT_EQ(v, 7.f);
            continue;
          }
          sum += v;
          sq += double(v) * v;
          ++n;
        }
    if (row == 0) first = img;
    if (row == 1) {
      EXPECT_NE(img, first);
    }
  }
  EXPECT_NEAR(sum / n, 0.0, 0.03);
  EXPECT_NEAR(sq / n, 1.0, 0.05);
  std::vector<float> again(size_t(C) * H * W, 7.f);
  erase_image(again.data(), C, H, W, big, 1234, 0);
  EXPECT_EQ(again, first);
}

// Random-resized crops are distributed as torchvision's RandomResizedCrop.get_params (the
// reference draws 20,000 boxes with torch's generator, here 20,000 with ours): for a wide,
// a tall (where most tries fail and the central crop is taken), a tiny and a very wide
// image, each side's and place's mean within 4.5 standard errors of torchvision's, the
// spread within 5%, and the share of central crops within 4.5 standard errors.
TEST(ImageFile, CropsAreDistributedAsTorchvisions) {
  TempDir dir("crops");
  constexpr int n = 20000;
  const auto r =
      test::run_command("/usr/bin/python3 " + test::source_dir() + "/tests/reference/crop_reference.py " +
                        dir.file("ref.json") + " " + std::to_string(n) + " 0.08 500x375 50x400 8x8 333x100 2>&1");
  ASSERT_EQ(r.exit_code, 0) << "torchvision (python3-torchvision) draws the reference crops:\n" << r.output;
  const auto ref = nlohmann::json::parse(read_file(dir.file("ref.json")));
  Rng rng(11);
  for (const auto& [W, H] : {std::pair{500, 375}, std::pair{50, 400}, std::pair{8, 8}, std::pair{333, 100}}) {
    const std::string size = std::to_string(W) + "x" + std::to_string(H);
    SCOPED_TRACE(size);
    const auto& want = ref.at(size);
    CropDraw none;  // the whole area at ratio 3/4 fits none of these: the central crop
    for (CropDraw::Try& u : none.tries) u = {1.f, 0.f, 0.f, 0.f};
    const CropBox c = crop_box(none, 1.f, W, H);
    double sum[4] = {}, sq[4] = {};
    int central = 0;
    for (int t = 0; t < n; ++t) {
      const CropBox b = crop_box(draw_crop(rng), 0.08f, W, H);
      const double v[4] = {b.y, b.x, b.h, b.w};
      for (int k = 0; k < 4; ++k) {
        sum[k] += v[k];
        sq[k] += v[k] * v[k];
      }
      central += b.x == c.x && b.y == c.y && b.w == c.w && b.h == c.h;
    }
    for (int k = 0; k < 4; ++k) {
      const double mean = sum[k] / n, sd = std::sqrt(std::max(0.0, sq[k] / n - mean * mean));
      const double ref_mean = want["mean"][k].get<double>(), ref_sd = want["sd"][k].get<double>();
      EXPECT_NEAR(mean, ref_mean, 4.5 * std::sqrt(2.0 / n) * std::max(ref_sd, 1e-3)) << "value " << k;
      EXPECT_NEAR(sd, ref_sd, 0.05 * ref_sd + 1e-3) << "value " << k;
    }
    const double share = double(central) / n, ref_share = want["fallback"].get<double>();
    EXPECT_NEAR(share, ref_share, 4.5 * std::sqrt(std::max(ref_share * (1 - ref_share), 1e-4) * 2.0 / n));
  }
}

// A random-resized crop: resize_box of the whole image is resize_bilinear, to the bit; a
// box inside one half of a two-tone image sees only that half; draw_crop takes its ten
// tries' 40 uniforms in order; crop_box's boxes lie in the image in whole pixels, the
// first try that fits taken, else the central crop; flip_image mirrors each row.
TEST(ImageFile, CropsResizeTheirBoxAndMirror) {
  // The naive reference: each output value's taps weighed one by one (the triangle's
  // weights, normalised, in float), rows first, then columns, each sum from 0 in tap order,
  // zero weights and all; the fast path must give its bits.
  auto naive = [](const Image& img, const CropBox& box, int oh, int ow) {
    auto weights = [](int in, int out, double start, double length, int i, int& lo) {
      const double scale = length / out, support = std::max(1.0, scale), centre = start + (i + 0.5) * scale;
      lo = std::max(0, int(std::floor(centre - support)));
      const int hi = std::min(in - 1, int(std::ceil(centre + support)));
      std::vector<float> w;
      double total = 0;
      for (int j = lo; j <= hi; ++j) total += std::max(0.0, 1.0 - std::abs((j + 0.5 - centre) / support));
      for (int j = lo; j <= hi; ++j)
        w.push_back(float(float(std::max(0.0, 1.0 - std::abs((j + 0.5 - centre) / support))) / total));
      return w;
    };
    Image out;
    out.channels = img.channels;
    out.height = oh;
    out.width = ow;
    for (int c = 0; c < img.channels; ++c) {
      std::vector<float> tmp(size_t(img.height) * ow);
      for (int y = 0; y < img.height; ++y)
        for (int x = 0; x < ow; ++x) {
          int lo = 0;
          const auto w = weights(img.width, ow, box.x, box.w, x, lo);
          float s = 0;
          for (size_t k = 0; k < w.size(); ++k) s += w[k] * img.at(c, y, lo + int(k));
          tmp[size_t(y) * ow + x] = s;
        }
      for (int y = 0; y < oh; ++y)
        for (int x = 0; x < ow; ++x) {
          int lo = 0;
          const auto w = weights(img.height, oh, box.y, box.h, y, lo);
          float s = 0;
          for (size_t k = 0; k < w.size(); ++k) s += w[k] * tmp[size_t(lo + int(k)) * ow + x];
          out.pixels.push_back(std::clamp(s, 0.0f, 1.0f));
        }
    }
    return out;
  };
  std::mt19937 gen(9);
  for (const auto& [h, w, oh, ow] : {std::array{17, 23, 7, 9}, std::array{9, 5, 20, 30}, std::array{12, 12, 5, 12},
                                     std::array{375, 500, 224, 224}, std::array{1, 40, 3, 3}}) {
    Image img;
    img.channels = 3;
    img.height = h;
    img.width = w;
    for (int k = 0; k < 3 * h * w; ++k) img.pixels.push_back(float(gen() % 256) / 255.0f);
    const CropBox whole{0, 0, double(w), double(h)};
    EXPECT_TRUE(resize_bilinear(img, oh, ow).pixels == naive(img, whole, oh, ow).pixels) << h << "x" << w;
    Rng r(uint64_t(h * w));
    for (int t = 0; t < 4; ++t) {
      const CropBox b = crop_box(draw_crop(r), 0.08f, w, h);
      EXPECT_TRUE(resize_box(img, b, oh, ow).pixels == naive(img, b, oh, ow).pixels) << h << "x" << w << " crop " << t;
    }
  }
  Image two;
  two.channels = 1;
  two.height = 20;
  two.width = 40;
  for (int y = 0; y < 20; ++y)
    for (int x = 0; x < 40; ++x) two.pixels.push_back(x < 20 ? 0.0f : 1.0f);
  for (float v : resize_box(two, {2, 3, 15, 10}, 6, 8).pixels) ASSERT_EQ(v, 0.0f);
  for (float v : resize_box(two, {23.5, 1, 14, 17.5}, 9, 4).pixels) ASSERT_NEAR(v, 1.0f, 1e-6f);
  EXPECT_NE(error_of([&] { resize_box(two, {30, 0, 11, 5}, 4, 4); }).find("outside the image"), std::string::npos);

  Rng rng(5);
  for (const auto& [W, H] : {std::pair{500, 375}, std::pair{50, 400}, std::pair{8, 8}})
    for (int t = 0; t < 2000; ++t) {
      Rng copy = rng;
      const CropDraw d = draw_crop(rng);
      for (const CropDraw::Try& u : d.tries) {  // 40 uniforms, each try's in order
        EXPECT_EQ(u.area, copy.uniform());
        EXPECT_EQ(u.ratio, copy.uniform());
        EXPECT_EQ(u.y, copy.uniform());
        EXPECT_EQ(u.x, copy.uniform());
      }
      ASSERT_EQ(rng.state(), copy.state());
      const CropBox b = crop_box(d, 0.08f, W, H);
      ASSERT_TRUE(b.w > 0 && b.h > 0 && b.x >= 0 && b.y >= 0 && b.x + b.w <= W && b.y + b.h <= H);
      ASSERT_TRUE(b.x == std::floor(b.x) && b.y == std::floor(b.y) && b.w == std::floor(b.w) && b.h == std::floor(b.h));
    }
  // A try that does not fit is passed over; the first that fits is taken, its sides the
  // roundings (half to even) of sqrt(area * ratio) and sqrt(area / ratio), its place the
  // share of the room left, in whole pixels.
  CropDraw d;
  d.tries[0] = {1.0f, 1.0f, 0.f, 0.f};      // the whole area at ratio 4/3: 23 x 17, taller than 40x10
  d.tries[1] = {0.0f, 0.5f, 0.5f, 0.999f};  // a quarter of 40x10 at ratio 1: 10x10, placed at (30, 0)
  const CropBox sq = crop_box(d, 0.25f, 40, 10);
  EXPECT_EQ(sq.w, 10.0);
  EXPECT_EQ(sq.h, 10.0);
  EXPECT_EQ(sq.x, 30.0);
  EXPECT_EQ(sq.y, 0.0);
  // No try fits (every one the whole area at ratio 4/3 in a tall 10x40): the central crop
  // at ratio 3/4, 10 x round(13.33) = 13 rows from row (40 - 13) / 2 = 13.
  CropDraw none;
  for (CropDraw::Try& u : none.tries) u = {0.99999f, 0.99999f, 0.5f, 0.5f};
  const CropBox fb = crop_box(none, 0.9f, 10, 40);
  EXPECT_EQ(fb.w, 10.0);
  EXPECT_EQ(fb.h, 13.0);
  EXPECT_EQ(fb.x, 0.0);
  EXPECT_EQ(fb.y, 13.0);

  Bytes m = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12};  // 2 channels of 2 rows of 3
  flip_image(m.data(), 2, 2, 3);
  EXPECT_EQ(m, (Bytes{3, 2, 1, 6, 5, 4, 9, 8, 7, 12, 11, 10}));
  std::vector<float> f = {1, 2, 3, 4};
  flip_image(f.data(), 1, 1, 4);
  EXPECT_EQ(f, (std::vector<float>{4, 3, 2, 1}));
}

TEST(ImageFile, PgmAsciiBinaryAnd16Bit) {
  TempDir dir("pgm");
  write_text(dir.file("a.pgm"), "P2\n# a comment\n3 2\n# another\n10\n0 5 10\n 2 4\n6\n");
  Image a = read_image(dir.file("a.pgm"));
  EXPECT_EQ(a.channels, 1);
  EXPECT_EQ(a.height, 2);
  EXPECT_EQ(a.width, 3);
  const std::vector<float> want = {0, 0.5f, 1, 0.2f, 0.4f, 0.6f};
  for (size_t i = 0; i < want.size(); ++i) EXPECT_FLOAT_EQ(a.pixels[i], want[i]);

  std::string p5 = "P5 2 2 255\n";
  p5 += std::string("\x00\x80\xff\x40", 4);
  write_text(dir.file("b.pgm"), p5);
  Image b = read_image(dir.file("b.pgm"));
  EXPECT_FLOAT_EQ(b.at(0, 0, 1), 128 / 255.0f);
  EXPECT_FLOAT_EQ(b.at(0, 1, 0), 1.0f);

  std::string p16 = "P5\n1 2\n65535\n";
  p16 += std::string("\x80\x00\xff\xff", 4);
  write_text(dir.file("c.pgm"), p16);
  Image c = read_image(dir.file("c.pgm"));
  EXPECT_FLOAT_EQ(c.at(0, 0, 0), 32768 / 65535.0f);
  EXPECT_FLOAT_EQ(c.at(0, 1, 0), 1.0f);

  // PPM (P3) is colour, planar after reading.
  write_text(dir.file("d.ppm"), "P3 2 1 255  255 0 0   0 0 255");
  Image d = read_image(dir.file("d.ppm"));
  EXPECT_EQ(d.channels, 3);
  EXPECT_EQ(d.at(0, 0, 0), 1.0f);
  EXPECT_EQ(d.at(2, 0, 0), 0.0f);
  EXPECT_EQ(d.at(2, 0, 1), 1.0f);

  struct Bad {
    std::string name, text, want;
  };
  const std::vector<Bad> bad = {
      {"trunc_ascii.pgm", "P2 3 2 10 0 1 2 3", "truncated: 4 of 6 samples"},
      {"trunc_bin.pgm", "P5 3 2 255\nab", "truncated: 2 of 6 samples"},
      {"maxval.pgm", "P2 1 1 70000 1", "maxval 70000 is not in 1..65535"},
      {"sample.pgm", "P2 2 1 10 3 11", "sample 11 at index 1 exceeds maxval 10"},
      {"letters.pgm", "P2 2 x 10", "expected a number for its height"},
      {"empty_size.pgm", "P2 0 3 10", "size 0x3 is empty"},
      {"header.pgm", "P5 4", "file ends before its height"},
  };
  for (const auto& x : bad) {
    write_text(dir.file(x.name), x.text);
    const std::string e = error_of([&] { read_image(dir.file(x.name)); });
    EXPECT_NE(e.find(dir.file(x.name) + ": malformed P"), std::string::npos) << e;
    EXPECT_NE(e.find(x.want), std::string::npos) << x.name << ": " << e;
  }
}

// JPEGs decode through libjpeg-turbo with its defaults, as PIL decodes them: every byte
// PIL gives (colour with 4:2:0 chroma at odd sizes, progressive 4:4:4, grey, a scene),
// so a model trained on PyTorch's decoding sees the same pixels here. A CMYK file, which
// libjpeg does not convert, goes to stb_image; a file cut short, or JPEG's signature
// before anything else, is an error naming the file.
TEST(ImageFile, AJpegDecodesToPilsBytes) {
  TempDir dir("jpeg");
  const auto r = test::run_command("/usr/bin/python3 " + test::source_dir() +
                                   "/tests/reference/jpeg_reference.py --out " + dir.file("ref") + " 2>&1");
  ASSERT_EQ(r.exit_code, 0) << "PIL (python3-pil) writes the reference JPEGs:\n" << r.output;
  const auto manifest = nlohmann::json::parse(read_file(dir.file("ref/manifest.json")));
  ASSERT_EQ(manifest.size(), 6u);
  for (const auto& m : manifest) {
    const std::string name = m["name"], path = dir.file("ref/" + name + ".jpg");
    SCOPED_TRACE(name);
    const Image img = read_image(path);
    ASSERT_EQ(img.width, m["width"].get<int>());
    ASSERT_EQ(img.height, m["height"].get<int>());
    if (m["mode"] == "CMYK") {  // stb_image's conversion: colour, of the right size
      EXPECT_EQ(img.channels, 3);
      continue;
    }
    ASSERT_EQ(img.channels, m["mode"] == "L" ? 1 : 3);
    const std::string want = read_file(dir.file("ref/" + name + ".raw"));
    ASSERT_EQ(want.size(), img.pixels.size());
    const size_t hw = size_t(img.width) * img.height;
    size_t differ = 0;
    for (size_t p = 0; p < hw; ++p)
      for (int c = 0; c < img.channels; ++c)
        differ += std::lround(img.pixels[size_t(c) * hw + p] * 255.0f) != uint8_t(want[p * img.channels + c]);
    EXPECT_EQ(differ, 0u) << "of " << want.size();
  }
  const std::string whole = read_file(dir.file("ref/c444_progressive.jpg"));
  write_text(dir.file("cut.jpg"), whole.substr(0, whole.size() / 2));
  const std::string cut = error_of([&] { read_image(dir.file("cut.jpg")); });
  EXPECT_NE(cut.find("cut.jpg: truncated JPEG"), std::string::npos) << cut;
  write_text(dir.file("junk.jpg"), std::string("\xFF\xD8\xFF", 3) + std::string(40, 'x'));
  const std::string junk = error_of([&] { read_image(dir.file("junk.jpg")); });
  EXPECT_NE(junk.find("junk.jpg: cannot decode JPEG (libjpeg: "), std::string::npos) << junk;
}

TEST(ImageFile, PngReadConvertAndResize) {
  TempDir dir("png");
  // A 3x2 RGB PNG written by the plot library (stb_image_write).
  plot::Canvas cv(3, 2, plot::kBlack);
  cv.set(0, 0, {255, 0, 0});
  cv.set(1, 0, {0, 255, 0});
  cv.set(2, 0, {0, 0, 255});
  cv.set(0, 1, {255, 255, 255});
  cv.set(1, 1, {100, 150, 200});
  cv.write_png(dir.file("x.png"));
  Image img = read_image(dir.file("x.png"));
  ASSERT_EQ(img.channels, 3);
  ASSERT_EQ(img.height, 2);
  ASSERT_EQ(img.width, 3);
  EXPECT_EQ(img.at(0, 0, 0), 1.0f);
  EXPECT_EQ(img.at(1, 0, 0), 0.0f);
  EXPECT_EQ(img.at(1, 0, 1), 1.0f);
  EXPECT_EQ(img.at(2, 0, 2), 1.0f);
  EXPECT_FLOAT_EQ(img.at(1, 1, 1), 150 / 255.0f);
  // To gray: luma weights.
  Image g = load_image(dir.file("x.png"), 1, 2, 3);
  ASSERT_EQ(g.channels, 1);
  EXPECT_NEAR(g.at(0, 0, 0), 0.299f, 1e-6);
  EXPECT_NEAR(g.at(0, 0, 1), 0.587f, 1e-6);
  EXPECT_NEAR(g.at(0, 1, 0), 1.0f, 1e-6);
  EXPECT_NEAR(g.at(0, 1, 1), (0.299f * 100 + 0.587f * 150 + 0.114f * 200) / 255, 1e-6);
  // Gray back to RGB replicates.
  Image rgb = convert_channels(g, 3);
  EXPECT_EQ(rgb.at(2, 1, 1), g.at(0, 1, 1));
  // Resized: the output shape is the one asked for, values in [0, 1].
  Image big = load_image(dir.file("x.png"), 3, 8, 12);
  EXPECT_EQ(big.height, 8);
  EXPECT_EQ(big.width, 12);
  for (float v : big.pixels) ASSERT_TRUE(v >= 0 && v <= 1);
  // Bad inputs name the file.
  write_text(dir.file("junk.png"), "definitely not an image");
  std::string e = error_of([&] { read_image(dir.file("junk.png")); });
  EXPECT_NE(e.find(dir.file("junk.png") + ": not a readable image"), std::string::npos) << e;
  std::string png = gmlp::read_file(dir.file("x.png"));
  write_text(dir.file("cut.png"), png.substr(0, png.size() / 2));
  e = error_of([&] { read_image(dir.file("cut.png")); });
  EXPECT_NE(e.find(dir.file("cut.png") + ": "), std::string::npos) << e;
  write_text(dir.file("empty.png"), "");
  EXPECT_NE(error_of([&] { read_image(dir.file("empty.png")); }).find("empty file"), std::string::npos);
  EXPECT_NE(error_of([&] { read_image(dir.file("none.png")); }).find(dir.file("none.png") + ": cannot open"),
            std::string::npos);
  EXPECT_NE(error_of([&] { load_image(dir.file("x.png"), 2, 4, 4); }).find("channel count must be 1 or 3"),
            std::string::npos);
}

TEST(ImageFile, BilinearMatchesHalfPixelCentres) {
  // Upsampling [0, 1] to 4 pixels: PyTorch's bilinear (align_corners=False) gives
  // 0, 0.25, 0.75, 1.
  Image row{1, 1, 2, {0.0f, 1.0f}};
  Image up = resize_bilinear(row, 1, 4);
  const std::vector<float> want = {0, 0.25f, 0.75f, 1};
  for (int i = 0; i < 4; ++i) EXPECT_NEAR(up.pixels[i], want[i], 1e-6) << i;
  // A constant image stays constant at any size.
  Image flat{1, 3, 5, std::vector<float>(15, 0.3f)};
  for (auto [h, w] : {std::pair{7, 2}, std::pair{1, 1}, std::pair{30, 40}})
    for (float v : resize_bilinear(flat, h, w).pixels) ASSERT_NEAR(v, 0.3f, 1e-6);
  // Shrinking a 1-pixel checkerboard by 4 averages it (antialiased), not aliasing to 0 or 1.
  Image checker{1, 16, 16, {}};
  for (int y = 0; y < 16; ++y)
    for (int x = 0; x < 16; ++x) checker.pixels.push_back(float((x + y) % 2));
  Image small = resize_bilinear(checker, 4, 4);
  for (float v : small.pixels) EXPECT_NEAR(v, 0.5f, 0.05f);
  // Shrinking by 2 along x: the mean of each pair region (here a ramp stays a ramp).
  Image ramp{1, 1, 4, {0.0f, 0.0f, 1.0f, 1.0f}};
  Image half = resize_bilinear(ramp, 1, 2);
  EXPECT_LT(half.pixels[0], 0.25f);
  EXPECT_GT(half.pixels[1], 0.75f);
  EXPECT_NEAR(half.pixels[0] + half.pixels[1], 1.0f, 1e-6);
}

}  // namespace
}  // namespace gmlp
