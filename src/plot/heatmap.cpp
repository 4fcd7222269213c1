// A grid of small heatmaps on one symmetric diverging colour scale, with a colour bar.
#include <algorithm>
#include <cmath>
#include <cstdio>

#include "gmlp/error.h"
#include "gmlp/plot.h"

namespace gmlp::plot {

Canvas heatmap_grid(const std::vector<Heatmap>& maps, const HeatmapGridOptions& opt, HeatmapLayout* layout) {
  require(!maps.empty(), "heatmap_grid: no heatmaps to draw");
  int max_rows = 0, max_cols = 0;
  float vmax = opt.vmax;
  const bool auto_scale = !(vmax > 0);
  if (auto_scale) vmax = 0;
  for (const auto& m : maps) {
    require(m.rows > 0 && m.cols > 0 && m.values.size() == size_t(m.rows) * m.cols,
            "heatmap '" + m.title + "': " + std::to_string(m.values.size()) + " values for " + std::to_string(m.rows) +
                "x" + std::to_string(m.cols) + " cells");
    max_rows = std::max(max_rows, m.rows);
    max_cols = std::max(max_cols, m.cols);
    if (auto_scale)
      for (float v : m.values)
        if (std::isfinite(v)) vmax = std::max(vmax, std::abs(v));
  }
  if (!(vmax > 0)) vmax = 1;

  const int n = int(maps.size());
  const int columns = opt.columns > 0 ? std::min(opt.columns, n) : std::min(n, 6);
  const int grid_rows = (n + columns - 1) / columns;
  const int cell = opt.cell_px > 0 ? opt.cell_px
                                   : std::clamp(int(std::lround(150.0 / std::max(max_rows, max_cols))), 1, 32);
  const int cell_h = opt.cell_h > 0 ? opt.cell_h : cell;
  const int map_w = max_cols * cell, map_h = max_rows * cell_h;
  constexpr int kMargin = 20, kGap = 18, kTitleScale = 3, kTextScale = 2;
  // Heatmap titles in the larger font when they all fit over their maps.
  int title_w = 0;
  for (const auto& m : maps) title_w = std::max(title_w, Canvas::text_width(m.title, 2));
  const int kMapTitleScale = title_w <= std::max(map_w * 7 / 5, 120) ? 2 : 1;
  title_w = 0;
  for (const auto& m : maps) title_w = std::max(title_w, Canvas::text_width(m.title, kMapTitleScale));
  const int slot_w = std::max(map_w, title_w), map_title_h = Canvas::text_height("A", kMapTitleScale) + 6;
  const int slot_h = map_title_h + map_h;

  // Header.
  int header = kMargin;
  if (!opt.title.empty()) header += Canvas::text_height(opt.title, kTitleScale) + 8;
  if (!opt.subtitle.empty()) header += Canvas::text_height(opt.subtitle, kTextScale) + 8;
  if (header > kMargin) header += 6;

  // Colour bar to the right: the bar, its tick labels, its label (rotated).
  auto label = [](float v) {
    char b[32];
    std::snprintf(b, sizeof b, "%.3g", double(v));
    return std::string(b);
  };
  const std::string ticks[5] = {label(vmax), label(vmax / 2), "0", label(-vmax / 2), label(-vmax)};
  int tick_w = 0;
  for (const auto& t : ticks) tick_w = std::max(tick_w, Canvas::text_width(t, kTextScale));
  const int bar_w = 16;
  const int bar_block = kGap + bar_w + 8 + tick_w + (opt.colorbar_label.empty() ? 0 : 12 + Canvas::text_height(opt.colorbar_label, kTextScale));

  const int grid_w = columns * slot_w + (columns - 1) * kGap;
  const int grid_h = grid_rows * slot_h + (grid_rows - 1) * kGap;
  int width = kMargin + grid_w + bar_block + kMargin;
  if (!opt.title.empty()) width = std::max(width, 2 * kMargin + Canvas::text_width(opt.title, kTitleScale));
  if (!opt.subtitle.empty()) width = std::max(width, 2 * kMargin + Canvas::text_width(opt.subtitle, kTextScale));
  const int bar_h = std::max(std::min(grid_h - map_title_h, 320), 100);
  const int height = header + std::max(grid_h, bar_h + map_title_h) + kMargin;
  Canvas cv(width, height);
  if (layout) {
    layout->origin.clear();
    layout->cell_w = cell;
    layout->cell_h = cell_h;
    layout->vmax = vmax;
  }

  int ty = kMargin;
  if (!opt.title.empty()) {
    cv.text((width - Canvas::text_width(opt.title, kTitleScale)) / 2, ty, opt.title, kBlack, kTitleScale);
    ty += Canvas::text_height(opt.title, kTitleScale) + 8;
  }
  if (!opt.subtitle.empty())
    cv.text((width - Canvas::text_width(opt.subtitle, kTextScale)) / 2, ty, opt.subtitle, Rgb{70, 70, 70}, kTextScale);

  for (int k = 0; k < n; ++k) {
    const Heatmap& m = maps[k];
    const int sx = kMargin + (k % columns) * (slot_w + kGap), sy = header + (k / columns) * (slot_h + kGap);
    const int mw = m.cols * cell, mh = m.rows * cell_h;
    const int mx = sx + (slot_w - mw) / 2, my = sy + map_title_h;
    if (layout) layout->origin.push_back({mx, my});
    cv.text(sx + (slot_w - Canvas::text_width(m.title, kMapTitleScale)) / 2, sy, m.title, kBlack, kMapTitleScale);
    for (int r = 0; r < m.rows; ++r)
      for (int c = 0; c < m.cols; ++c)
        cv.fill_rect(mx + c * cell, my + r * cell_h, cell, cell_h, diverging(m.values[size_t(r) * m.cols + c] / vmax));
    cv.rect(mx - 1, my - 1, mw + 2, mh + 2, Rgb{150, 150, 150});
    // Marks: a black box with a white inner line, at least 7 px so small cells show.
    for (const auto& [r, c] : m.marks) {
      if (r < 0 || r >= m.rows || c < 0 || c >= m.cols) continue;
      const int sw = std::max(cell, 7), sh = std::max(cell_h, 7);
      const int x0 = mx + c * cell + cell / 2 - sw / 2, y0 = my + r * cell_h + cell_h / 2 - sh / 2;
      const int thick = std::min(cell, cell_h) >= 10 ? 1 : 0;  // a 2 px black line on large cells
      cv.rect(x0 - 1, y0 - 1, sw + 2, sh + 2, kBlack, 1 + thick);
      cv.rect(x0 + thick, y0 + thick, sw - 2 * thick, sh - 2 * thick, kWhite, 1);
    }
  }

  // Colour bar: +vmax at the top, -vmax at the bottom.
  const int bx = kMargin + grid_w + kGap, by = header + map_title_h;
  for (int y = 0; y < bar_h; ++y) {
    const float t = 1.0f - 2.0f * float(y) / float(bar_h - 1);
    cv.fill_rect(bx, by + y, bar_w, 1, diverging(t));
  }
  cv.rect(bx - 1, by - 1, bar_w + 2, bar_h + 2, Rgb{150, 150, 150});
  for (int i = 0; i < 5; ++i) {
    const int y = by + int(std::lround(i * (bar_h - 1) / 4.0));
    cv.fill_rect(bx + bar_w, y, 4, 1, kBlack);
    cv.text(bx + bar_w + 8, y - Canvas::text_height("0", kTextScale) / 2, ticks[i], kBlack, kTextScale);
  }
  if (!opt.colorbar_label.empty())
    cv.text_up(bx + bar_w + 8 + tick_w + 10, by + (bar_h - Canvas::text_width(opt.colorbar_label, kTextScale)) / 2,
               opt.colorbar_label, kBlack, kTextScale);
  return cv;
}

}  // namespace gmlp::plot
