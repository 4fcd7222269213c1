// Single image files into float [C, H, W]: PGM/PPM by our own parser, JPEG by libjpeg-turbo,
// everything else (PNG, BMP, GIF; CMYK JPEGs) by stb_image; channel conversion and
// bilinear resizing.
#include "gmlp/image.h"

#include <jerror.h>  // after jpeglib.h, which it needs
#include <jpeglib.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <csetjmp>
#include <cstdio>  // jpeglib.h needs FILE
#include <cstdlib>
#include <cstring>

#include "gmlp/error.h"
#include "gmlp/files.h"
#include "ops/dropout_mask.h"  // mix64: random erasing's noise by counter

// stb_image's implementation lives here, with internal linkage (STB_IMAGE_STATIC), so it
// cannot clash with another copy (Debian's libstb, say) in the same program.
#define STB_IMAGE_STATIC
#define STB_IMAGE_IMPLEMENTATION
#define STBI_FAILURE_USERMSG
// Only formats that announce themselves with a signature. TGA has none: stb recognises
// it by guesswork, and fuzzing found 143 bytes of noise taken for a TGA that took
// seconds to decode. PGM/PPM are read by read_pnm.
#define STBI_ONLY_PNG
#define STBI_ONLY_JPEG
#define STBI_ONLY_BMP
#define STBI_ONLY_GIF
#if defined(__GNUC__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wunused-function"
#pragma GCC diagnostic ignored "-Wsign-compare"
#pragma GCC diagnostic ignored "-Wmissing-field-initializers"
#pragma GCC diagnostic ignored "-Wimplicit-fallthrough"
#endif
#include <stb/stb_image.h>
#if defined(__GNUC__)
#pragma GCC diagnostic pop
#endif

