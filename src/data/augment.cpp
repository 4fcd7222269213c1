#include "gmlp/augment.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

#include "gmlp/error.h"

// Built without fused multiply-adds (CMakeLists.txt): Pillow's sums, products and blends
// round each step, and so must these to give its bytes.

namespace gmlp {

namespace {

// How timm's level functions make an argument of a magnitude (auto_augment.py's
// LEVEL_TO_ARG), m in [0, magnitude_max], as Python computes them in double.
enum class Level : uint8_t {
  none,
  rotate,          // m/10 * 30 degrees, either sign
  enhance,         // m/10 * 1.8 + 0.1
  enhance_inc,     // max(0.1, 1 ± m/10 * 0.9)
  shear,           // m/10 * 0.3, either sign
  translate,       // m/10 * 0.45 of the side, either sign
  posterize,       // int(m/10 * 4) bits
  posterize_inc,   // 4 - int(m/10 * 4)
  posterize_orig,  // int(m/10 * 4) + 4
  solarize,        // min(256, int(m/10 * 256))
  solarize_inc,    // 256 - that
  solarize_add,    // min(128, int(m/10 * 110))
};
struct OpName {
  const char* name;
  AugKind kind;
  Level level;
};
constexpr OpName kOps[] = {
    {"AutoContrast", AugKind::auto_contrast, Level::none},
    {"Equalize", AugKind::equalize, Level::none},
    {"Invert", AugKind::invert, Level::none},
    {"Rotate", AugKind::rotate, Level::rotate},
    {"Posterize", AugKind::posterize, Level::posterize},
    {"PosterizeIncreasing", AugKind::posterize, Level::posterize_inc},
    {"PosterizeOriginal", AugKind::posterize, Level::posterize_orig},
    {"Solarize", AugKind::solarize, Level::solarize},
    {"SolarizeIncreasing", AugKind::solarize, Level::solarize_inc},
    {"SolarizeAdd", AugKind::solarize_add, Level::solarize_add},
    {"Color", AugKind::color, Level::enhance},
    {"ColorIncreasing", AugKind::color, Level::enhance_inc},
    {"Contrast", AugKind::contrast, Level::enhance},
    {"ContrastIncreasing", AugKind::contrast, Level::enhance_inc},
    {"Brightness", AugKind::brightness, Level::enhance},
    {"BrightnessIncreasing", AugKind::brightness, Level::enhance_inc},
    {"Sharpness", AugKind::sharpness, Level::enhance},
    {"SharpnessIncreasing", AugKind::sharpness, Level::enhance_inc},
    {"ShearX", AugKind::shear_x, Level::shear},
    {"ShearY", AugKind::shear_y, Level::shear},
    {"TranslateXRel", AugKind::translate_x, Level::translate},
    {"TranslateYRel", AugKind::translate_y, Level::translate},
};

uint8_t op_index(const char* name) {
  for (size_t i = 0; i < std::size(kOps); ++i)
    if (std::strcmp(kOps[i].name, name) == 0) return uint8_t(i);
  throw Error(std::string("augment: no operation named ") + name);  // a table below misspelt
}

// RandAugment's operations (timm's _RAND_TRANSFORMS and, with inc1,
// _RAND_INCREASING_TRANSFORMS).
constexpr const char* kRand[] = {"AutoContrast", "Equalize",    "Invert", "Rotate",        "Posterize",
                                 "Solarize",     "SolarizeAdd", "Color",  "Contrast",      "Brightness",
                                 "Sharpness",    "ShearX",      "ShearY", "TranslateXRel", "TranslateYRel"};
constexpr const char* kRandIncreasing[] = {"AutoContrast",
                                           "Equalize",
                                           "Invert",
                                           "Rotate",
                                           "PosterizeIncreasing",
                                           "SolarizeIncreasing",
                                           "SolarizeAdd",
                                           "ColorIncreasing",
                                           "ContrastIncreasing",
                                           "BrightnessIncreasing",
                                           "SharpnessIncreasing",
                                           "ShearX",
                                           "ShearY",
                                           "TranslateXRel",
                                           "TranslateYRel"};

// AutoAugment's ImageNet policies as timm holds them: 25 sub-policies of two (operation,
// probability, magnitude). "original" is the AutoAugment paper's (arXiv:1805.09501);
// "v0" the TPU EfficientNet code's. The "r" forms posterize as Google's research code
// does (PosterizeIncreasing).
struct PolicyOp {
  const char* name;
  double prob;
  int magnitude;
};
constexpr PolicyOp kOriginal[][2] = {
    {{"PosterizeOriginal", 0.4, 8}, {"Rotate", 0.6, 9}},
    {{"Solarize", 0.6, 5}, {"AutoContrast", 0.6, 5}},
    {{"Equalize", 0.8, 8}, {"Equalize", 0.6, 3}},
    {{"PosterizeOriginal", 0.6, 7}, {"PosterizeOriginal", 0.6, 6}},
    {{"Equalize", 0.4, 7}, {"Solarize", 0.2, 4}},
    {{"Equalize", 0.4, 4}, {"Rotate", 0.8, 8}},
    {{"Solarize", 0.6, 3}, {"Equalize", 0.6, 7}},
    {{"PosterizeOriginal", 0.8, 5}, {"Equalize", 1.0, 2}},
    {{"Rotate", 0.2, 3}, {"Solarize", 0.6, 8}},
    {{"Equalize", 0.6, 8}, {"PosterizeOriginal", 0.4, 6}},
    {{"Rotate", 0.8, 8}, {"Color", 0.4, 0}},
    {{"Rotate", 0.4, 9}, {"Equalize", 0.6, 2}},
    {{"Equalize", 0.0, 7}, {"Equalize", 0.8, 8}},
    {{"Invert", 0.6, 4}, {"Equalize", 1.0, 8}},
    {{"Color", 0.6, 4}, {"Contrast", 1.0, 8}},
    {{"Rotate", 0.8, 8}, {"Color", 1.0, 2}},
    {{"Color", 0.8, 8}, {"Solarize", 0.8, 7}},
    {{"Sharpness", 0.4, 7}, {"Invert", 0.6, 8}},
    {{"ShearX", 0.6, 5}, {"Equalize", 1.0, 9}},
    {{"Color", 0.4, 0}, {"Equalize", 0.6, 3}},
    {{"Equalize", 0.4, 7}, {"Solarize", 0.2, 4}},
    {{"Solarize", 0.6, 5}, {"AutoContrast", 0.6, 5}},
    {{"Invert", 0.6, 4}, {"Equalize", 1.0, 8}},
    {{"Color", 0.6, 4}, {"Contrast", 1.0, 8}},
    {{"Equalize", 0.8, 8}, {"Equalize", 0.6, 3}},
};
constexpr PolicyOp kV0[][2] = {
    {{"Equalize", 0.8, 1}, {"ShearY", 0.8, 4}},        {{"Color", 0.4, 9}, {"Equalize", 0.6, 3}},
    {{"Color", 0.4, 1}, {"Rotate", 0.6, 8}},           {{"Solarize", 0.8, 3}, {"Equalize", 0.4, 7}},
    {{"Solarize", 0.4, 2}, {"Solarize", 0.6, 2}},      {{"Color", 0.2, 0}, {"Equalize", 0.8, 8}},
    {{"Equalize", 0.4, 8}, {"SolarizeAdd", 0.8, 3}},   {{"ShearX", 0.2, 9}, {"Rotate", 0.6, 8}},
    {{"Color", 0.6, 1}, {"Equalize", 1.0, 2}},         {{"Invert", 0.4, 9}, {"Rotate", 0.6, 0}},
    {{"Equalize", 1.0, 9}, {"ShearY", 0.6, 3}},        {{"Color", 0.4, 7}, {"Equalize", 0.6, 0}},
    {{"Posterize", 0.4, 6}, {"AutoContrast", 0.4, 7}}, {{"Solarize", 0.6, 8}, {"Color", 0.6, 9}},
    {{"Solarize", 0.2, 4}, {"Rotate", 0.8, 9}},        {{"Rotate", 1.0, 7}, {"TranslateYRel", 0.8, 9}},
    {{"ShearX", 0.0, 0}, {"Solarize", 0.8, 4}},        {{"ShearY", 0.8, 0}, {"Color", 0.6, 4}},
    {{"Color", 1.0, 0}, {"Rotate", 0.6, 2}},           {{"Equalize", 0.8, 4}, {"Equalize", 0.0, 8}},
    {{"Equalize", 1.0, 4}, {"AutoContrast", 0.6, 2}},  {{"ShearY", 0.4, 7}, {"SolarizeAdd", 0.6, 7}},
    {{"Posterize", 0.8, 2}, {"Solarize", 0.6, 10}},    {{"Solarize", 0.6, 8}, {"Equalize", 0.6, 1}},
    {{"Color", 0.8, 6}, {"Rotate", 0.4, 5}},
};

[[noreturn]] void bad_spec(const std::string& spec, const std::string& why) {
  throw Error("config: 'auto_augment' \"" + spec + "\": " + why +
              " (timm's forms: \"rand-m9-mstd0.5-inc1\" for RandAugment with its sections m, n, mstd, mmax and inc; "
              "\"original\", \"originalr\", \"v0\" or \"v0r\" for AutoAugment, optionally with \"-mstd0.5\")");
}

double parse_number(const std::string& spec, const std::string& section, const std::string& text, bool integer) {
  const char* begin = text.c_str();
  char* end = nullptr;
  const double v = integer ? double(std::strtoll(begin, &end, 10)) : std::strtod(begin, &end);
  if (text.empty() || end != begin + text.size() || !std::isfinite(v))
    bad_spec(spec, "section '" + section + "' needs " + (integer ? "a whole number" : "a number") + " after its key");
  if (integer && v > 1000) bad_spec(spec, "section '" + section + "' is out of range (at most 1000)");
  return v;
}

// Python's x % 360.0: the sign of the divisor.
double py_mod(double x, double m) {
  double r = std::fmod(x, m);
  if (r != 0 && (r < 0) != (m < 0)) r += m;
  return r;
}
// Python's round(x, 15): correctly rounded to 15 decimals, as printf rounds.
double round15(double x) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.15f", x);
  return std::strtod(buf, nullptr);
}

uint8_t clip_trunc(float v) { return v <= 0.f ? 0 : v >= 255.f ? 255 : uint8_t(v); }

void apply_lut(uint8_t* plane, size_t n, const uint8_t* lut) {
  for (size_t k = 0; k < n; ++k) plane[k] = lut[plane[k]];
}

// Pillow's RGB -> L: ITU-R 601-2 luma in 16-bit fixed point, rounded.
uint8_t luma(uint8_t r, uint8_t g, uint8_t b) {
  return uint8_t((uint32_t(r) * 19595u + uint32_t(g) * 38470u + uint32_t(b) * 7471u + 0x8000u) >> 16);
}

// Image.blend(degenerate, img, factor), the enhancements' last step: in float, truncated.
void blend_from(uint8_t* img, const uint8_t* degenerate, size_t n, float factor) {
  if (factor == 1.f) return;
  if (factor == 0.f) return void(std::memcpy(img, degenerate, n));
  for (size_t k = 0; k < n; ++k)
    img[k] = clip_trunc(float(int(degenerate[k])) + factor * float(int(img[k]) - int(degenerate[k])));
}

// ImageFilter.SMOOTH (3x3, weights 1 about a centre of 5, over 13), as Pillow's
// ImagingFilter3x3 sums it: in float, row below first, half added for rounding; the
// border rows and columns copied. Images smaller than 3x3 are copied whole.
void smooth(const uint8_t* src, uint8_t* dst, int channels, int H, int W) {
  std::memcpy(dst, src, size_t(channels) * H * W);
  if (H < 3 || W < 3) return;
  const float k1 = 1.f / 13.f, k5 = 5.f / 13.f;
  for (int c = 0; c < channels; ++c) {
    const uint8_t* s = src + size_t(c) * H * W;
    uint8_t* d = dst + size_t(c) * H * W;
    for (int y = 1; y < H - 1; ++y) {
      const uint8_t *up = s + size_t(y - 1) * W, *mid = s + size_t(y) * W, *down = s + size_t(y + 1) * W;
      for (int x = 1; x < W - 1; ++x) {
        float ss = 0.5f;
        ss += float(down[x - 1]) * k1 + float(down[x]) * k1 + float(down[x + 1]) * k1;
        ss += float(mid[x - 1]) * k1 + float(mid[x]) * k5 + float(mid[x + 1]) * k1;
        ss += float(up[x - 1]) * k1 + float(up[x]) * k1 + float(up[x + 1]) * k1;
        d[size_t(y) * W + x] = clip_trunc(ss);
      }
    }
  }
}

// ImageOps.autocontrast (no cutoff): each channel's darkest byte to 0, its lightest to
// 255, int() of the line between.
void auto_contrast(uint8_t* img, int channels, size_t hw) {
  for (int c = 0; c < channels; ++c) {
    uint8_t* p = img + size_t(c) * hw;
    int lo = 255, hi = 0;
    for (size_t k = 0; k < hw; ++k) lo = std::min(lo, int(p[k])), hi = std::max(hi, int(p[k]));
    if (hi <= lo) continue;
    const double scale = 255.0 / (hi - lo), offset = -lo * scale;
    uint8_t lut[256];
    for (int i = 0; i < 256; ++i) lut[i] = uint8_t(std::clamp(int(i * scale + offset), 0, 255));
    apply_lut(p, hw, lut);
  }
}

// ImageOps.equalize: each channel's bytes spread by their cumulative histogram, in steps
// of (the count less the last used byte's) / 255.
void equalize(uint8_t* img, int channels, size_t hw) {
  for (int c = 0; c < channels; ++c) {
    uint8_t* p = img + size_t(c) * hw;
    int64_t h[256] = {};
    for (size_t k = 0; k < hw; ++k) ++h[p[k]];
    int used = 0, last = 0;
    int64_t total = 0;
    for (int i = 0; i < 256; ++i)
      if (h[i]) ++used, last = i, total += h[i];
    if (used <= 1) continue;
    const int64_t step = (total - h[last]) / 255;
    if (step == 0) continue;
    uint8_t lut[256];
    int64_t n = step / 2;
    for (int i = 0; i < 256; ++i) {
      lut[i] = uint8_t(std::min<int64_t>(n / step, 255));
      n += h[i];
    }
    apply_lut(p, hw, lut);
  }
}

// Pillow's cubic: a = -1 in Keys' family, as its BICUBIC macro writes it.
inline double cubic(double v1, double v2, double v3, double v4, double d) {
  const double p1 = v2, p2 = -v1 + v3, p3 = 2 * (v1 - v2) + v3 - v4, p4 = -v1 + v2 - v3 + v4;
  return p1 + d * (p2 + d * (p3 + d * p4));
}
inline uint8_t cubic_byte(double r) { return r <= 0.0 ? 0 : r >= 255.0 ? 255 : uint8_t(r); }

// Where output pixel (x, y) samples the input (Pillow's affine_transform).
struct Sample {
  bool inside;
  int xi, yi;  // the pixel at or left of / above the point, less half a pixel
  double dx, dy;
};
inline Sample sample_of(const double m[6], int x, int y, int H, int W) {
  const double xo = x + 0.5, yo = y + 0.5;
  double xin = m[0] * xo + m[1] * yo + m[2], yin = m[3] * xo + m[4] * yo + m[5];
  if (xin < 0.0 || xin >= W || yin < 0.0 || yin >= H) return {false, 0, 0, 0, 0};
  xin -= 0.5;
  yin -= 0.5;
  const int xi = int(std::floor(xin)), yi = int(std::floor(yin));
  return {true, xi, yi, xin - xi, yin - yi};
}

// One output pixel, every channel, as Pillow's filters compute it: a point outside the
// input is the fill; one inside is interpolated among the pixels about it, columns
// clipped to the image and a row below it repeating the one above (Pillow takes the
// row's value over, the same), truncated to a byte.
inline void one_pixel(const uint8_t* src, uint8_t* img, int channels, int H, int W, const Sample& p, size_t at,
                      bool bicubic, const uint8_t* fill) {
  const size_t hw = size_t(H) * W;
  if (!p.inside) {
    for (int c = 0; c < channels; ++c) img[size_t(c) * hw + at] = fill[c];
    return;
  }
  auto xclip = [W](int x) { return size_t(x < 0 ? 0 : x < W ? x : W - 1); };
  auto row_at = [H, W](int y) { return size_t(y < 0 ? 0 : y < H ? y : H - 1) * W; };
  if (!bicubic) {
    const size_t x0 = xclip(p.xi), x1 = xclip(p.xi + 1);
    const size_t r0 = row_at(p.yi), r1 = p.yi + 1 >= 0 && p.yi + 1 < H ? size_t(p.yi + 1) * W : r0;
    for (int c = 0; c < channels; ++c) {
      const uint8_t *a = src + size_t(c) * hw + r0, *b = src + size_t(c) * hw + r1;
      const double v1 = a[x0] + (a[x1] - a[x0]) * p.dx, v2 = b[x0] + (b[x1] - b[x0]) * p.dx;
      img[size_t(c) * hw + at] = uint8_t(v1 + (v2 - v1) * p.dy);
    }
    return;
  }
  const int bx = p.xi - 1, by = p.yi - 1;
  const size_t xs[4] = {xclip(bx), xclip(bx + 1), xclip(bx + 2), xclip(bx + 3)};
  size_t rows[4];
  rows[0] = row_at(by);
  for (int j = 1; j < 4; ++j) rows[j] = by + j >= 0 && by + j < H ? size_t(by + j) * W : rows[j - 1];
  for (int c = 0; c < channels; ++c) {
    const uint8_t* s = src + size_t(c) * hw;
    double v[4];
    for (int j = 0; j < 4; ++j) {
      const uint8_t* in = s + rows[j];
      v[j] = cubic(in[xs[0]], in[xs[1]], in[xs[2]], in[xs[3]], p.dx);
    }
    img[size_t(c) * hw + at] = cubic_byte(cubic(v[0], v[1], v[2], v[3], p.dy));
  }
}

void affine_plain(const uint8_t* src, uint8_t* img, int channels, int H, int W, const double m[6], bool bicubic,
                  const uint8_t* fill) {
  for (int y = 0; y < H; ++y)
    for (int x = 0; x < W; ++x)
      one_pixel(src, img, channels, H, W, sample_of(m, x, y, H, W), size_t(y) * W + x, bicubic, fill);
}

#if defined(__x86_64__)
// The cubic of four vectors of taps lane by lane: cubic()'s operations in its order, so
// each lane its doubles.
__attribute__((target("avx2"))) inline __m256d cubic4(__m256d v1, __m256d v2, __m256d v3, __m256d v4, __m256d d) {
  const __m256d neg1 = _mm256_xor_pd(v1, _mm256_set1_pd(-0.0));  // -v1, exactly
  const __m256d p2 = _mm256_add_pd(neg1, v3);
  const __m256d p3 = _mm256_sub_pd(_mm256_add_pd(_mm256_mul_pd(_mm256_set1_pd(2.0), _mm256_sub_pd(v1, v2)), v3), v4);
  const __m256d p4 = _mm256_add_pd(_mm256_sub_pd(_mm256_add_pd(neg1, v2), v3), v4);
  return _mm256_add_pd(v2,
                       _mm256_mul_pd(d, _mm256_add_pd(p2, _mm256_mul_pd(d, _mm256_add_pd(p3, _mm256_mul_pd(d, p4))))));
}

// A pixel's cubic across its four rows, the rows in the lanes: each row's four taps one
// 32-bit load, the 4x4 bytes transposed by one shuffle into the taps' columns.
__attribute__((target("avx2"))) inline __m256d across4(const uint8_t* s, int W, __m256d dx) {
  // Byte k of row j (loads j at bytes 4j..4j+3) to place 4k + j: column k's four rows.
  const __m128i transpose = _mm_setr_epi8(0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15);
  int32_t w[4];
  for (int j = 0; j < 4; ++j) std::memcpy(&w[j], s + size_t(j) * W, 4);
  const __m128i cols = _mm_shuffle_epi8(_mm_setr_epi32(w[0], w[1], w[2], w[3]), transpose);
  return cubic4(_mm256_cvtepi32_pd(_mm_cvtepu8_epi32(cols)),
                _mm256_cvtepi32_pd(_mm_cvtepu8_epi32(_mm_srli_si128(cols, 4))),
                _mm256_cvtepi32_pd(_mm_cvtepu8_epi32(_mm_srli_si128(cols, 8))),
                _mm256_cvtepi32_pd(_mm_cvtepu8_epi32(_mm_srli_si128(cols, 12))), dx);
}

// The bicubic map four output pixels at a time where all four take their 4x4 taps inside
// the image: each pixel's cubic across its rows (across4), the four pixels' results
// transposed so that the cubic down the rows runs for the four pixels in one vector, then
// clamped and truncated as cubic_byte does, lane by lane the plain form's doubles. Other
// pixels (clipped taps, repeated rows, points outside) go by one_pixel. About 3 times
// one_pixel's speed on a 224x224 image here.
__attribute__((target("avx2"))) void affine_bicubic_avx2(const uint8_t* src, uint8_t* img, int channels, int H, int W,
                                                         const double m[6], const uint8_t* fill) {
  const size_t hw = size_t(H) * W;
  auto interior = [H, W](const Sample& p) {
    return p.inside && p.xi - 1 >= 0 && p.xi + 2 < W && p.yi - 1 >= 0 && p.yi + 2 < H;
  };
  for (int y = 0; y < H; ++y) {
    int x = 0;
    for (; x + 4 <= W; x += 4) {
      const Sample p[4] = {sample_of(m, x, y, H, W), sample_of(m, x + 1, y, H, W), sample_of(m, x + 2, y, H, W),
                           sample_of(m, x + 3, y, H, W)};
      const size_t at = size_t(y) * W + x;
      if (!(interior(p[0]) && interior(p[1]) && interior(p[2]) && interior(p[3]))) {
        for (int k = 0; k < 4; ++k) one_pixel(src, img, channels, H, W, p[k], at + k, true, fill);
        continue;
      }
      const __m256d dy = _mm256_setr_pd(p[0].dy, p[1].dy, p[2].dy, p[3].dy);
      for (int c = 0; c < channels; ++c) {
        const uint8_t* s = src + size_t(c) * hw;
        __m256d h[4];  // pixel k's four rows
        for (int k = 0; k < 4; ++k)
          h[k] = across4(s + size_t(p[k].yi - 1) * W + (p[k].xi - 1), W, _mm256_set1_pd(p[k].dx));
        // Transposed: row j of the four pixels.
        const __m256d t0 = _mm256_unpacklo_pd(h[0], h[1]), t1 = _mm256_unpackhi_pd(h[0], h[1]);
        const __m256d t2 = _mm256_unpacklo_pd(h[2], h[3]), t3 = _mm256_unpackhi_pd(h[2], h[3]);
        const __m256d r0 = _mm256_permute2f128_pd(t0, t2, 0x20), r1 = _mm256_permute2f128_pd(t1, t3, 0x20);
        const __m256d r2 = _mm256_permute2f128_pd(t0, t2, 0x31), r3 = _mm256_permute2f128_pd(t1, t3, 0x31);
        __m256d r = cubic4(r0, r1, r2, r3, dy);
        r = _mm256_min_pd(_mm256_max_pd(r, _mm256_setzero_pd()), _mm256_set1_pd(255.0));
        const __m128i words = _mm256_cvttpd_epi32(r);  // 0..255: the packs below are exact
        const int32_t bytes = _mm_cvtsi128_si32(_mm_packus_epi16(_mm_packus_epi32(words, words), words));
        std::memcpy(img + size_t(c) * hw + at, &bytes, 4);
      }
    }
    for (; x < W; ++x) one_pixel(src, img, channels, H, W, sample_of(m, x, y, H, W), size_t(y) * W + x, true, fill);
  }
}

bool have_avx2() {
  static const bool yes = __builtin_cpu_supports("avx2");
  return yes;
}
#endif

// Image.rotate(degrees, resample, fillcolor): 0 a copy, 180 (and 90 and 270 of a
// square) a transposition, any other the affine map about the centre whose matrix
// Pillow rounds to 15 decimals.
void rotate(uint8_t* img, int channels, int H, int W, double degrees, bool bicubic, const uint8_t* fill) {
  const double angle = py_mod(degrees, 360.0);
  if (angle == 0) return;
  const size_t hw = size_t(H) * W;
  if (angle == 180 || ((angle == 90 || angle == 270) && H == W)) {
    std::vector<uint8_t> src(img, img + size_t(channels) * hw);
    for (int c = 0; c < channels; ++c)
      for (int y = 0; y < H; ++y)
        for (int x = 0; x < W; ++x) {
          const int sx = angle == 180 ? W - 1 - x : angle == 90 ? W - 1 - y : y;
          const int sy = angle == 180 ? H - 1 - y : angle == 90 ? x : H - 1 - x;
          img[size_t(c) * hw + size_t(y) * W + x] = src[size_t(c) * hw + size_t(sy) * W + sx];
        }
    return;
  }
  const double a = -(angle * (3.141592653589793 / 180.0));
  double m[6] = {round15(std::cos(a)), round15(std::sin(a)), 0.0, round15(-std::sin(a)), round15(std::cos(a)), 0.0};
  const double cx = W / 2.0, cy = H / 2.0;
  m[2] = m[0] * -cx + m[1] * -cy + m[2];
  m[5] = m[3] * -cx + m[4] * -cy + m[5];
  m[2] += cx;
  m[5] += cy;
  affine_transform(img, channels, H, W, m, bicubic, fill);
}

bool geometric(AugKind k) {
  return k == AugKind::rotate || k == AugKind::shear_x || k == AugKind::shear_y || k == AugKind::translate_x ||
         k == AugKind::translate_y;
}

}  // namespace

