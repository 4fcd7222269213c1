#pragma once
// A small raster plotting library: an RGB canvas with a built-in 5x7 bitmap font,
// antialiased lines, rectangles and colormaps, written as PNG (stb_image_write); and two
// figures on top of it: line charts (training curves) and grids of heatmaps (spatial
// weights). No dependencies beyond stb; every failure is a gmlp::Error naming the file.
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace gmlp::plot {

struct Rgb {
  uint8_t r = 0, g = 0, b = 0;
  bool operator==(const Rgb&) const = default;
};

inline constexpr Rgb kWhite{255, 255, 255};
inline constexpr Rgb kBlack{0, 0, 0};
inline constexpr Rgb kGray{128, 128, 128};
inline constexpr Rgb kLightGray{225, 225, 225};

// Distinct line colours (matplotlib's tab10); palette(i) cycles.
Rgb palette(int i);
// t in [-1, 1] (clamped): blue (-1) .. white (0) .. red (+1), ColorBrewer RdBu. NaN: gray.
Rgb diverging(float t);
// t in [0, 1] (clamped): viridis, dark purple .. yellow. NaN: gray.
Rgb sequential(float t);

// An RGB image, row-major, origin top-left. Drawing outside the canvas (or outside the
// clip rectangle) is ignored.
class Canvas {
 public:
  Canvas() = default;
  Canvas(int width, int height, Rgb background = kWhite);
  int width() const { return w_; }
  int height() const { return h_; }
  const std::vector<uint8_t>& data() const { return px_; }  // [h, w, 3]

  Rgb get(int x, int y) const;  // Error outside the canvas
  void set(int x, int y, Rgb c);
  // Mixes c into the pixel with weight alpha in [0, 1].
  void blend(int x, int y, Rgb c, float alpha);

  // Restricts drawing to [x0, x1) x [y0, y1); clear_clip() restores the whole canvas.
  void set_clip(int x0, int y0, int x1, int y1);
  void clear_clip();

  void fill_rect(int x, int y, int w, int h, Rgb c);
  void rect(int x, int y, int w, int h, Rgb c, int thickness = 1);  // outline, inside the box
  // Antialiased line of the given width in pixels between pixel-centre coordinates.
  void line(float x0, float y0, float x1, float y1, Rgb c, float width = 1.0f);
  void polyline(const std::vector<std::pair<float, float>>& pts, Rgb c, float width = 1.0f);
  // Dashed horizontal / vertical lines (1 px) for grids.
  void hline(int x0, int x1, int y, Rgb c);
  void vline(int x, int y0, int y1, Rgb c);

  // Text in the built-in font, top-left at (x, y); each glyph is 5x7 (plus a descender
  // row) in a 6x10 cell, times `scale`. '\n' starts a new line; characters outside
  // printable ASCII draw as '?'.
  void text(int x, int y, const std::string& s, Rgb c, int scale = 1);
  // Text rotated 90 degrees counter-clockwise (reads bottom to top), its bounding box's
  // top-left at (x, y): text_height wide and text_width tall.
  void text_up(int x, int y, const std::string& s, Rgb c, int scale = 1);
  static int text_width(const std::string& s, int scale = 1);   // of the longest line
  static int text_height(const std::string& s, int scale = 1);  // all lines
  // Copies `src` with its top-left at (x, y).
  void blit(const Canvas& src, int x, int y);

  // Error naming the path when it cannot be written.
  void write_png(const std::string& path) const;

 private:
  bool visible(int x, int y) const { return x >= cx0_ && x < cx1_ && y >= cy0_ && y < cy1_; }
  int w_ = 0, h_ = 0;
  int cx0_ = 0, cy0_ = 0, cx1_ = 0, cy1_ = 0;
  std::vector<uint8_t> px_;
};

// Reads a PNG (any image stb_image reads) as an 8-bit RGB canvas; gray images are
// replicated. Error naming the path.
Canvas read_png(const std::string& path);

// Formats a tick value for a step of `step` between ticks: integers without decimals,
// enough decimals to tell neighbouring ticks apart, k/M suffixes for large round
// numbers, exponent form for tiny ones.
std::string format_tick(double v, double step);
// About `target` "nice" tick positions (1, 2, 5 x 10^k apart) covering [lo, hi].
std::vector<double> nice_ticks(double lo, double hi, int target = 6);

struct Series {
  std::string name;
  std::vector<double> x, y;  // same length; NaN / inf points are skipped (break the line)
  bool markers = false;      // also draw a dot at every point (good for sparse series)
};

struct Chart {
  std::string title, xlabel, ylabel;
  std::vector<Series> series;
  bool log_y = false;  // log10 y axis (positive values only)
  // A fixed x range (both finite), e.g. to align stacked panels; else the data's, padded.
  double x_min = 0, x_max = 0;
  bool fixed_x = false;
  // The y axis never extends past these (its padding is cut there), e.g. [0, 1] for accuracy.
  double y_min_limit = -1e300, y_max_limit = 1e300;
};

// Draws a chart into the box (x, y, w, h) of the canvas: title, axes with tick labels and
// grid, axis labels, the series, and a legend (top right, inside the plot area) when
// any series has a name. An empty chart draws "no data".
void draw_chart(Canvas& canvas, int x, int y, int w, int h, const Chart& chart);
// One chart on a canvas of its own.
Canvas line_chart(const Chart& chart, int width = 900, int height = 540);
// Charts stacked vertically, each `panel_height` tall, their plot areas aligned.
Canvas line_charts(const std::vector<Chart>& charts, int width = 900, int panel_height = 480);

struct Heatmap {
  std::string title;
  int rows = 0, cols = 0;
  std::vector<float> values;               // [rows, cols]
  std::vector<std::pair<int, int>> marks;  // (row, col) cells to outline
};

struct HeatmapGridOptions {
  std::string title;           // above the whole figure
  std::string subtitle;        // a second, smaller line under the title
  int columns = 0;             // heatmaps per row; 0: up to 6
  int cell_px = 0;             // pixels per cell; 0: about 150 px a side, 1..32 a cell
  int cell_h = 0;              // cell height when it differs (1-row strips); 0: cell_px
  float vmax = 0;              // colour scale [-vmax, vmax]; 0: the largest |value| of all
  std::string colorbar_label;  // beside the colour bar
};

// A grid of heatmaps with a shared symmetric diverging scale (blue < 0 < red) and a
// colour bar; marked cells are outlined in black and white so they show on any colour.
// New rows of the grid start every `columns` heatmaps.
// Where things landed, for callers that annotate the figure (and tests): heatmap k's cell
// (r, c) covers [x + c * cell_w, +cell_w) x [y + r * cell_h, +cell_h) with (x, y) = origin[k].
struct HeatmapLayout {
  std::vector<std::pair<int, int>> origin;
  int cell_w = 0, cell_h = 0;
  float vmax = 0;  // the colour scale used
};
Canvas heatmap_grid(const std::vector<Heatmap>& maps, const HeatmapGridOptions& opt, HeatmapLayout* layout = nullptr);

}  // namespace gmlp::plot