namespace gmlp {

namespace {

// PGM (P2 ASCII, P5 binary) and PPM (P3, P6): header "Px W H MAXVAL" with whitespace and
// '#' comments, then the samples; binary samples are 1 byte (maxval < 256) or 2 bytes
// big-endian.
Image read_pnm(const std::string& path, const std::string& bytes) {
  auto fail = [&](const std::string& what) -> void { throw Error(path + ": malformed P" + std::string(1, bytes[1]) + " image: " + what); };
  const char kind = bytes[1];
  const bool ascii = kind == '2' || kind == '3';
  const int channels = (kind == '3' || kind == '6') ? 3 : 1;
  size_t pos = 2;
  auto skip_space = [&] {
    while (pos < bytes.size()) {
      if (std::isspace(static_cast<unsigned char>(bytes[pos]))) {
        ++pos;
      } else if (bytes[pos] == '#') {
        while (pos < bytes.size() && bytes[pos] != '\n' && bytes[pos] != '\r') ++pos;
      } else {
        break;
      }
    }
  };
  auto number = [&](const char* what) -> long {
    skip_space();
    if (pos >= bytes.size()) fail(std::string("file ends before its ") + what);
    if (!std::isdigit(static_cast<unsigned char>(bytes[pos])))
      fail(std::string("expected a number for its ") + what + ", found '" + bytes[pos] + "'");
    long v = 0;
    while (pos < bytes.size() && std::isdigit(static_cast<unsigned char>(bytes[pos]))) {
      v = v * 10 + (bytes[pos++] - '0');
      if (v > 1000000000L) fail(std::string("its ") + what + " is too large");
    }
    return v;
  };
  if (pos < bytes.size() && !std::isspace(static_cast<unsigned char>(bytes[pos])) && bytes[pos] != '#')
    fail("no whitespace after the magic");
  const long w = number("width"), h = number("height"), maxval = number("maxval");
  if (w <= 0 || h <= 0) fail("size " + std::to_string(w) + "x" + std::to_string(h) + " is empty");
  if (w > 65535 || h > 65535) fail("size " + std::to_string(w) + "x" + std::to_string(h) + " is too large");
  if (maxval <= 0 || maxval > 65535) fail("maxval " + std::to_string(maxval) + " is not in 1..65535");
  Image img;
  img.channels = channels;
  img.height = int(h);
  img.width = int(w);
  const size_t count = size_t(w) * size_t(h) * channels;
  img.pixels.resize(count);
  const float scale = 1.0f / float(maxval);
  // Samples arrive interleaved (RGB RGB ...); we store planar [C, H, W].
  auto put = [&](size_t i, long v) {
    if (v > maxval) fail("sample " + std::to_string(v) + " at index " + std::to_string(i) + " exceeds maxval " + std::to_string(maxval));
    const size_t pix = i / channels, c = i % channels;
    img.pixels[c * size_t(w) * size_t(h) + pix] = float(v) * scale;
  };
  if (ascii) {
    for (size_t i = 0; i < count; ++i) {
      skip_space();
      if (pos >= bytes.size())
        fail("truncated: " + std::to_string(i) + " of " + std::to_string(count) + " samples");
      put(i, number("samples"));
    }
  } else {
    // Exactly one whitespace byte separates maxval from the raster.
    if (pos >= bytes.size() || !std::isspace(static_cast<unsigned char>(bytes[pos]))) fail("no whitespace after maxval");
    ++pos;
    const size_t bps = maxval < 256 ? 1 : 2;
    const size_t have = (bytes.size() - pos) / bps;
    if (have < count)
      fail("truncated: " + std::to_string(have) + " of " + std::to_string(count) + " samples");
    const auto* p = reinterpret_cast<const uint8_t*>(bytes.data()) + pos;
    for (size_t i = 0; i < count; ++i) put(i, bps == 1 ? long(p[i]) : (long(p[2 * i]) << 8) | p[2 * i + 1]);
  }
  return img;
}

// JPEG by libjpeg-turbo, the decoder PIL (and so torchvision) uses, with its defaults (the
// accurate integer DCT, fancy upsampling): a JPEG decodes to the bytes PyTorch's users get
// from it, about three times faster than stb_image. libjpeg reports a fatal error through
// error_exit, which must not return: it jumps back to decode_jpeg's setjmp, in whose frame
// nothing with a destructor lives.
struct JpegErrors {
  jpeg_error_mgr mgr;
  std::jmp_buf jump;
  char message[JMSG_LENGTH_MAX];
  bool truncated;
};

void jpeg_fail(j_common_ptr c) {
  auto* e = reinterpret_cast<JpegErrors*>(c->err);
  c->err->format_message(c, e->message);
  std::longjmp(e->jump, 1);
}

// Warnings are not printed. A file that ends early is an error (libjpeg would grey out the
// rest); the other warnings (extraneous bytes before a marker and the like, common in
// photographs' files) are passed over, as PIL passes them.
void jpeg_warn(j_common_ptr c, int level) {
  if (level < 0 && c->err->msg_code == JWRN_JPEG_EOF) reinterpret_cast<JpegErrors*>(c->err)->truncated = true;
}

enum class JpegResult { ok, failed, other_colours, too_large, truncated };

// Decodes into *out (malloc'd, rows of *w x *n bytes), 1 or 3 channels. other_colours: a
// CMYK or YCCK file, which stb_image converts and libjpeg does not.
JpegResult decode_jpeg(const unsigned char* buf, unsigned long len, int64_t max_pixels, JpegErrors* err,
                       unsigned char** out, int* w, int* h, int* n) {
  jpeg_decompress_struct cinfo;
  unsigned char* volatile pixels = nullptr;
  cinfo.err = jpeg_std_error(&err->mgr);
  err->mgr.error_exit = jpeg_fail;
  err->mgr.emit_message = jpeg_warn;
  err->truncated = false;
  if (setjmp(err->jump)) {
    jpeg_destroy_decompress(&cinfo);
    std::free(pixels);
    return JpegResult::failed;
  }
  jpeg_create_decompress(&cinfo);
  jpeg_mem_src(&cinfo, buf, len);
  jpeg_read_header(&cinfo, TRUE);
  *w = int(cinfo.image_width);
  *h = int(cinfo.image_height);
  if (cinfo.num_components != 1 && cinfo.num_components != 3) {
    jpeg_destroy_decompress(&cinfo);
    return JpegResult::other_colours;
  }
  if (int64_t(cinfo.image_width) * int64_t(cinfo.image_height) > max_pixels) {
    jpeg_destroy_decompress(&cinfo);
    return JpegResult::too_large;
  }
  cinfo.out_color_space = cinfo.num_components == 1 ? JCS_GRAYSCALE : JCS_RGB;
  jpeg_start_decompress(&cinfo);
  const size_t stride = size_t(cinfo.output_width) * size_t(cinfo.output_components);
  pixels = static_cast<unsigned char*>(std::malloc(stride * cinfo.output_height));
  if (!pixels) {
    jpeg_destroy_decompress(&cinfo);
    return JpegResult::too_large;
  }
  while (cinfo.output_scanline < cinfo.output_height) {
    JSAMPROW row = pixels + size_t(cinfo.output_scanline) * stride;
    jpeg_read_scanlines(&cinfo, &row, 1);
  }
  jpeg_finish_decompress(&cinfo);
  *n = cinfo.output_components;
  jpeg_destroy_decompress(&cinfo);
  *out = pixels;
  if (err->truncated) {
    std::free(pixels);
    return JpegResult::truncated;
  }
  return JpegResult::ok;
}

// Interleaved samples of n channels (the last alpha when n is 2 or 4) into img's planar
// [0, 1] values, alpha composited on black (value * alpha), each channel in its own
// loop: the decoders' output at the speed of a copy.
template <typename T>
void to_planar(const T* src, int n, float scale, Image& img) {
  const size_t hw = size_t(img.width) * size_t(img.height);
  float* out = img.pixels.data();
  if (n == 2 || n == 4) {
    for (size_t p = 0; p < hw; ++p) {
      const float a = float(src[p * n + n - 1]) * scale;
      for (int c = 0; c < img.channels; ++c) out[c * hw + p] = float(src[p * n + c]) * scale * a;
    }
    return;
  }
  if (n == 3) {  // one pass over the samples, not one a channel
    float *r = out, *g = out + hw, *b = out + 2 * hw;
    for (size_t p = 0; p < hw; ++p) {
      r[p] = float(src[3 * p]) * scale;
      g[p] = float(src[3 * p + 1]) * scale;
      b[p] = float(src[3 * p + 2]) * scale;
    }
    return;
  }
  for (int c = 0; c < img.channels; ++c)
    for (size_t p = 0; p < hw; ++p) out[c * hw + p] = float(src[p * n + c]) * scale;
}

// A small compressed file may declare a huge image: bound the decode by what a model
// input can use (an 8192 x 8192 picture), before a decoder allocates it.
constexpr int64_t kMaxPixels = int64_t(1) << 26;

void check_pixels(const std::string& path, int w, int h) {
  require(int64_t(w) * int64_t(h) <= kMaxPixels, path + ": the image declares " + std::to_string(w) + "x" +
                                                     std::to_string(h) + " pixels, more than the " +
                                                     std::to_string(kMaxPixels) + " this reader decodes");
}

Image read_stb(const std::string& path, const std::string& bytes);

Image read_jpeg(const std::string& path, const std::string& bytes) {
  JpegErrors err;
  unsigned char* data = nullptr;
  int w = 0, h = 0, n = 0;
  switch (decode_jpeg(reinterpret_cast<const unsigned char*>(bytes.data()), static_cast<unsigned long>(bytes.size()),
                      kMaxPixels, &err, &data, &w, &h, &n)) {
    case JpegResult::ok:
      break;
    case JpegResult::failed:
      throw Error(path + ": cannot decode JPEG (libjpeg: " + err.message + ")");
    case JpegResult::other_colours:
      return read_stb(path, bytes);
    case JpegResult::too_large:
      check_pixels(path, w, h);
      throw Error(path + ": out of memory decoding a JPEG of " + std::to_string(w) + "x" + std::to_string(h));
    case JpegResult::truncated:
      throw Error(path + ": truncated JPEG (the file ends before its image data does)");
  }
  Image img;
  img.channels = n;
  img.height = h;
  img.width = w;
  img.pixels.resize(size_t(w) * size_t(h) * n);
  to_planar(data, n, 1.0f / 255.0f, img);
  std::free(data);
  return img;
}

// stb_image for everything else; 16-bit PNGs keep their precision.
Image read_stb(const std::string& path, const std::string& bytes) {
  const auto* buf = reinterpret_cast<const stbi_uc*>(bytes.data());
  require(bytes.size() <= size_t(INT32_MAX), path + ": image file too large");
  const int len = int(bytes.size());
  int w = 0, h = 0, n = 0;
  if (!stbi_info_from_memory(buf, len, &w, &h, &n))
    throw Error(path + ": not a readable image (stb_image: " + stbi_failure_reason() +
                "); expected PNG, JPEG, BMP, GIF, PGM or PPM");
  check_pixels(path, w, h);
  const bool wide = stbi_is_16_bit_from_memory(buf, len);
  void* data = wide ? static_cast<void*>(stbi_load_16_from_memory(buf, len, &w, &h, &n, 0))
                    : static_cast<void*>(stbi_load_from_memory(buf, len, &w, &h, &n, 0));
  if (!data) throw Error(path + ": cannot decode image (stb_image: " + stbi_failure_reason() + ")");
  Image img;
  img.channels = n >= 3 ? 3 : 1;
  img.height = h;
  img.width = w;
  img.pixels.resize(size_t(w) * size_t(h) * img.channels);
  if (wide)
    to_planar(static_cast<const uint16_t*>(data), n, 1.0f / 65535.0f, img);
  else
    to_planar(static_cast<const uint8_t*>(data), n, 1.0f / 255.0f, img);
  stbi_image_free(data);
  return img;
}

// Separable resampling weights along one axis: out[i] = sum_k w[i][k] * in[first[i] + k],
// k < count[i], each output's weights at weights[i * taps]. The triangle's zero weights at
// either end are left out: adding 0 * a finite value changes no sum.
struct AxisFilter {
  std::vector<int> first, count;
  std::vector<float> weights;
  int taps = 0;
  const float* of(int i) const { return weights.data() + size_t(i) * taps; }
};

// The span [start, start + length) of the input (in input pixels, pixel j spanning
// [j, j + 1); the whole input: 0, in) brought to `out` pixels.
AxisFilter make_filter(int in, int out, double start, double length) {
  AxisFilter f;
  const double scale = length / out;
  const double support = std::max(1.0, scale);  // the triangle's half-width in input pixels
  f.taps = int(std::ceil(2 * support)) + 2;
  f.weights.assign(size_t(out) * f.taps, 0.0f);
  std::vector<float> w;
  for (int i = 0; i < out; ++i) {
    const double centre = start + (i + 0.5) * scale;  // in input pixel units
    const int lo = std::max(0, int(std::floor(centre - support)));
    const int hi = std::min(in - 1, int(std::ceil(centre + support)));
    w.clear();
    double total = 0;
    for (int j = lo; j <= hi; ++j) {
      const double d = std::abs((j + 0.5 - centre) / support);
      const double v = std::max(0.0, 1.0 - d);
      w.push_back(float(v));
      total += v;
    }
    if (total <= 0) {  // cannot happen for in >= 1, but never divide by zero
      w.assign(w.size(), 0.0f);
      w[std::clamp(int(centre), lo, hi) - lo] = 1.0f;
      total = 1;
    }
    for (auto& v : w) v = float(v / total);
    size_t a = 0, b = w.size();
    while (b > a + 1 && w[b - 1] == 0.0f) --b;
    while (a + 1 < b && w[a] == 0.0f) ++a;
    f.first.push_back(lo + int(a));
    f.count.push_back(int(b - a));
    std::copy(w.begin() + a, w.begin() + b, f.weights.begin() + size_t(i) * f.taps);
  }
  return f;
}

}  // namespace

Image read_image(const std::string& path) {
  const std::string bytes = read_file(path);
  require(!bytes.empty(), path + ": empty file, not an image");
  if (bytes.size() >= 2 && bytes[0] == 'P' && (bytes[1] == '2' || bytes[1] == '3' || bytes[1] == '5' || bytes[1] == '6'))
    return read_pnm(path, bytes);
  if (bytes.size() >= 3 && uint8_t(bytes[0]) == 0xFF && uint8_t(bytes[1]) == 0xD8 && uint8_t(bytes[2]) == 0xFF)
    return read_jpeg(path, bytes);
  return read_stb(path, bytes);
}

Image convert_channels(const Image& img, int channels) {
  require(channels == 1 || channels == 3, "image channels must be 1 or 3, got " + std::to_string(channels));
  require(img.channels == 1 || img.channels == 3, "convert_channels: the image has " + std::to_string(img.channels) + " channels");
  if (img.channels == channels) return img;
  const size_t hw = size_t(img.height) * img.width;
  Image out;
  out.channels = channels;
  out.height = img.height;
  out.width = img.width;
  out.pixels.resize(hw * channels);
  if (channels == 3) {
    for (int c = 0; c < 3; ++c) std::copy(img.pixels.begin(), img.pixels.begin() + hw, out.pixels.begin() + c * hw);
  } else {
    for (size_t p = 0; p < hw; ++p)
      out.pixels[p] = 0.299f * img.pixels[p] + 0.587f * img.pixels[hw + p] + 0.114f * img.pixels[2 * hw + p];
  }
  return out;
}

Image resize_bilinear(const Image& img, int height, int width) {
  require(img.height > 0 && img.width > 0, "resize_bilinear: the image is empty");
  if (height == img.height && width == img.width) return img;
  return resize_box(img, {0.0, 0.0, double(img.width), double(img.height)}, height, width);
}

Image resize_box(const Image& img, const CropBox& box, int height, int width) {
  require(height > 0 && width > 0,
          "resize_bilinear: target size " + std::to_string(height) + "x" + std::to_string(width) + " is empty");
  require(img.height > 0 && img.width > 0, "resize_bilinear: the image is empty");
  require(box.w > 0 && box.h > 0 && box.x >= 0 && box.y >= 0 && box.x + box.w <= img.width + 1e-9 &&
              box.y + box.h <= img.height + 1e-9,
          "resize_box: the box lies outside the image");
  const AxisFilter fy = make_filter(img.height, height, box.y, box.h), fx = make_filter(img.width, width, box.x, box.w);
  Image out;
  out.channels = img.channels;
  out.height = height;
  out.width = width;
  out.pixels.assign(size_t(img.channels) * height * width, 0.0f);
  std::vector<float> tmp(size_t(img.height) * width);  // rows resampled, columns not yet
  std::vector<float> acc(static_cast<size_t>(width));
  // Only the rows the columns' taps read (a crop's, and its filter's reach).
  int row_lo = img.height, row_hi = 0;
  for (int y = 0; y < height; ++y) {
    row_lo = std::min(row_lo, fy.first[y]);
    row_hi = std::max(row_hi, fy.first[y] + fy.count[y]);
  }
  for (int c = 0; c < img.channels; ++c) {
    const float* src = img.pixels.data() + size_t(c) * img.height * img.width;
    for (int y = row_lo; y < row_hi; ++y) {
      const float* row = src + size_t(y) * img.width;
      for (int x = 0; x < width; ++x) {
        const float* w = fx.of(x);
        const float* in = row + fx.first[x];
        float s = 0;
        for (int k = 0; k < fx.count[x]; ++k) s += w[k] * in[k];
        tmp[size_t(y) * width + x] = s;
      }
    }
    // Columns a whole row at a time, each value's sum in the order of the taps, as one
    // value at a time would add them (the loop over x runs in vector lanes).
    float* dst = out.pixels.data() + size_t(c) * height * width;
    for (int y = 0; y < height; ++y) {
      std::fill(acc.begin(), acc.end(), 0.0f);
      const float* w = fy.of(y);
      for (int k = 0; k < fy.count[y]; ++k) {
        const float* in = tmp.data() + size_t(fy.first[y] + k) * width;
        const float wk = w[k];
        for (int x = 0; x < width; ++x) acc[size_t(x)] += wk * in[x];
      }
      for (int x = 0; x < width; ++x) dst[size_t(y) * width + x] = std::clamp(acc[size_t(x)], 0.0f, 1.0f);
    }
  }
  return out;
}

CropDraw draw_crop(Rng& rng) {
  CropDraw d;
  for (CropDraw::Try& t : d.tries) {
    t.area = rng.uniform();
    t.ratio = rng.uniform();
    t.y = rng.uniform();
    t.x = rng.uniform();
  }
  return d;
}

CropBox crop_box(const CropDraw& d, float min_area, int width, int height) {
  const double area = double(width) * height, lo = std::log(3.0 / 4.0), hi = std::log(4.0 / 3.0);
  for (const CropDraw::Try& t : d.tries) {
    const double target = area * (double(min_area) + (1.0 - double(min_area)) * t.area);
    const double ratio = std::exp(lo + (hi - lo) * t.ratio);  // width / height
    // Python's round: half to even, as nearbyint rounds in the default mode.
    const int w = int(std::nearbyint(std::sqrt(target * ratio))), h = int(std::nearbyint(std::sqrt(target / ratio)));
    if (w > 0 && w <= width && h > 0 && h <= height) {
      const int y = std::min(height - h, int(double(t.y) * (height - h + 1)));
      const int x = std::min(width - w, int(double(t.x) * (width - w + 1)));
      return {double(x), double(y), double(w), double(h)};
    }
  }
  const double in_ratio = double(width) / height;
  int w = width, h = height;
  if (in_ratio < 3.0 / 4.0)
    h = int(std::nearbyint(w / (3.0 / 4.0)));
  else if (in_ratio > 4.0 / 3.0)
    w = int(std::nearbyint(h * (4.0 / 3.0)));
  return {double((width - w) / 2), double((height - h) / 2), double(w), double(h)};
}

MixDraw draw_mix(float mixup, float cutmix, int height, int width, Rng& rng) {
  MixDraw m;
  m.cut = cutmix > 0 && (mixup <= 0 || rng.below(2) == 1);
  const double alpha = m.cut ? cutmix : mixup;
  const double w = rng.beta(alpha, alpha);
  m.weight = float(w);
  if (!m.cut) return m;
  const double side = std::sqrt(1.0 - w);
  const int ch = int(height * side), cw = int(width * side);
  const int cy = int(rng.below(uint64_t(height))), cx = int(rng.below(uint64_t(width)));
  m.y0 = std::clamp(cy - ch / 2, 0, height);
  m.y1 = std::clamp(cy + ch / 2, 0, height);
  m.x0 = std::clamp(cx - cw / 2, 0, width);
  m.x1 = std::clamp(cx + cw / 2, 0, width);
  m.weight = float(1.0 - double(m.y1 - m.y0) * double(m.x1 - m.x0) / (double(height) * width));
  return m;
}

EraseDraw draw_erase(float probability, int height, int width, Rng& rng) {
  EraseDraw e;
  if (!(rng.uniform() < probability)) return e;
  const double area = double(height) * width, lo = std::log(0.3), hi = std::log(1.0 / 0.3);
  for (int attempt = 0; attempt < 10; ++attempt) {
    const double target = (0.02 + (1.0 / 3.0 - 0.02) * rng.uniform()) * area;
    const double ratio = std::exp(lo + (hi - lo) * rng.uniform());
    // Python's round (timm's): half to even, as nearbyint rounds in the default mode.
    const int h = int(std::nearbyint(std::sqrt(target * ratio))), w = int(std::nearbyint(std::sqrt(target / ratio)));
    if (w < width && h < height) {
      e.on = true;
      e.h = h;
      e.w = w;
      e.y0 = int(rng.below(uint64_t(height - h + 1)));
      e.x0 = int(rng.below(uint64_t(width - w + 1)));
      return e;
    }
  }
  return e;
}

void erase_image(float* img, int channels, int height, int width, const EraseDraw& e, uint64_t seed, int64_t row) {
  if (!e.on) return;
  const uint64_t key = ops::mix64(seed ^ ops::mix64(uint64_t(row) + 1));
  const size_t n = size_t(channels) * e.h * e.w;
  // The box's values in order, a pair at a time, then copied into its rows.
  std::vector<float> noise((n + 1) / 2 * 2);
  for (size_t j = 0; j < noise.size() / 2; ++j) {
    const uint64_t bits = ops::mix64(key + (j + 1) * ops::kGolden);
    const float u1 = float((bits >> 40) + 1) * (1.0f / 16777216.0f);  // (0, 1]
    const float u2 = float((bits >> 16) & 0xFFFFFF) * (1.0f / 16777216.0f);
    const float radius = std::sqrt(-2.0f * std::log(u1)), angle = 6.2831853f * u2;
    noise[2 * j] = radius * std::cos(angle);
    noise[2 * j + 1] = radius * std::sin(angle);
  }
  const float* from = noise.data();
  for (int c = 0; c < channels; ++c)
    for (int r = 0; r < e.h; ++r, from += e.w)
      std::copy(from, from + e.w, img + (size_t(c) * height + e.y0 + r) * width + e.x0);
}

void flip_image(uint8_t* img, int channels, int height, int width) {
  for (int r = 0; r < channels * height; ++r) std::reverse(img + size_t(r) * width, img + size_t(r + 1) * width);
}

void flip_image(float* img, int channels, int height, int width) {
  for (int r = 0; r < channels * height; ++r) std::reverse(img + size_t(r) * width, img + size_t(r + 1) * width);
}

Image load_image(const std::string& path, int channels, int height, int width) {
  require(channels == 1 || channels == 3, path + ": wanted channel count must be 1 or 3, got " + std::to_string(channels));
  require(height > 0 && width > 0, path + ": wanted size " + std::to_string(height) + "x" + std::to_string(width) + " is empty");
  return resize_bilinear(convert_channels(read_image(path), channels), height, width);
}

}  // namespace gmlp