void affine_transform(uint8_t* img, int channels, int height, int width, const double m[6], bool bicubic,
                      const uint8_t* fill, bool reference) {
  const std::vector<uint8_t> src(img, img + size_t(channels) * height * width);
#if defined(__x86_64__)
  if (bicubic && !reference && have_avx2())
    return affine_bicubic_avx2(src.data(), img, channels, height, width, m, fill);
#endif
  affine_plain(src.data(), img, channels, height, width, m, bicubic, fill);
}

void apply_augment(uint8_t* img, int channels, int height, int width, const AugOp& op, const uint8_t* fill) {
  require(channels == 1 || channels == 3, "augment: images of 1 or 3 channels, got " + std::to_string(channels));
  const int H = height, W = width;
  const size_t hw = size_t(H) * W, n = size_t(channels) * hw;
  uint8_t lut[256];
  auto point = [&](auto f) {
    for (int i = 0; i < 256; ++i) lut[i] = uint8_t(f(i));
    apply_lut(img, n, lut);
  };
  switch (op.kind) {
    case AugKind::auto_contrast:
      return auto_contrast(img, channels, hw);
    case AugKind::equalize:
      return equalize(img, channels, hw);
    case AugKind::invert:
      return point([](int i) { return 255 - i; });
    case AugKind::posterize: {
      const int bits = int(op.arg);
      if (bits >= 8) return;
      const int mask = ~((1 << (8 - std::max(bits, 0))) - 1);
      return point([mask](int i) { return i & mask; });
    }
    case AugKind::solarize: {
      const int t = int(op.arg);
      return point([t](int i) { return i < t ? i : 255 - i; });
    }
    case AugKind::solarize_add: {
      const int add = int(op.arg);
      return point([add](int i) { return i < 128 ? std::min(255, i + add) : i; });
    }
    case AugKind::brightness: {
      const std::vector<uint8_t> black(n, 0);
      return blend_from(img, black.data(), n, float(op.arg));
    }
    case AugKind::color: {
      if (channels == 1) return;  // an L image's gray is itself
      std::vector<uint8_t> gray(n);
      for (size_t k = 0; k < hw; ++k) gray[k] = luma(img[k], img[hw + k], img[2 * hw + k]);
      std::memcpy(gray.data() + hw, gray.data(), hw);
      std::memcpy(gray.data() + 2 * hw, gray.data(), hw);
      return blend_from(img, gray.data(), n, float(op.arg));
    }
    case AugKind::contrast: {
      // The degenerate image: the mean of the image's luma, rounded (ImageStat's mean).
      uint64_t sum = 0;
      for (size_t k = 0; k < hw; ++k) sum += channels == 1 ? img[k] : luma(img[k], img[hw + k], img[2 * hw + k]);
      const std::vector<uint8_t> mean(n, uint8_t(int(double(sum) / double(hw) + 0.5)));
      return blend_from(img, mean.data(), n, float(op.arg));
    }
    case AugKind::sharpness: {
      std::vector<uint8_t> smoothed(n);
      smooth(img, smoothed.data(), channels, H, W);
      return blend_from(img, smoothed.data(), n, float(op.arg));
    }
    case AugKind::rotate:
      return rotate(img, channels, H, W, op.arg, op.bicubic, fill);
    case AugKind::shear_x: {
      const double m[6] = {1, op.arg, 0, 0, 1, 0};
      return affine_transform(img, channels, H, W, m, op.bicubic, fill);
    }
    case AugKind::shear_y: {
      const double m[6] = {1, 0, 0, op.arg, 1, 0};
      return affine_transform(img, channels, H, W, m, op.bicubic, fill);
    }
    case AugKind::translate_x: {
      const double m[6] = {1, 0, op.arg * W, 0, 1, 0};
      return affine_transform(img, channels, H, W, m, op.bicubic, fill);
    }
    case AugKind::translate_y: {
      const double m[6] = {1, 0, 0, 0, 1, op.arg * H};
      return affine_transform(img, channels, H, W, m, op.bicubic, fill);
    }
  }
}

