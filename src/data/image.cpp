// Single image files into float [C, H, W]: PGM/PPM by our own parser, everything else
// (PNG, JPEG, BMP, ...) by stb_image; channel conversion and bilinear resizing.
#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstring>

#include "gmlp/error.h"
#include "gmlp/files.h"
#include "gmlp/image.h"

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

// stb_image for everything else; 16-bit PNGs keep their precision.
Image read_stb(const std::string& path, const std::string& bytes) {
  const auto* buf = reinterpret_cast<const stbi_uc*>(bytes.data());
  require(bytes.size() <= size_t(INT32_MAX), path + ": image file too large");
  const int len = int(bytes.size());
  int w = 0, h = 0, n = 0;
  if (!stbi_info_from_memory(buf, len, &w, &h, &n))
    throw Error(path + ": not a readable image (stb_image: " + stbi_failure_reason() +
                "); expected PNG, JPEG, BMP, GIF, PGM or PPM");
  // A small compressed file may declare a huge image: bound the decode by what a model
  // input can use (an 8192 x 8192 picture), before stb allocates it.
  constexpr int64_t kMaxPixels = int64_t(1) << 26;
  require(int64_t(w) * int64_t(h) <= kMaxPixels, path + ": the image declares " + std::to_string(w) + "x" +
                                                     std::to_string(h) + " pixels, more than the " +
                                                     std::to_string(kMaxPixels) + " this reader decodes");
  const bool wide = stbi_is_16_bit_from_memory(buf, len);
  void* data = wide ? static_cast<void*>(stbi_load_16_from_memory(buf, len, &w, &h, &n, 0))
                    : static_cast<void*>(stbi_load_from_memory(buf, len, &w, &h, &n, 0));
  if (!data) throw Error(path + ": cannot decode image (stb_image: " + stbi_failure_reason() + ")");
  const float scale = wide ? 1.0f / 65535.0f : 1.0f / 255.0f;
  auto sample = [&](size_t i) {
    return wide ? float(static_cast<const uint16_t*>(data)[i]) * scale
                : float(static_cast<const uint8_t*>(data)[i]) * scale;
  };
  Image img;
  img.channels = n >= 3 ? 3 : 1;
  img.height = h;
  img.width = w;
  const size_t hw = size_t(w) * size_t(h);
  img.pixels.resize(hw * img.channels);
  const bool alpha = n == 2 || n == 4;
  for (size_t p = 0; p < hw; ++p) {
    const float a = alpha ? sample(p * n + n - 1) : 1.0f;
    for (int c = 0; c < img.channels; ++c) img.pixels[c * hw + p] = sample(p * n + c) * a;
  }
  stbi_image_free(data);
  return img;
}

// Separable resampling weights along one axis: out[i] = sum_k w[k] * in[first[i] + k].
struct AxisFilter {
  std::vector<int> first, count;
  std::vector<std::vector<float>> weights;
};

AxisFilter make_filter(int in, int out) {
  AxisFilter f;
  const double scale = double(in) / out;
  const double support = std::max(1.0, scale);  // the triangle's half-width in input pixels
  for (int i = 0; i < out; ++i) {
    const double centre = (i + 0.5) * scale;  // in input pixel units, pixel j spans [j, j+1)
    const int lo = std::max(0, int(std::floor(centre - support)));
    const int hi = std::min(in - 1, int(std::ceil(centre + support)));
    std::vector<float> w;
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
    f.first.push_back(lo);
    f.count.push_back(int(w.size()));
    f.weights.push_back(std::move(w));
  }
  return f;
}

}  // namespace

Image read_image(const std::string& path) {
  const std::string bytes = read_file(path);
  require(!bytes.empty(), path + ": empty file, not an image");
  if (bytes.size() >= 2 && bytes[0] == 'P' && (bytes[1] == '2' || bytes[1] == '3' || bytes[1] == '5' || bytes[1] == '6'))
    return read_pnm(path, bytes);
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
  require(height > 0 && width > 0, "resize_bilinear: target size " + std::to_string(height) + "x" + std::to_string(width) + " is empty");
  require(img.height > 0 && img.width > 0, "resize_bilinear: the image is empty");
  if (height == img.height && width == img.width) return img;
  const AxisFilter fy = make_filter(img.height, height), fx = make_filter(img.width, width);
  Image out;
  out.channels = img.channels;
  out.height = height;
  out.width = width;
  out.pixels.assign(size_t(img.channels) * height * width, 0.0f);
  std::vector<float> tmp(size_t(img.height) * width);  // rows resampled, columns not yet
  for (int c = 0; c < img.channels; ++c) {
    const float* src = img.pixels.data() + size_t(c) * img.height * img.width;
    for (int y = 0; y < img.height; ++y)
      for (int x = 0; x < width; ++x) {
        float s = 0;
        for (int k = 0; k < fx.count[x]; ++k) s += fx.weights[x][k] * src[size_t(y) * img.width + fx.first[x] + k];
        tmp[size_t(y) * width + x] = s;
      }
    float* dst = out.pixels.data() + size_t(c) * height * width;
    for (int y = 0; y < height; ++y)
      for (int x = 0; x < width; ++x) {
        float s = 0;
        for (int k = 0; k < fy.count[y]; ++k) s += fy.weights[y][k] * tmp[size_t(fy.first[y] + k) * width + x];
        dst[size_t(y) * width + x] = std::clamp(s, 0.0f, 1.0f);
      }
  }
  return out;
}

Image load_image(const std::string& path, int channels, int height, int width) {
  require(channels == 1 || channels == 3, path + ": wanted channel count must be 1 or 3, got " + std::to_string(channels));
  require(height > 0 && width > 0, path + ": wanted size " + std::to_string(height) + "x" + std::to_string(width) + " is empty");
  return resize_bilinear(convert_channels(read_image(path), channels), height, width);
}

}  // namespace gmlp
