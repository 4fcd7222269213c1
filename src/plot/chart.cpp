// Line charts: nice ticks, axes, grid, series, legend.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>

#include "gmlp/error.h"
#include "gmlp/plot.h"

namespace gmlp::plot {

std::vector<double> nice_ticks(double lo, double hi, int target) {
  std::vector<double> ticks;
  if (!std::isfinite(lo) || !std::isfinite(hi) || target < 1) return ticks;
  if (hi < lo) std::swap(lo, hi);
  if (hi == lo) return {lo};
  const double raw = (hi - lo) / target;
  const double mag = std::pow(10.0, std::floor(std::log10(raw)));
  const double norm = raw / mag;
  const double step = (norm < 1.5 ? 1 : norm < 3 ? 2 : norm < 7 ? 5 : 10) * mag;
  const double eps = step * 1e-9;
  for (double k = std::ceil((lo - eps) / step);; k += 1) {
    double v = k * step;
    if (v > hi + eps) break;
    if (std::abs(v) < eps) v = 0;  // no "-0"
    ticks.push_back(v);
    if (ticks.size() > 1000) break;
  }
  return ticks;
}

std::string format_tick(double v, double step) {
  char buf[64];
  step = std::abs(step);
  if (!(step > 0) || !std::isfinite(step)) step = std::abs(v) > 0 ? std::abs(v) : 1;
  if (std::abs(v) < step * 1e-6) return "0";
  // Large round numbers: 25k, 1.5M (k from 10k on, so steps up to 9999 print plainly).
  for (const auto& [unit, suffix] : {std::pair<double, const char*>{1e6, "M"}, {1e3, "k"}}) {
    if (step >= unit / 10 && std::abs(v) >= (unit == 1e3 ? 1e4 : unit)) {
      const double u = v / unit, s = step / unit;
      const int dec = std::max(0, int(-std::floor(std::log10(s) + 1e-9)));
      std::snprintf(buf, sizeof buf, "%.*f%s", std::min(dec, 3), u, suffix);
      return buf;
    }
  }
  const int dec = std::max(0, int(-std::floor(std::log10(step) + 1e-9)));
  if (dec > 5 || std::abs(v) >= 1e7) {
    std::snprintf(buf, sizeof buf, "%.1e", v);
    return buf;
  }
  std::snprintf(buf, sizeof buf, "%.*f", dec, v);
  return buf;
}

namespace {

constexpr int kTitleScale = 3, kLabelScale = 2, kTickScale = 2, kLegendScale = 2;

struct Range {
  double lo = std::numeric_limits<double>::infinity(), hi = -std::numeric_limits<double>::infinity();
  void add(double v) {
    if (!std::isfinite(v)) return;
    lo = std::min(lo, v);
    hi = std::max(hi, v);
  }
  bool empty() const { return !(lo <= hi); }
};

// Ticks for a log10 axis whose transformed range is [lo, hi]: powers of ten, else
// 1-2-5 or 1..9 times powers of ten, whichever first gives enough ticks, else linear
// nice ticks. Returned in data units.
std::vector<double> log_ticks(double lo, double hi) {
  auto multiples = [&](std::initializer_list<double> ms) {
    std::vector<double> t;
    for (double e = std::floor(lo); e <= std::ceil(hi); e += 1)
      for (double m : ms) {
        const double v = m * std::pow(10.0, e), l = std::log10(v);
        if (l >= lo - 1e-9 && l <= hi + 1e-9) t.push_back(v);
      }
    return t;
  };
  if (hi - lo >= 1.5) {
    auto t = multiples({1.0});
    if (t.size() >= 2) return t;
  }
  for (auto ms : {std::initializer_list<double>{1, 2, 5}, std::initializer_list<double>{1, 2, 3, 4, 5, 6, 7, 8, 9}}) {
    auto t = multiples(ms);
    if (t.size() >= 4 && t.size() <= 12) return t;
  }
  std::vector<double> t;
  for (double v : nice_ticks(std::pow(10.0, lo), std::pow(10.0, hi), 5))
    if (v > 0) t.push_back(v);
  return t;
}

}  // namespace

namespace {

// Draws the chart (or with measure, only works out the layout) and returns the width of
// the margin left of the plot area; min_left widens it (to align stacked panels).
int draw_chart_impl(Canvas& cv, int bx, int by, int bw, int bh, const Chart& chart, int min_left, bool measure) {
  const Rgb ink{40, 40, 40};
  cv.clear_clip();
  // Data ranges (y in the axis' transformed units).
  auto ty = [&](double v) { return chart.log_y ? (v > 0 ? std::log10(v) : std::numeric_limits<double>::quiet_NaN()) : v; };
  Range xr, yr;
  for (const auto& s : chart.series) {
    require(s.x.size() == s.y.size(), "chart series '" + s.name + "': " + std::to_string(s.x.size()) + " x values but " +
                                          std::to_string(s.y.size()) + " y values");
    for (size_t i = 0; i < s.x.size(); ++i)
      if (std::isfinite(s.x[i]) && std::isfinite(ty(s.y[i]))) {
        xr.add(s.x[i]);
        yr.add(ty(s.y[i]));
      }
  }

  // Title.
  int top = by + 10;
  if (!chart.title.empty()) {
    if (!measure)
      cv.text(bx + (bw - Canvas::text_width(chart.title, kTitleScale)) / 2, top, chart.title, kBlack, kTitleScale);
    top += Canvas::text_height(chart.title, kTitleScale) + 12;
  } else {
    top += 4;
  }
  if (xr.empty()) {
    const std::string msg = "no data";
    if (!measure) cv.text(bx + (bw - Canvas::text_width(msg, kLabelScale)) / 2, by + bh / 2, msg, kGray, kLabelScale);
    return 0;
  }
  if (chart.fixed_x && std::isfinite(chart.x_min) && std::isfinite(chart.x_max) && chart.x_max > chart.x_min) {
    xr.lo = chart.x_min, xr.hi = chart.x_max;
  } else if (xr.hi == xr.lo) {
    xr.lo -= 1, xr.hi += 1;
  }
  {  // room for markers and line ends at the edges
    const double pad = (xr.hi - xr.lo) * 0.02;
    xr.lo -= pad, xr.hi += pad;
  }
  const double data_lo = yr.lo, data_hi = yr.hi;
  if (yr.hi == yr.lo) {
    const double pad = std::max(std::abs(yr.hi) * 0.1, chart.log_y ? 0.1 : 1e-3);
    yr.lo -= pad, yr.hi += pad;
  }
  {  // a little air above and below the data
    const double pad = (yr.hi - yr.lo) * 0.05;
    yr.lo -= pad, yr.hi += pad;
  }
  {  // ... but not past the chart's limits (data outside them stays in view)
    const double lo_limit = ty(chart.y_min_limit), hi_limit = ty(chart.y_max_limit);
    if (!std::isnan(lo_limit)) yr.lo = std::max(yr.lo, std::min(lo_limit, data_lo));
    if (!std::isnan(hi_limit)) yr.hi = std::min(yr.hi, std::max(hi_limit, data_hi));
  }
  const std::vector<double> xt = nice_ticks(xr.lo, xr.hi, std::max(2, bw / 130));
  std::vector<double> yt = chart.log_y ? log_ticks(yr.lo, yr.hi) : nice_ticks(yr.lo, yr.hi, std::max(2, bh / 70));
  const double xstep = xt.size() > 1 ? xt[1] - xt[0] : std::abs(xr.hi - xr.lo);
  std::vector<std::string> ylabels;
  int ylabel_w = 0;
  for (size_t i = 0; i < yt.size(); ++i) {
    double step;
    if (chart.log_y) {
      // Enough decimals to tell this tick from its neighbours.
      const double prev = i > 0 ? yt[i - 1] : yt[i] / 10, next = i + 1 < yt.size() ? yt[i + 1] : yt[i] * 10;
      step = std::min(yt[i] - prev, next - yt[i]);
      step = std::pow(10.0, std::floor(std::log10(step)));
    } else {
      step = yt.size() > 1 ? yt[1] - yt[0] : std::abs(yr.hi - yr.lo);
    }
    ylabels.push_back(format_tick(yt[i], step));
    ylabel_w = std::max(ylabel_w, Canvas::text_width(ylabels.back(), kTickScale));
  }

  // Plot area: room for the y label (rotated), tick labels, x tick labels and x label.
  const int tick = 5;
  int left = bx + 12 + ylabel_w + tick + 6;
  if (!chart.ylabel.empty()) left += Canvas::text_height(chart.ylabel, kLabelScale) + 10;
  left = std::max(left, bx + min_left);
  if (measure) return left - bx;
  int bottom = by + bh - 10 - (tick + 6 + Canvas::text_height("0", kTickScale));
  if (!chart.xlabel.empty()) bottom -= Canvas::text_height(chart.xlabel, kLabelScale) + 10;
  const int right = bx + bw - 24;
  const int pw = right - left, ph = bottom - top;
  if (pw < 20 || ph < 20) {
    cv.text(bx + 4, by + 4, "chart too small", kGray, 1);
    return left - bx;
  }
  auto px = [&](double x) { return float(left + (x - xr.lo) / (xr.hi - xr.lo) * (pw - 1)); };
  auto py = [&](double yv) { return float(bottom - 1 - (yv - yr.lo) / (yr.hi - yr.lo) * (ph - 1)); };

  // Grid and ticks.
  for (size_t i = 0; i < xt.size(); ++i) {
    const int x = int(std::lround(px(xt[i])));
    cv.vline(x, top, bottom - 1, kLightGray);
    cv.fill_rect(x, bottom, 1, tick, ink);
    const std::string l = format_tick(xt[i], xstep);
    int lx = x - Canvas::text_width(l, kTickScale) / 2;
    lx = std::clamp(lx, bx, bx + bw - Canvas::text_width(l, kTickScale));
    cv.text(lx, bottom + tick + 4, l, ink, kTickScale);
  }
  for (size_t i = 0; i < yt.size(); ++i) {
    const int y = int(std::lround(py(chart.log_y ? std::log10(yt[i]) : yt[i])));
    cv.hline(left, right - 1, y, kLightGray);
    cv.fill_rect(left - tick, y, tick, 1, ink);
    cv.text(left - tick - 4 - Canvas::text_width(ylabels[i], kTickScale), y - Canvas::text_height("0", kTickScale) / 2 + 1,
            ylabels[i], ink, kTickScale);
  }
  // Axis labels.
  if (!chart.xlabel.empty())
    cv.text(left + (pw - Canvas::text_width(chart.xlabel, kLabelScale)) / 2,
            bottom + tick + 6 + Canvas::text_height("0", kTickScale) + 8, chart.xlabel, kBlack, kLabelScale);
  if (!chart.ylabel.empty())
    cv.text_up(bx + 10, top + (ph - Canvas::text_width(chart.ylabel, kLabelScale)) / 2, chart.ylabel, kBlack, kLabelScale);

  // Series, clipped to the plot area.
  cv.set_clip(left, top, right, bottom);
  for (size_t si = 0; si < chart.series.size(); ++si) {
    const Series& s = chart.series[si];
    const Rgb col = palette(int(si));
    std::vector<std::pair<float, float>> run;
    auto flush = [&] {
      if (!run.empty()) cv.polyline(run, col, 2.0f);
      run.clear();
    };
    for (size_t i = 0; i < s.x.size(); ++i) {
      const double yv = ty(s.y[i]);
      if (!std::isfinite(s.x[i]) || !std::isfinite(yv)) {
        flush();
        continue;
      }
      run.emplace_back(px(s.x[i]), py(yv));
      if (s.markers) cv.line(px(s.x[i]), py(yv), px(s.x[i]), py(yv), col, 5.0f);
    }
    flush();
  }
  cv.clear_clip();
  // Axes box.
  cv.rect(left - 1, top - 1, pw + 2, ph + 2, ink);

  // Legend, in the corner of the plot area that covers the fewest points.
  std::vector<const Series*> named;
  for (const auto& s : chart.series)
    if (!s.name.empty()) named.push_back(&s);
  if (named.empty()) return left - bx;
  const int sample = 22, pad = 8, row_h = Canvas::text_height("Ag", kLegendScale) + 8;
  int text_w = 0;
  for (const auto* s : named) text_w = std::max(text_w, Canvas::text_width(s->name, kLegendScale));
  const int lw = pad + sample + 8 + text_w + pad, lh = pad + int(named.size()) * row_h - 8 + pad;
  struct Corner {
    int x, y;
  };
  const Corner corners[4] = {{right - lw - 8, top + 8}, {right - lw - 8, bottom - lh - 8}, {left + 8, top + 8},
                             {left + 8, bottom - lh - 8}};
  int best = 0;
  size_t best_hits = std::numeric_limits<size_t>::max();
  for (int k = 0; k < 4; ++k) {
    size_t hits = 0;
    for (const auto& s : chart.series)
      for (size_t i = 0; i < s.x.size(); ++i) {
        const double yv = ty(s.y[i]);
        if (!std::isfinite(s.x[i]) || !std::isfinite(yv)) continue;
        const float X = px(s.x[i]), Y = py(yv);
        if (X >= corners[k].x - 4 && X <= corners[k].x + lw + 4 && Y >= corners[k].y - 4 && Y <= corners[k].y + lh + 4)
          ++hits;
      }
    if (hits < best_hits) best_hits = hits, best = k;
  }
  const int lx = corners[best].x, ly = corners[best].y;
  cv.fill_rect(lx, ly, lw, lh, kWhite);
  cv.rect(lx, ly, lw, lh, Rgb{170, 170, 170});
  for (size_t i = 0; i < named.size(); ++i) {
    const int si = int(named[i] - chart.series.data());
    const int ry = ly + pad + int(i) * row_h;
    const int mid = ry + Canvas::text_height("A", kLegendScale) / 2;
    cv.line(float(lx + pad), float(mid), float(lx + pad + sample), float(mid), palette(si), 2.0f);
    cv.text(lx + pad + sample + 8, ry, named[i]->name, ink, kLegendScale);
  }
  return left - bx;
}

}  // namespace

void draw_chart(Canvas& cv, int bx, int by, int bw, int bh, const Chart& chart) {
  draw_chart_impl(cv, bx, by, bw, bh, chart, 0, false);
}

Canvas line_chart(const Chart& chart, int width, int height) {
  Canvas c(width, height);
  draw_chart(c, 0, 0, width, height, chart);
  return c;
}

Canvas line_charts(const std::vector<Chart>& charts, int width, int panel_height) {
  require(!charts.empty(), "line_charts: no charts to draw");
  Canvas c(width, panel_height * int(charts.size()));
  // One left margin for all panels, so their plot areas (and step axes) line up.
  int left = 0;
  for (const auto& ch : charts) left = std::max(left, draw_chart_impl(c, 0, 0, width, panel_height, ch, 0, true));
  for (size_t i = 0; i < charts.size(); ++i)
    draw_chart_impl(c, 0, int(i) * panel_height, width, panel_height, charts[i], left, false);
  return c;
}

}  // namespace gmlp::plot