AugInterpolation parse_augment_interpolation(const std::string& name) {
  if (name == "bicubic") return AugInterpolation::bicubic;
  if (name == "bilinear") return AugInterpolation::bilinear;
  if (name == "random") return AugInterpolation::random;
  throw Error("config: 'auto_augment_interpolation' must be \"bicubic\", \"bilinear\" or \"random\", got \"" + name +
              "\"");
}

AugmentPolicy parse_augment_policy(const std::string& spec, AugInterpolation interpolation) {
  AugmentPolicy p;
  p.interpolation = interpolation;
  if (spec.empty()) return p;
  std::vector<std::string> sections;
  for (size_t at = 0;;) {
    const size_t dash = spec.find('-', at);
    sections.push_back(spec.substr(at, dash == std::string::npos ? std::string::npos : dash - at));
    if (dash == std::string::npos) break;
    at = dash + 1;
  }
  const std::string& name = sections[0];
  p.rand = name == "rand";
  bool increasing = false, have_mstd = false, have_mmax = false;
  int magnitude = 10;
  double prob = 0.5;
  if (!p.rand && name != "original" && name != "originalr" && name != "v0" && name != "v0r")
    bad_spec(spec, name == "augmix" ? "AugMix is not implemented"
                   : name == "3a"   ? "timm's \"3a\" policy is not implemented"
                                    : "no policy named \"" + name + "\"");
  for (size_t i = 1; i < sections.size(); ++i) {
    const std::string& s = sections[i];
    // timm's re.split(r'(\d.*)'): the key is what comes before the first digit.
    const size_t digit = s.find_first_of("0123456789");
    const std::string key = s.substr(0, digit), value = digit == std::string::npos ? "" : s.substr(digit);
    // mstd and mmax: timm keeps the first (hparams.setdefault); the others the last.
    if (key == "mstd") {
      const double mstd = parse_number(spec, s, value, false);
      if (mstd < 0) bad_spec(spec, "'mstd' must be >= 0");
      // RandAugment's timm reads over 100 as uniform; AutoAugment's keeps the number.
      if (!have_mstd) p.magnitude_std = p.rand && mstd > 100 ? std::numeric_limits<double>::infinity() : mstd;
      have_mstd = true;
    } else if (p.rand && key == "m") {
      magnitude = int(parse_number(spec, s, value, true));
    } else if (p.rand && key == "n") {
      p.layers = int(parse_number(spec, s, value, true));
      if (p.layers < 0 || p.layers > kMaxAugOps)
        bad_spec(spec, "'n' (operations an image) must be in [0, " + std::to_string(kMaxAugOps) + "]");
    } else if (p.rand && key == "mmax") {
      const int mmax = int(parse_number(spec, s, value, true));
      if (!have_mmax) p.magnitude_max = mmax == 0 ? 10 : mmax;  // timm's `magnitude_max or 10`
      have_mmax = true;
    } else if (p.rand && key == "p") {
      prob = parse_number(spec, s, value, false);
      if (prob < 0 || prob > 1) bad_spec(spec, "'p' (each operation's probability) must be in [0, 1]");
    } else if (p.rand && key == "inc") {
      increasing = parse_number(spec, s, value, true) != 0;
    } else if (p.rand && key == "w") {
      bad_spec(spec, "timm's experimental weighted choice of operations ('w') is not implemented");
    } else if (p.rand && !key.empty() && key[0] == 't') {
      bad_spec(spec, "timm's other sets of operations ('" + s + "') are not implemented");
    } else {
      bad_spec(spec, "unknown section '" + s + "'");
    }
  }
  if (p.rand) {
    for (const char* op : increasing ? kRandIncreasing : kRand) p.entries.push_back({op_index(op), prob, magnitude});
    return p;
  }
  const bool research = name.back() == 'r';  // PosterizeIncreasing
  auto add = [&](const auto& table) {
    for (const auto& sub : table)
      for (const PolicyOp& o : sub) {
        const bool posterize = std::strncmp(o.name, "Posterize", 9) == 0;
        p.entries.push_back({op_index(posterize && research ? "PosterizeIncreasing" : o.name), o.prob, o.magnitude});
      }
  };
  if (name.rfind("original", 0) == 0)
    add(kOriginal);
  else
    add(kV0);
  p.layers = 2;
  return p;
}

