// RandAugment and AutoAugment (train.auto_augment): each operation against Pillow, the
// policies' parsing against timm's config strings, and their draws' distribution.
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <vector>

#include "gmlp/augment.h"
#include "gmlp/error.h"
#include "gmlp/files.h"
#include "test_util.h"

namespace gmlp {
namespace {

using test::error_of;
using test::TempDir;
using Bytes = std::vector<uint8_t>;

struct TestImage {
  std::string name;
  int c, h, w;
  Bytes bytes;  // [C, H, W]
};

// Images that reach each operation's branches: random bytes; a smooth, low-contrast
// photo-like one (autocontrast and equalize stretch it); a gray square (rotations by 90
// degrees are transpositions); one smaller than the smoothing kernel; a constant one
// (nothing to stretch); and one whose histogram sends equalize's table past 255.
std::vector<TestImage> test_images() {
  std::mt19937 gen(7);
  std::vector<TestImage> out;
  auto add = [&](std::string name, int c, int h, int w, auto value) {
    TestImage t{std::move(name), c, h, w, Bytes(size_t(c) * h * w)};
    for (int ch = 0; ch < c; ++ch)
      for (int y = 0; y < h; ++y)
        for (int x = 0; x < w; ++x) t.bytes[(size_t(ch) * h + y) * w + x] = uint8_t(value(ch, y, x));
    out.push_back(std::move(t));
  };
  add("random rgb", 3, 13, 17, [&](int, int, int) { return gen() % 256; });
  add("smooth rgb", 3, 24, 20, [&](int c, int y, int x) { return 40 + 5 * x + 3 * y + 7 * c + int(gen() % 9); });
  add("gray square", 1, 15, 15, [&](int, int y, int x) { return (x * 17 + y * 5 + int(gen() % 30)) % 256; });
  add("tiny rgb", 3, 2, 2, [&](int, int, int) { return gen() % 256; });
  add("constant rgb", 3, 6, 5, [](int c, int, int) { return 90 + c; });
  // 256 pixels: 255 of byte 0 and one of 200, then a spread: the last used byte's share
  // small, its table's top entries above 255.
  add("skewed gray", 1, 16, 16, [](int, int y, int x) { return y * 16 + x < 200 ? 0 : (y * 16 + x) - 199 + 100; });
  return out;
}

std::vector<AugOp> test_ops() {
  std::vector<AugOp> ops;
  for (AugKind k : {AugKind::auto_contrast, AugKind::equalize, AugKind::invert}) ops.push_back({k, 0, false});
  for (double bits : {0, 1, 3, 4, 6, 8}) ops.push_back({AugKind::posterize, bits, false});
  for (double t : {0, 26, 77, 128, 230, 256}) ops.push_back({AugKind::solarize, t, false});
  for (double a : {0, 33, 99, 110}) ops.push_back({AugKind::solarize_add, a, false});
  for (AugKind k : {AugKind::color, AugKind::contrast, AugKind::brightness, AugKind::sharpness})
    for (double f : {0.0, 0.1, 0.37, 1.0, 1.63, 1.9}) ops.push_back({k, f, false});
  for (bool bicubic : {false, true}) {
    for (double deg : {0.0, 17.3, -29.1, 27.0, 90.0, -90.0, 180.0, 365.0})
      ops.push_back({AugKind::rotate, deg, bicubic});
    for (AugKind k : {AugKind::shear_x, AugKind::shear_y})
      for (double s : {0.3, -0.17, 0.045}) ops.push_back({k, s, bicubic});
    for (AugKind k : {AugKind::translate_x, AugKind::translate_y})
      for (double s : {0.45, -0.2, 0.03}) ops.push_back({k, s, bicubic});
  }
  return ops;
}

const char* name_of(AugKind k) {
  static const std::map<AugKind, const char*> names = {{AugKind::auto_contrast, "auto_contrast"},
                                                       {AugKind::equalize, "equalize"},
                                                       {AugKind::invert, "invert"},
                                                       {AugKind::rotate, "rotate"},
                                                       {AugKind::posterize, "posterize"},
                                                       {AugKind::solarize, "solarize"},
                                                       {AugKind::solarize_add, "solarize_add"},
                                                       {AugKind::color, "color"},
                                                       {AugKind::contrast, "contrast"},
                                                       {AugKind::brightness, "brightness"},
                                                       {AugKind::sharpness, "sharpness"},
                                                       {AugKind::shear_x, "shear_x"},
                                                       {AugKind::shear_y, "shear_y"},
                                                       {AugKind::translate_x, "translate_x"},
                                                       {AugKind::translate_y, "translate_y"}};
  return names.at(k);
}

// Every operation, at arguments across its range and both resamplings, on each test
// image, gives Pillow's bytes exactly (timm's calls, tests/reference/augment_reference.py,
// with Debian's python3-pil).
TEST(ImageAugment, EachOperationIsPillows) {
  TempDir dir("augment");
  const auto images = test_images();
  const auto ops = test_ops();
  nlohmann::json cases = nlohmann::json::array();
  Bytes all;
  std::vector<size_t> offsets;
  for (const TestImage& t : images) {
    offsets.push_back(all.size());
    all.insert(all.end(), t.bytes.begin(), t.bytes.end());
  }
  struct Case {
    size_t image;
    AugOp op;
    Bytes fill;
  };
  std::vector<Case> list;
  for (size_t i = 0; i < images.size(); ++i)
    for (const AugOp& op : ops) {
      const Bytes fill = images[i].c == 3 ? Bytes{124, 116, 104} : Bytes{128};
      list.push_back({i, op, fill});
      cases.push_back({{"offset", offsets[i]},
                       {"c", images[i].c},
                       {"h", images[i].h},
                       {"w", images[i].w},
                       {"op", name_of(op.kind)},
                       {"arg", op.arg},
                       {"bicubic", op.bicubic},
                       {"fill", fill}});
    }
  std::ofstream(dir.file("cases.json")) << cases.dump();
  std::ofstream(dir.file("images.bin"), std::ios::binary).write(reinterpret_cast<const char*>(all.data()), all.size());
  const auto r =
      test::run_command("/usr/bin/python3 " + test::source_dir() + "/tests/reference/augment_reference.py " +
                        dir.file("cases.json") + " " + dir.file("images.bin") + " " + dir.file("out.bin") + " 2>&1");
  ASSERT_EQ(r.exit_code, 0) << "Pillow (python3-pil) applies the reference operations:\n" << r.output;
  const std::string want = read_file(dir.file("out.bin"));
  size_t at = 0;
  int changed = 0;
  for (const Case& c : list) {
    const TestImage& t = images[c.image];
    Bytes got = t.bytes;
    apply_augment(got.data(), t.c, t.h, t.w, c.op, c.fill.data());
    ASSERT_LE(at + got.size(), want.size());
    int wrong = 0, first = -1;
    for (size_t k = 0; k < got.size(); ++k)
      if (got[k] != uint8_t(want[at + k])) {
        if (first < 0) first = int(k);
        ++wrong;
      }
    EXPECT_EQ(wrong, 0) << t.name << ", " << name_of(c.op.kind) << " " << c.op.arg << (c.op.bicubic ? " bicubic" : "")
                        << ": first at " << first << ", ours " << (first >= 0 ? int(got[size_t(first)]) : 0)
                        << ", Pillow's " << (first >= 0 ? int(uint8_t(want[at + size_t(first)])) : 0);
    changed += got != t.bytes;
    at += got.size();
  }
  EXPECT_EQ(at, want.size());
  EXPECT_GT(changed, int(list.size()) / 2);  // the operations do something
}

// timm's config strings: RandAugment's sections, AutoAugment's policies, and what is not
// one named as the error says.
TEST(ImageAugment, PoliciesAreTimmsConfigStrings) {
  const auto bicubic = AugInterpolation::bicubic;
  EXPECT_TRUE(parse_augment_policy("", bicubic).empty());
  const AugmentPolicy deit = parse_augment_policy("rand-m9-mstd0.5-inc1", bicubic);
  EXPECT_TRUE(deit.rand);
  EXPECT_EQ(deit.layers, 2);
  ASSERT_EQ(deit.entries.size(), 15u);
  EXPECT_EQ(deit.magnitude_std, 0.5);
  EXPECT_EQ(deit.magnitude_max, 10);
  for (const auto& e : deit.entries) {
    EXPECT_EQ(e.magnitude, 9);
    EXPECT_EQ(e.prob, 0.5f);
  }
  const AugmentPolicy wide = parse_augment_policy("rand-n3-m15-mmax20-mstd101", AugInterpolation::random);
  EXPECT_EQ(wide.layers, 3);
  EXPECT_EQ(wide.entries[0].magnitude, 15);
  EXPECT_EQ(wide.magnitude_max, 20);
  EXPECT_TRUE(std::isinf(wide.magnitude_std));  // over 100: uniform, as timm
  EXPECT_EQ(parse_augment_policy("v0-mstd101", bicubic).magnitude_std, 101);  // AutoAugment's: a number
  // timm keeps the first mstd and mmax (hparams.setdefault), the last of the others.
  const AugmentPolicy twice = parse_augment_policy("rand-mstd0.5-mstd1-mmax12-mmax15-m3-m5-p0.25", bicubic);
  EXPECT_EQ(twice.magnitude_std, 0.5);
  EXPECT_EQ(twice.magnitude_max, 12);
  EXPECT_EQ(twice.entries[0].magnitude, 5);
  EXPECT_EQ(twice.entries[0].prob, 0.25);
  // Current timm's caps: SolarizeAdd adds at most 128, whatever the magnitude.
  const AugmentPolicy strong = parse_augment_policy("rand-m30-mmax30-p1", bicubic);
  Rng rng(1);
  int adds = 0;
  for (int i = 0; i < 2000; ++i) {
    const AugmentDraw d = draw_augment(strong, rng);
    ASSERT_EQ(d.count, 2);  // p 1: every operation chosen is applied
    for (int k = 0; k < d.count; ++k)
      if (d.ops[k].kind == AugKind::solarize_add) {
        EXPECT_EQ(d.ops[k].arg, 128);
        ++adds;
      }
  }
  EXPECT_GT(adds, 100);
  for (const char* name : {"original", "originalr", "v0", "v0r", "v0-mstd0.5"}) {
    const AugmentPolicy p = parse_augment_policy(name, bicubic);
    EXPECT_FALSE(p.rand) << name;
    EXPECT_EQ(p.entries.size(), 50u) << name;
  }
  for (const auto& [spec, says] : std::vector<std::pair<std::string, std::string>>{
           {"rand-x9", "unknown section 'x9'"},
           {"rand-m", "section 'm' needs a whole number"},
           {"rand-m9.5", "section 'm9.5' needs a whole number"},
           {"rand-n17", "'n' (operations an image) must be in [0, 16]"},
           {"rand-m99999999999", "section 'm99999999999' is out of range (at most 1000)"},
           {"rand-mstd-1", "section 'mstd' needs a number after its key"},
           {"rand-w0", "timm's experimental weighted choice of operations ('w') is not implemented"},
           {"augmix-m3", "AugMix is not implemented"},
           {"3a", "timm's \"3a\" policy is not implemented"},
           {"rand-m9-tweights", "timm's other sets of operations ('tweights') are not implemented"},
           {"rand-p1.5", "'p' (each operation's probability) must be in [0, 1]"},
           {"autoaugment", "no policy named \"autoaugment\""},
           {"v0-m9", "unknown section 'm9'"}}) {
    const std::string e = error_of([&] { parse_augment_policy(spec, bicubic); });
    EXPECT_NE(e.find("config: 'auto_augment' \"" + spec + "\": " + says), std::string::npos) << e;
  }
  EXPECT_NE(error_of([] {
              parse_augment_interpolation("nearest");
            }).find("'auto_augment_interpolation' must be \"bicubic\", \"bilinear\" or \"random\""),
            std::string::npos);
}

// The draws' distribution, from timm's definitions: RandAugment takes `layers` of its 15
// operations uniformly, each applied with probability 1/2, its magnitude normal about m
// with sd mstd and clipped to [0, 10], its sign either way at even odds; the arguments
// are its level functions'. AutoAugment's "v0" applies an operation as often as its
// sub-policies' probabilities say: Invert in one at 0.4 of 25, Posterize in two at 0.4
// and 0.8, TranslateYRel in one at 0.8.
TEST(ImageAugment, DrawsAreDistributedAsTimms) {
  constexpr int n = 200000;
  Rng rng(3);
  {
    const AugmentPolicy p = parse_augment_policy("rand-m9-mstd0.5", AugInterpolation::bicubic);
    std::map<AugKind, int> kinds;
    int ops = 0, negative_rotations = 0, bicubic = 0;
    double enhance_sum = 0, enhance_sq = 0;
    int enhances = 0;
    for (int i = 0; i < n; ++i) {
      const AugmentDraw d = draw_augment(p, rng);
      ops += d.count;
      for (int k = 0; k < d.count; ++k) {
        const AugOp& op = d.ops[k];
        ++kinds[op.kind];
        bicubic += op.bicubic;
        if (op.kind == AugKind::rotate) {
          negative_rotations += op.arg < 0;
          EXPECT_LE(std::fabs(op.arg), 30.0);
        }
        if (op.kind == AugKind::brightness) {  // m/10 * 1.8 + 0.1: the magnitude drawn
          const double m = (op.arg - 0.1) / 1.8 * 10;
          enhance_sum += m;
          enhance_sq += m * m;
          ++enhances;
          EXPECT_LE(m, 10 + 1e-9);
        }
        if (op.kind == AugKind::posterize) {  // int(m/10 * 4)
          EXPECT_TRUE(op.arg == std::floor(op.arg) && op.arg >= 0 && op.arg <= 4) << op.arg;
        }
      }
    }
    EXPECT_NEAR(double(ops) / n, 1.0, 4.5 * std::sqrt(0.5 / n));  // Binomial(2, 1/2)
    EXPECT_EQ(kinds.size(), 15u);
    for (const auto& [kind, count] : kinds)
      EXPECT_NEAR(double(count) / ops, 1.0 / 15, 4.5 * std::sqrt((1.0 / 15) * (14.0 / 15) / ops)) << int(kind);
    EXPECT_NEAR(double(negative_rotations) / kinds[AugKind::rotate], 0.5,
                4.5 * std::sqrt(0.25 / kinds[AugKind::rotate]));
    EXPECT_EQ(bicubic, ops);
    // E[min(N(9, 0.5), 10)] = 9 - 0.5 (phi(2) - 2 (1 - Phi(2))) = 8.99576.
    const double mean = enhance_sum / enhances, sd = std::sqrt(enhance_sq / enhances - mean * mean);
    EXPECT_NEAR(mean, 8.99576, 4.5 * 0.5 / std::sqrt(enhances));
    EXPECT_NEAR(sd, 0.49, 0.02);
  }
  {
    const AugmentPolicy p = parse_augment_policy("v0", AugInterpolation::random);
    std::map<AugKind, int> kinds;
    int geometric = 0, bicubic = 0;
    for (int i = 0; i < n; ++i) {
      const AugmentDraw d = draw_augment(p, rng);
      for (int k = 0; k < d.count; ++k) {
        ++kinds[d.ops[k].kind];
        const AugKind g = d.ops[k].kind;
        if (g == AugKind::rotate || g == AugKind::shear_x || g == AugKind::shear_y || g == AugKind::translate_y) {
          ++geometric;
          bicubic += d.ops[k].bicubic;
        }
        if (g == AugKind::translate_y) {
          EXPECT_NEAR(std::fabs(d.ops[k].arg), 0.9 * 0.45, 1e-12);
        }
      }
    }
    for (const auto& [kind, rate] : {std::pair{AugKind::invert, 0.4 / 25}, std::pair{AugKind::posterize, 1.2 / 25},
                                     std::pair{AugKind::translate_y, 0.8 / 25}})
      EXPECT_NEAR(double(kinds[kind]) / n, rate, 4.5 * std::sqrt(rate / n)) << int(kind);
    EXPECT_EQ(kinds.count(AugKind::brightness), 0u);                                   // in no sub-policy of v0
    EXPECT_NEAR(double(bicubic) / geometric, 0.5, 4.5 * std::sqrt(0.25 / geometric));  // "random"
  }
}

// The bicubic map's vectorised form (AVX2) gives the plain per-pixel form's bytes, which
// EachOperationIsPillows holds to Pillow's: rotations, shears, shifts, scalings and a
// general map, on gray and RGB images of odd sizes (borders, clipped taps, points
// outside the image among the pixels).
TEST(ImageAugment, TheVectorisedBicubicMapIsThePlainOne) {
#if defined(__x86_64__)
  if (!__builtin_cpu_supports("avx2")) GTEST_SKIP() << "no AVX2 on this CPU: the plain form is the one used";
#else
  GTEST_SKIP() << "the vectorised form is x86-64's";
#endif
  std::mt19937 gen(3);
  std::uniform_real_distribution<double> u(-1, 1);
  int compared = 0;
  for (const auto& [c, h, w] :
       {std::tuple{1, 3, 5}, std::tuple{3, 7, 4}, std::tuple{1, 33, 29}, std::tuple{3, 40, 56}}) {
    Bytes img(size_t(c) * h * w);
    for (auto& v : img) v = uint8_t(gen());
    const uint8_t fill[3] = {124, 116, 104};
    for (int t = 0; t < 40; ++t) {
      const double a = u(gen) * 0.6, ca = std::cos(a), sa = std::sin(a);
      double m[6] = {ca, sa, u(gen) * w, -sa, ca, u(gen) * h};            // a rotation and a shift
      if (t % 4 == 1) m[0] = 1, m[1] = u(gen) * 0.3, m[3] = 0, m[4] = 1;  // a shear
      if (t % 4 == 2) m[0] = 0.5 + std::fabs(u(gen)), m[1] = 0, m[3] = 0, m[4] = 0.5 + std::fabs(u(gen));
      if (t % 4 == 3) m[1] = u(gen), m[3] = u(gen);
      Bytes fast = img, plain = img;
      affine_transform(fast.data(), c, h, w, m, true, fill);
      affine_transform(plain.data(), c, h, w, m, true, fill, /*reference=*/true);
      ASSERT_EQ(fast, plain) << c << "x" << h << "x" << w << ", map " << t;
      compared += fast != img;
    }
  }
  EXPECT_GT(compared, 150);
}

}  // namespace
}  // namespace gmlp
