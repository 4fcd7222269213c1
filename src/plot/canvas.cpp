// The canvas: pixels, clipping, rectangles, antialiased lines, colormaps and PNG I/O.
#include <algorithm>
#include <array>
#include <cmath>

#include "gmlp/error.h"
#include "gmlp/files.h"
#include "gmlp/image.h"
#include "gmlp/plot.h"
#include "gmlp/safetensors.h"  // write_file_atomic

// stb_image_write's implementation, with internal linkage (see image_io.cpp).
#define STB_IMAGE_WRITE_STATIC
#define STB_IMAGE_WRITE_IMPLEMENTATION
#if defined(__GNUC__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wunused-function"
#pragma GCC diagnostic ignored "-Wsign-compare"
#pragma GCC diagnostic ignored "-Wmissing-field-initializers"
#endif
#include <stb/stb_image_write.h>
#if defined(__GNUC__)
#pragma GCC diagnostic pop
#endif

namespace gmlp::plot {

namespace {

struct Stop {
  float t;
  Rgb c;
};

Rgb lerp(Rgb a, Rgb b, float t) {
  auto m = [t](uint8_t x, uint8_t y) { return uint8_t(std::lround(x + (float(y) - float(x)) * t)); };
  return {m(a.r, b.r), m(a.g, b.g), m(a.b, b.b)};
}

template <size_t N>
Rgb ramp(const std::array<Stop, N>& stops, float t) {
  if (t <= stops.front().t) return stops.front().c;
  for (size_t i = 1; i < N; ++i)
    if (t <= stops[i].t) return lerp(stops[i - 1].c, stops[i].c, (t - stops[i - 1].t) / (stops[i].t - stops[i - 1].t));
  return stops.back().c;
}

}  // namespace

Rgb palette(int i) {
  static constexpr std::array<Rgb, 10> kTab10 = {{{31, 119, 180}, {255, 127, 14}, {44, 160, 44}, {214, 39, 40},
                                                  {148, 103, 189}, {140, 86, 75}, {227, 119, 194}, {127, 127, 127},
                                                  {188, 189, 34}, {23, 190, 207}}};
  return kTab10[size_t(((i % 10) + 10) % 10)];
}

Rgb diverging(float t) {
  if (std::isnan(t)) return kGray;
  // ColorBrewer RdBu (9 classes) with a pure white centre, blue for negative values.
  static constexpr std::array<Stop, 9> kStops = {{{-1.00f, {33, 102, 172}},
                                                  {-0.75f, {67, 147, 195}},
                                                  {-0.50f, {146, 197, 222}},
                                                  {-0.25f, {209, 229, 240}},
                                                  {0.00f, {255, 255, 255}},
                                                  {0.25f, {253, 219, 199}},
                                                  {0.50f, {244, 165, 130}},
                                                  {0.75f, {214, 96, 77}},
                                                  {1.00f, {178, 24, 43}}}};
  return ramp(kStops, std::clamp(t, -1.0f, 1.0f));
}

Rgb sequential(float t) {
  if (std::isnan(t)) return kGray;
  static constexpr std::array<Stop, 10> kViridis = {{{0.0f / 9, {68, 1, 84}},
                                                     {1.0f / 9, {72, 40, 120}},
                                                     {2.0f / 9, {62, 73, 137}},
                                                     {3.0f / 9, {49, 104, 142}},
                                                     {4.0f / 9, {38, 130, 142}},
                                                     {5.0f / 9, {31, 158, 137}},
                                                     {6.0f / 9, {53, 183, 121}},
                                                     {7.0f / 9, {110, 206, 88}},
                                                     {8.0f / 9, {181, 222, 43}},
                                                     {9.0f / 9, {253, 231, 37}}}};
  return ramp(kViridis, std::clamp(t, 0.0f, 1.0f));
}

Canvas::Canvas(int width, int height, Rgb background) : w_(width), h_(height) {
  require(width > 0 && height > 0 && width <= 1 << 15 && height <= 1 << 15,
          "canvas size " + std::to_string(width) + "x" + std::to_string(height) + " is out of range");
  px_.resize(size_t(w_) * h_ * 3);
  for (size_t i = 0; i < px_.size(); i += 3) {
    px_[i] = background.r;
    px_[i + 1] = background.g;
    px_[i + 2] = background.b;
  }
  clear_clip();
}

Rgb Canvas::get(int x, int y) const {
  require(x >= 0 && x < w_ && y >= 0 && y < h_, "pixel (" + std::to_string(x) + ", " + std::to_string(y) +
                                                    ") is outside the " + std::to_string(w_) + "x" +
                                                    std::to_string(h_) + " canvas");
  const uint8_t* p = &px_[(size_t(y) * w_ + x) * 3];
  return {p[0], p[1], p[2]};
}

void Canvas::set(int x, int y, Rgb c) {
  if (!visible(x, y)) return;
  uint8_t* p = &px_[(size_t(y) * w_ + x) * 3];
  p[0] = c.r;
  p[1] = c.g;
  p[2] = c.b;
}

void Canvas::blend(int x, int y, Rgb c, float alpha) {
  if (!visible(x, y) || !(alpha > 0)) return;
  if (alpha >= 1) return set(x, y, c);
  uint8_t* p = &px_[(size_t(y) * w_ + x) * 3];
  auto m = [alpha](uint8_t dst, uint8_t src) { return uint8_t(std::lround(dst + (float(src) - float(dst)) * alpha)); };
  p[0] = m(p[0], c.r);
  p[1] = m(p[1], c.g);
  p[2] = m(p[2], c.b);
}

void Canvas::set_clip(int x0, int y0, int x1, int y1) {
  cx0_ = std::clamp(x0, 0, w_);
  cy0_ = std::clamp(y0, 0, h_);
  cx1_ = std::clamp(x1, 0, w_);
  cy1_ = std::clamp(y1, 0, h_);
}

void Canvas::clear_clip() { set_clip(0, 0, w_, h_); }

void Canvas::fill_rect(int x, int y, int w, int h, Rgb c) {
  const int x0 = std::max(x, cx0_), x1 = std::min(x + w, cx1_);
  const int y0 = std::max(y, cy0_), y1 = std::min(y + h, cy1_);
  for (int yy = y0; yy < y1; ++yy)
    for (int xx = x0; xx < x1; ++xx) set(xx, yy, c);
}

void Canvas::rect(int x, int y, int w, int h, Rgb c, int thickness) {
  const int t = std::max(1, std::min({thickness, (w + 1) / 2, (h + 1) / 2}));
  fill_rect(x, y, w, t, c);
  fill_rect(x, y + h - t, w, t, c);
  fill_rect(x, y + t, t, h - 2 * t, c);
  fill_rect(x + w - t, y + t, t, h - 2 * t, c);
}

void Canvas::hline(int x0, int x1, int y, Rgb c) {
  if (x0 > x1) std::swap(x0, x1);
  for (int x = x0; x <= x1; ++x)
    if ((x - x0) % 6 < 3) set(x, y, c);
}

void Canvas::vline(int x, int y0, int y1, Rgb c) {
  if (y0 > y1) std::swap(y0, y1);
  for (int y = y0; y <= y1; ++y)
    if ((y - y0) % 6 < 3) set(x, y, c);
}

void Canvas::line(float x0, float y0, float x1, float y1, Rgb c, float width) {
  polyline({{x0, y0}, {x1, y1}}, c, width);
}

void Canvas::polyline(const std::vector<std::pair<float, float>>& pts, Rgb c, float width) {
  if (pts.empty()) return;
  // Coverage of each pixel is the most any segment gives it, then one blend: joints
  // between segments are not drawn twice (which would darken their edges).
  const float half = std::max(0.5f, width * 0.5f);
  float fx0 = 1e30f, fy0 = 1e30f, fx1 = -1e30f, fy1 = -1e30f;
  for (const auto& [x, y] : pts) {
    if (!std::isfinite(x) || !std::isfinite(y)) continue;
    fx0 = std::min(fx0, x), fy0 = std::min(fy0, y), fx1 = std::max(fx1, x), fy1 = std::max(fy1, y);
  }
  if (fx0 > fx1) return;
  const int bx0 = std::max(cx0_, int(std::floor(fx0 - half - 1))), by0 = std::max(cy0_, int(std::floor(fy0 - half - 1)));
  const int bx1 = std::min(cx1_ - 1, int(std::ceil(fx1 + half + 1))), by1 = std::min(cy1_ - 1, int(std::ceil(fy1 + half + 1)));
  if (bx0 > bx1 || by0 > by1) return;
  const int bw = bx1 - bx0 + 1, bh = by1 - by0 + 1;
  std::vector<float> cov(size_t(bw) * bh, 0.0f);
  auto segment = [&](float ax, float ay, float bx, float by) {
    const int sx0 = std::max(bx0, int(std::floor(std::min(ax, bx) - half - 1)));
    const int sx1 = std::min(bx1, int(std::ceil(std::max(ax, bx) + half + 1)));
    const int sy0 = std::max(by0, int(std::floor(std::min(ay, by) - half - 1)));
    const int sy1 = std::min(by1, int(std::ceil(std::max(ay, by) + half + 1)));
    const float dx = bx - ax, dy = by - ay, len2 = dx * dx + dy * dy;
    for (int y = sy0; y <= sy1; ++y)
      for (int x = sx0; x <= sx1; ++x) {
        float t = len2 > 0 ? ((x - ax) * dx + (y - ay) * dy) / len2 : 0.0f;
        t = std::clamp(t, 0.0f, 1.0f);
        const float ex = x - (ax + t * dx), ey = y - (ay + t * dy);
        const float d = std::sqrt(ex * ex + ey * ey);
        const float a = std::clamp(half + 0.5f - d, 0.0f, 1.0f);
        float& cv = cov[size_t(y - by0) * bw + (x - bx0)];
        cv = std::max(cv, a);
      }
  };
  if (pts.size() == 1) segment(pts[0].first, pts[0].second, pts[0].first, pts[0].second);
  for (size_t i = 1; i < pts.size(); ++i) {
    const auto [ax, ay] = pts[i - 1];
    const auto [bx, by] = pts[i];
    if (std::isfinite(ax) && std::isfinite(ay) && std::isfinite(bx) && std::isfinite(by)) segment(ax, ay, bx, by);
  }
  for (int y = 0; y < bh; ++y)
    for (int x = 0; x < bw; ++x) blend(bx0 + x, by0 + y, c, cov[size_t(y) * bw + x]);
}

void Canvas::blit(const Canvas& src, int x, int y) {
  for (int sy = 0; sy < src.height(); ++sy)
    for (int sx = 0; sx < src.width(); ++sx) set(x + sx, y + sy, src.get(sx, sy));
}

void Canvas::write_png(const std::string& path) const {
  require(w_ > 0 && h_ > 0, path + ": cannot write an empty canvas as PNG");
  std::string bytes;
  auto sink = [](void* ctx, void* data, int size) {
    static_cast<std::string*>(ctx)->append(static_cast<const char*>(data), size_t(size));
  };
  if (!stbi_write_png_to_func(sink, &bytes, w_, h_, 3, px_.data(), w_ * 3))
    throw Error(path + ": PNG encoding failed (" + std::to_string(w_) + "x" + std::to_string(h_) + ")");
  write_file_atomic(path, bytes);
}

Canvas read_png(const std::string& path) {
  const Image img = convert_channels(read_image(path), 3);
  Canvas c(img.width, img.height);
  const size_t hw = size_t(img.width) * img.height;
  for (int y = 0; y < img.height; ++y)
    for (int x = 0; x < img.width; ++x) {
      const size_t p = size_t(y) * img.width + x;
      auto u8 = [](float v) { return uint8_t(std::lround(std::clamp(v, 0.0f, 1.0f) * 255.0f)); };
      c.set(x, y, {u8(img.pixels[p]), u8(img.pixels[hw + p]), u8(img.pixels[2 * hw + p])});
    }
  return c;
}

}  // namespace gmlp::plot