AugmentDraw draw_augment(const AugmentPolicy& p, Rng& rng) {
  AugmentDraw d;
  if (p.empty()) return d;
  int chosen[kMaxAugOps];
  int count = 0;
  if (p.rand) {
    for (int i = 0; i < p.layers; ++i) chosen[count++] = int(rng.below(uint64_t(p.entries.size())));
  } else {
    const int sub = int(rng.below(uint64_t(p.entries.size() / 2)));
    chosen[count++] = 2 * sub;
    chosen[count++] = 2 * sub + 1;
  }
  for (int i = 0; i < count; ++i) {
    const AugmentPolicy::Entry& e = p.entries[size_t(chosen[i])];
    // Python's random() has 53 bits, and timm skips an operation where it is above prob.
    if (e.prob < 1.0 && double(rng.next_u64() >> 11) * 0x1p-53 > e.prob) continue;
    double m = e.magnitude;
    if (p.magnitude_std > 0)
      m = std::isinf(p.magnitude_std) ? m * double(rng.uniform()) : m + p.magnitude_std * double(rng.normal());
    m = std::max(0.0, std::min(m, p.magnitude_max));
    const OpName& op = kOps[e.op];
    auto signed_ = [&](double v) { return rng.below(2) == 1 ? -v : v; };
    double arg = 0;
    switch (op.level) {
      case Level::none:
        break;
      case Level::rotate:
        arg = signed_(m / 10.0 * 30.0);
        break;
      case Level::enhance:
        arg = m / 10.0 * 1.8 + 0.1;
        break;
      case Level::enhance_inc:
        arg = std::max(0.1, 1.0 + signed_(m / 10.0 * 0.9));
        break;
      case Level::shear:
        arg = signed_(m / 10.0 * 0.3);
        break;
      case Level::translate:
        arg = signed_(m / 10.0 * 0.45);
        break;
      case Level::posterize:
        arg = int(m / 10.0 * 4.0);
        break;
      case Level::posterize_inc:
        arg = 4 - int(m / 10.0 * 4.0);
        break;
      case Level::posterize_orig:
        arg = int(m / 10.0 * 4.0) + 4;
        break;
      case Level::solarize:
        arg = std::min(256, int(m / 10.0 * 256.0));
        break;
      case Level::solarize_inc:
        arg = 256 - std::min(256, int(m / 10.0 * 256.0));
        break;
      case Level::solarize_add:
        arg = std::min(128, int(m / 10.0 * 110.0));
        break;
    }
    AugOp& out = d.ops[d.count++];
    out = {op.kind, arg, p.interpolation == AugInterpolation::bicubic};
    if (geometric(op.kind) && p.interpolation == AugInterpolation::random) out.bicubic = rng.below(2) == 1;
  }
  return d;
}

void augment_image(uint8_t* img, int channels, int height, int width, const AugmentDraw& d, const uint8_t* fill) {
  for (int i = 0; i < d.count; ++i) apply_augment(img, channels, height, width, d.ops[i], fill);
}

}  // namespace gmlp
