// The plot library (canvas, font, colormaps, PNG round trip, ticks, line charts,
// heatmap grids: checked on decoded pixels, not just "a file exists") and the
// `gmlp plot metrics` / `gmlp plot spatial` commands end to end.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>

#include "gmlp/checkpoint.h"
#include "gmlp/error.h"
#include "gmlp/plot.h"
#include "test_util.h"

namespace gmlp {
namespace {

namespace fs = std::filesystem;
using plot::Canvas;
using plot::Rgb;
using test::error_of;
using test::run_command;
using test::TempDir;

struct Box {
  int n = 0;
  double cx = 0, cy = 0;
  int x0 = 1 << 30, y0 = 1 << 30, x1 = -1, y1 = -1;
};
// The pixels of exactly colour c (optionally only those whose neighbours r px away in
// all four directions are c too: the inside of a block, not a 1-px line or a gradient).
Box find_colour(const Canvas& cv, Rgb c, int r = 0) {
  Box b;
  auto is = [&](int x, int y) { return x >= 0 && y >= 0 && x < cv.width() && y < cv.height() && cv.get(x, y) == c; };
  for (int y = 0; y < cv.height(); ++y)
    for (int x = 0; x < cv.width(); ++x) {
      if (!is(x, y)) continue;
      if (r > 0 && !(is(x - r, y) && is(x + r, y) && is(x, y - r) && is(x, y + r))) continue;
      ++b.n;
      b.cx += x, b.cy += y;
      b.x0 = std::min(b.x0, x), b.y0 = std::min(b.y0, y), b.x1 = std::max(b.x1, x), b.y1 = std::max(b.y1, y);
    }
  if (b.n) b.cx /= b.n, b.cy /= b.n;
  return b;
}

TEST(Plot, Colormaps) {
  EXPECT_EQ(plot::diverging(0), plot::kWhite);
  const Rgb neg = plot::diverging(-1), pos = plot::diverging(1);
  EXPECT_GT(neg.b, neg.r + 80);  // blue
  EXPECT_GT(pos.r, pos.b + 80);  // red
  EXPECT_EQ(plot::diverging(-5), neg);  // clamped
  EXPECT_EQ(plot::diverging(7), pos);
  EXPECT_EQ(plot::diverging(NAN), plot::kGray);
  // Monotone towards the ends: less red as t falls below 0, less blue (and green) as it rises.
  for (float t = 0; t < 1; t += 0.05f) {
    EXPECT_GE(plot::diverging(t).r, plot::diverging(t + 0.05f).r) << t;
    EXPECT_GE(plot::diverging(t).b, plot::diverging(t + 0.05f).b) << t;
    EXPECT_GE(plot::diverging(-t).r, plot::diverging(-t - 0.05f).r) << t;
  }
  EXPECT_EQ(plot::sequential(0), (Rgb{68, 1, 84}));
  EXPECT_EQ(plot::sequential(1), (Rgb{253, 231, 37}));
  EXPECT_EQ(plot::sequential(-1), plot::sequential(0));
  int prev = -1;  // viridis brightens monotonically (sum of channels as a proxy)
  for (float t = 0; t <= 1.0001f; t += 0.1f) {
    const Rgb c = plot::sequential(t);
    EXPECT_GT(c.r + c.g + c.b, prev) << t;
    prev = c.r + c.g + c.b;
  }
  EXPECT_NE(plot::palette(0), plot::palette(1));
  EXPECT_EQ(plot::palette(10), plot::palette(0));
}

TEST(Plot, TicksAndLabels) {
  EXPECT_EQ(plot::nice_ticks(0, 10, 5), (std::vector<double>{0, 2, 4, 6, 8, 10}));
  EXPECT_EQ(plot::nice_ticks(13, 2387, 5), (std::vector<double>{500, 1000, 1500, 2000}));
  const auto t = plot::nice_ticks(-0.3, 0.3, 6);
  ASSERT_FALSE(t.empty());
  for (size_t i = 1; i < t.size(); ++i) EXPECT_NEAR(t[i] - t[i - 1], 0.1, 1e-12);
  EXPECT_EQ(plot::format_tick(t[3], 0.1), "0");  // no "-0.0"
  EXPECT_EQ(plot::format_tick(1500, 500), "1500");
  EXPECT_EQ(plot::format_tick(25000, 5000), "25k");
  EXPECT_EQ(plot::format_tick(2500, 500), "2500");
  EXPECT_EQ(plot::format_tick(1.5e6, 5e5), "1.5M");
  EXPECT_EQ(plot::format_tick(0.25, 0.05), "0.25");
  EXPECT_EQ(plot::format_tick(1.2, 0.2), "1.2");
  EXPECT_EQ(plot::format_tick(3e-7, 1e-7), "3.0e-07");
}

TEST(Plot, FontDrawsInsideItsBoxAndScales) {
  for (int scale : {1, 3}) {
    Canvas cv(200, 100);
    const std::string s = "Loss 0.25\nstep (k)";
    cv.text(10, 20, s, plot::kBlack, scale);
    const Box b = find_colour(cv, plot::kBlack);
    ASSERT_GT(b.n, 0);
    EXPECT_GE(b.x0, 10);
    EXPECT_GE(b.y0, 20);
    EXPECT_LT(b.x1, 10 + Canvas::text_width(s, scale));
    EXPECT_LT(b.y1, 20 + Canvas::text_height(s, scale));
    EXPECT_GT(b.x1, 10 + Canvas::text_width(s, scale) - 6 * scale);  // the box is tight
  }
  EXPECT_EQ(Canvas::text_width("abc"), 17);
  EXPECT_EQ(Canvas::text_width("abc", 2), 34);
  EXPECT_EQ(Canvas::text_width("a\nlonger"), 35);
  EXPECT_EQ(Canvas::text_width(""), 0);
  // Different glyphs differ; unknown characters draw as '?'.
  auto pixels = [](const std::string& s) {
    Canvas cv(20, 20);
    cv.text(2, 2, s, plot::kBlack);
    return cv.data();
  };
  EXPECT_NE(pixels("0"), pixels("8"));
  EXPECT_NE(pixels("l"), pixels("1"));
  EXPECT_EQ(pixels("\x7f"), pixels("?"));
  // Rotated text occupies a text_height x text_width box.
  Canvas up(100, 100);
  up.text_up(5, 5, "axis", plot::kBlack, 2);
  const Box r = find_colour(up, plot::kBlack);
  EXPECT_LT(r.x1 - r.x0, Canvas::text_height("axis", 2));
  EXPECT_GT(r.y1 - r.y0, Canvas::text_width("axis", 2) - 12);
}

TEST(Plot, ShapesAndClipping) {
  Canvas cv(40, 30);
  cv.fill_rect(5, 5, 10, 4, {1, 2, 3});
  EXPECT_EQ(find_colour(cv, {1, 2, 3}).n, 40);
  cv.rect(20, 10, 10, 10, {9, 9, 9}, 2);
  EXPECT_EQ(find_colour(cv, {9, 9, 9}).n, 100 - 36);
  // A horizontal 1-px line on pixel centres is one crisp row.
  cv.line(2, 25, 37, 25, {200, 0, 0});
  const Box l = find_colour(cv, {200, 0, 0});
  EXPECT_EQ(l.y0, 25);
  EXPECT_EQ(l.y1, 25);
  EXPECT_EQ(l.x0, 2);
  EXPECT_EQ(l.x1, 37);
  // Clipping, and drawing off the canvas, are harmless.
  cv.set_clip(0, 0, 10, 10);
  cv.fill_rect(-100, -100, 1000, 1000, {7, 7, 7});
  EXPECT_EQ(find_colour(cv, {7, 7, 7}).n, 100);
  cv.clear_clip();
  cv.line(-50, -50, 500, 500, {7, 7, 7}, 3);
  EXPECT_NE(error_of([&] { cv.get(40, 0); }).find("outside the 40x30 canvas"), std::string::npos);
}

TEST(Plot, PngRoundTripAndWriteError) {
  TempDir dir("png");
  Canvas cv(31, 17, {10, 20, 30});
  for (int x = 0; x < 31; ++x) cv.set(x, x % 17, {uint8_t(8 * x), 255, uint8_t(255 - 8 * x)});
  cv.write_png(dir.file("a.png"));
  const Canvas back = plot::read_png(dir.file("a.png"));
  ASSERT_EQ(back.width(), 31);
  ASSERT_EQ(back.height(), 17);
  EXPECT_EQ(back.data(), cv.data());
  const std::string bad = dir.file("no/such/dir/a.png");
  EXPECT_NE(error_of([&] { cv.write_png(bad); }).find(bad), std::string::npos);
}

TEST(Plot, HeatmapColoursFollowTheValues) {
  plot::Heatmap a{"a", 2, 3, {1.0f, -1.0f, 0.0f, 0.5f, -0.5f, 0.25f}, {{1, 2}}};
  plot::Heatmap b{"b", 2, 3, {-2.0f, 0, 0, 0, 0, 2.0f}, {}};
  plot::HeatmapGridOptions opt;
  opt.title = "Two maps";
  opt.colorbar_label = "value";
  plot::HeatmapLayout lay;
  const Canvas cv = plot::heatmap_grid({a, b}, opt, &lay);
  ASSERT_EQ(lay.origin.size(), 2u);
  EXPECT_EQ(lay.vmax, 2.0f);  // the largest |value| of all maps: a shared scale
  EXPECT_EQ(lay.cell_w, 32);  // about 150 px for the longer side, at most 32 a cell
  // Every cell's centre has the colour of value / vmax.
  for (int k = 0; k < 2; ++k) {
    const auto& m = k == 0 ? a : b;
    for (int r = 0; r < 2; ++r)
      for (int c = 0; c < 3; ++c) {
        const int x = lay.origin[k].first + c * lay.cell_w + lay.cell_w / 2;
        const int y = lay.origin[k].second + r * lay.cell_h + lay.cell_h / 2;
        if (k == 0 && r == 1 && c == 2) continue;  // the mark's white line may cross the centre
        EXPECT_EQ(cv.get(x, y), plot::diverging(m.values[r * 3 + c] / 2.0f)) << k << " " << r << " " << c;
      }
  }
  // The marked cell is outlined in black, its middle still shows its colour.
  const int mx = lay.origin[0].first + 2 * lay.cell_w, my = lay.origin[0].second + 1 * lay.cell_h;
  EXPECT_EQ(cv.get(mx, my + lay.cell_h / 2), plot::kBlack);
  EXPECT_EQ(cv.get(mx + 5, my + 5), plot::diverging(0.125f));
  // The second map sits to the right of the first, same row.
  EXPECT_GT(lay.origin[1].first, lay.origin[0].first + 3 * lay.cell_w);
  EXPECT_EQ(lay.origin[1].second, lay.origin[0].second);
  // A colour bar: both ends' colours appear right of the maps.
  const Box top = find_colour(cv, plot::diverging(1));
  EXPECT_GT(top.x1, lay.origin[1].first + 3 * lay.cell_w);
  // A fixed scale and columns = 1 stack the maps.
  opt.vmax = 4;
  opt.columns = 1;
  opt.cell_px = 7;
  const Canvas stacked = plot::heatmap_grid({a, b}, opt, &lay);
  EXPECT_EQ(lay.cell_w, 7);
  EXPECT_EQ(lay.origin[1].first, lay.origin[0].first);
  EXPECT_GT(lay.origin[1].second, lay.origin[0].second + 2 * 7);
  EXPECT_EQ(stacked.get(lay.origin[0].first + 3, lay.origin[0].second + 3), plot::diverging(0.25f));
  // Bad input.
  plot::Heatmap wrong{"w", 2, 2, {1, 2, 3}, {}};
  EXPECT_NE(error_of([&] { plot::heatmap_grid({wrong}, {}); }).find("heatmap 'w': 3 values for 2x2 cells"),
            std::string::npos);
  EXPECT_NE(error_of([&] { plot::heatmap_grid({}, {}); }).find("no heatmaps"), std::string::npos);
}

TEST(Plot, LineChartPutsHigherValuesHigher) {
  plot::Chart ch;
  ch.title = "Two flat lines";
  ch.xlabel = "step";
  ch.ylabel = "loss";
  ch.series = {{"low", {0, 100}, {1, 1}, false}, {"high", {0, 100}, {2, 2}, false}};
  const Canvas cv = plot::line_chart(ch, 600, 400);
  EXPECT_EQ(cv.width(), 600);
  EXPECT_EQ(cv.height(), 400);
  const Box low = find_colour(cv, plot::palette(0)), high = find_colour(cv, plot::palette(1));
  ASSERT_GT(low.n, 300);  // a long line (and a short legend sample)
  ASSERT_GT(high.n, 300);
  // Most of each line's pixels lie on one row; the "high" line is above the "low" one.
  EXPECT_LT(high.cy + 50, low.cy);
  EXPECT_GT(low.x1 - low.x0, 400);  // spans the plot width
  // Several panels stack; a series with NaN gaps and an empty chart draw without error.
  plot::Chart gap;
  gap.series = {{"g", {0, 1, 2, 3}, {1, NAN, 3, 4}, true}};
  plot::Chart empty;
  empty.title = "nothing";
  const Canvas two = plot::line_charts({ch, gap, empty}, 500, 300);
  EXPECT_EQ(two.height(), 900);
  plot::Chart bad;
  bad.series = {{"bad", {0, 1}, {1}, false}};
  EXPECT_NE(error_of([&] { plot::line_chart(bad); }).find("chart series 'bad': 2 x values but 1 y values"),
            std::string::npos);
  // Log axis: decades.
  plot::Chart lg;
  lg.log_y = true;
  lg.series = {{"decay", {0, 1, 2, 3}, {1000, 100, 10, 1}, false}};
  const Canvas l = plot::line_chart(lg, 500, 300);
  const Box d = find_colour(l, plot::palette(0));
  EXPECT_GT(d.y1 - d.y0, 150);  // a straight diagonal across the plot
}

// ---------------------------------------------------------------- the CLI

std::string gmlp() { return test::gmlp_exe(); }

void write_text(const std::string& path, const std::string& s) {
  std::ofstream f(path);
  f << s;
}

TEST(PlotCli, MetricsCurvesWithAndWithoutAccuracy) {
  TempDir dir("plotcli");
  std::string log;
  for (int s = 10; s <= 200; s += 10) {
    log += "{\"step\":" + std::to_string(s) + ",\"loss\":" + std::to_string(3.0 / std::sqrt(s)) +
           ",\"lr\":0.001,\"grad_norm\":1.0,\"tokens_per_s\":1000,\"elapsed_s\":1}\n";
    if (s % 50 == 0) log += "{\"step\":" + std::to_string(s) + ",\"val_loss\":" + std::to_string(4.0 / std::sqrt(s)) + "}\n";
  }
  write_text(dir.file("metrics.jsonl"), log);
  auto r = run_command(gmlp() + " plot metrics --log " + dir.file("metrics.jsonl") + " --out " + dir.file("c.png"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("20 train, 4 val points"), std::string::npos) << r.output;
  Canvas c = plot::read_png(dir.file("c.png"));
  EXPECT_EQ(c.width(), 900);
  EXPECT_EQ(c.height(), 480);  // one panel
  EXPECT_GT(find_colour(c, plot::palette(0)).n, 200);  // train curve
  EXPECT_GT(find_colour(c, plot::palette(1)).n, 50);   // validation curve
  // Accuracy fields add a second panel; a run directory stands for its log.
  log += "{\"step\":200,\"val_loss\":0.2,\"val_acc\":0.9}\n{\"step\":100,\"val_acc\":0.5}\n";
  write_text(dir.file("metrics.jsonl"), log);
  r = run_command(gmlp() + " plot metrics --log " + dir.path().string());
  ASSERT_EQ(r.exit_code, 0) << r.output;
  c = plot::read_png(dir.file("curves.png"));
  EXPECT_EQ(c.height(), 960);
  EXPECT_NE(r.output.find("1 accuracy series"), std::string::npos) << r.output;
  // Errors: a missing log, a malformed line (not the last), no plottable fields.
  r = run_command(gmlp() + " plot metrics --log " + dir.file("nope.jsonl") + " --out " + dir.file("x.png"));
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.output.find(dir.file("nope.jsonl") + ": cannot open metrics log"), std::string::npos) << r.output;
  write_text(dir.file("bad.jsonl"), "{\"step\":1,\"loss\":2}\n{oops\n{\"step\":2,\"loss\":1}\n");
  r = run_command(gmlp() + " plot metrics --log " + dir.file("bad.jsonl") + " --out " + dir.file("x.png"));
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.output.find(dir.file("bad.jsonl") + ":2: not a JSON object"), std::string::npos) << r.output;
  write_text(dir.file("cut.jsonl"), "{\"step\":1,\"loss\":2}\n{\"step\":2,\"loss\":1}\n{\"step\":3,\"lo");
  r = run_command(gmlp() + " plot metrics --log " + dir.file("cut.jsonl") + " --out " + dir.file("x.png"));
  EXPECT_EQ(r.exit_code, 0) << r.output;  // a crash-cut last line is skipped with a warning
  EXPECT_NE(r.output.find("incomplete last line"), std::string::npos) << r.output;
  write_text(dir.file("none.jsonl"), "{\"step\":1,\"lr\":2}\n");
  r = run_command(gmlp() + " plot metrics --log " + dir.file("none.jsonl") + " --out " + dir.file("x.png"));
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.output.find("no \"loss\", \"val_loss\" or accuracy fields"), std::string::npos) << r.output;
}

// A small vision model: 8x8 gray images in 2x2 patches, a 4x4 grid, n = 16.
ModelConfig vision_config() {
  ModelConfig c;
  c.task = Task::vision;
  c.vocab_size = 0;
  c.tokenizer = nullptr;
  c.n_classes = 10;
  c.image_channels = 1;
  c.image_height = 8;
  c.image_width = 8;
  c.patch_height = 2;
  c.patch_width = 2;
  c.seq_len = 16;
  c.d_model = 8;
  c.d_ffn = 16;
  c.n_layers = 2;
  return c;
}

TEST(PlotCli, SpatialRowsOnThePatchGrid) {
  TempDir dir("plotsp");
  const ModelConfig cfg = vision_config();
  Model m(cfg);
  Rng rng(3);
  m.init(rng);
  // Layer 1: W[i, i] = +1, W[i, i+1] = -1, everything else 0.
  const ParamInfo& p = m.param("blocks.1.sgu.spatial.weight");
  float* w = m.weights() + p.offset;
  std::fill(w, w + p.size, 0.0f);
  for (int i = 0; i < 16; ++i) {
    w[i * 16 + i] = 1.0f;
    if (i + 1 < 16) w[i * 16 + i + 1] = -1.0f;
  }
  save_model(m, dir.file("model.safetensors"));
  const std::string out = dir.file("figs");
  auto r = run_command(gmlp() + " plot spatial --model " + dir.file("model.safetensors") + " --out " + out +
                       " --layers 1 --tokens 5");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  ASSERT_TRUE(fs::exists(out + "/spatial_layer1.png")) << r.output;
  EXPECT_FALSE(fs::exists(out + "/spatial_layer0.png"));
  const Canvas c = plot::read_png(out + "/spatial_layer1.png");
  // Row 5 of W on the 4x4 grid: +1 at (1, 1) (token 5 itself), -1 at (1, 2).
  const Box red = find_colour(c, plot::diverging(1), 4), blue = find_colour(c, plot::diverging(-1), 4);
  ASSERT_GT(red.n, 300) << "no red cell";
  ASSERT_GT(blue.n, 300) << "no blue cell";
  EXPECT_LT(red.cx, blue.cx);                 // -1 is one cell to the right
  EXPECT_NEAR(red.cy, blue.cy, 3.0);          // on the same grid row
  EXPECT_NEAR(blue.cx - red.cx, 32, 3);       // one cell (150 px / 4 cells, capped at 32 px) apart
  // The default: every layer, several tokens each.
  r = run_command(gmlp() + " plot spatial --model " + dir.path().string() + "/model.safetensors --out " + out);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_TRUE(fs::exists(out + "/spatial_layer0.png"));
  const Canvas all = plot::read_png(out + "/spatial_layer1.png");
  EXPECT_GT(all.height(), c.height());  // a 3x3 arrangement of maps
  // Errors.
  r = run_command(gmlp() + " plot spatial --model " + dir.file("model.safetensors") + " --out " + out + " --layers 2");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.output.find("--layers: layer 2 is out of range (the model has 2 layers"), std::string::npos) << r.output;
  r = run_command(gmlp() + " plot spatial --model " + dir.file("model.safetensors") + " --out " + out + " --tokens 16");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.output.find("--tokens: token position 16 is out of range"), std::string::npos) << r.output;
  r = run_command(gmlp() + " plot spatial --model " + dir.file("model.safetensors") + " --out " + out + " --layers x");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.output.find("'x' is not an integer"), std::string::npos) << r.output;
  r = run_command(gmlp() + " plot spatial --out " + out);
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.output.find("--model"), std::string::npos) << r.output;
  r = run_command(gmlp() + " plot spatial --model " + dir.file("missing.safetensors") + " --out " + out);
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.output.find("missing.safetensors"), std::string::npos) << r.output;
}

TEST(PlotCli, SpatialWithoutSguIsAClearError) {
  TempDir dir("plotnone");
  ModelConfig cfg = vision_config();
  cfg.sgu = Sgu::none;
  Model m(cfg);
  Rng rng(1);
  m.init(rng);
  save_model(m, dir.file("m.safetensors"));
  auto r = run_command(gmlp() + " plot spatial --model " + dir.file("m.safetensors") + " --out " + dir.file("o"));
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.output.find(dir.file("m.safetensors") + ": sgu is \"none\": the model has no spatial weights"),
            std::string::npos)
      << r.output;
}

TEST(PlotCli, SpatialTokenModelsToeplitzAndHeads) {
  TempDir dir("plottok");
  // A causal LM: W itself, the masked upper triangle gray.
  ModelConfig lm;
  lm.d_model = 8, lm.d_ffn = 16, lm.n_layers = 1, lm.seq_len = 12;
  {
    Model m(lm);
    Rng rng(1);
    m.init(rng);
    save_model(m, dir.file("lm.safetensors"));
  }
  auto r = run_command(gmlp() + " plot spatial --model " + dir.file("lm.safetensors") + " --out " + dir.file("lm"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const Canvas lmc = plot::read_png(dir.file("lm/spatial_layer0.png"));
  const Box gray = find_colour(lmc, plot::kGray, 2);
  EXPECT_GT(gray.n, 12 * 11 / 2 * 16);  // 66 masked cells of at least 5x5 interior pixels
  // Rows as strips.
  r = run_command(gmlp() + " plot spatial --model " + dir.file("lm.safetensors") + " --out " + dir.file("lm") +
                  " --tokens 0,11");
  ASSERT_EQ(r.exit_code, 0) << r.output;

  // Bidirectional Toeplitz, 2 heads, on a vision grid: head 0's w has +1 at offset 0
  // (the diagonal), head 1's has -1 at offset i - j = 1 (the cell left of i).
  ModelConfig tv = vision_config();
  tv.spatial = Spatial::toeplitz;
  tv.sgu_heads = 2;
  tv.n_layers = 1;
  Model m(tv);
  Rng rng(2);
  m.init(rng);
  const ParamInfo& p = m.param("blocks.0.sgu.spatial.weight");
  ASSERT_EQ(p.shape, (std::vector<int64_t>{2, 31}));
  float* w = m.weights() + p.offset;
  std::fill(w, w + p.size, 0.0f);
  w[15] = 1.0f;            // head 0: W[i, i]
  w[31 + 15 + 1] = -1.0f;  // head 1: W[i, i - 1]
  save_model(m, dir.file("tv.safetensors"));
  r = run_command(gmlp() + " plot spatial --model " + dir.file("tv.safetensors") + " --out " + dir.file("tv") +
                  " --tokens 5");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const Canvas tc = plot::read_png(dir.file("tv/spatial_layer0.png"));
  const Box red = find_colour(tc, plot::diverging(1), 4), blue = find_colour(tc, plot::diverging(-1), 4);
  ASSERT_GT(red.n, 300);
  ASSERT_GT(blue.n, 300);
  EXPECT_GT(blue.cy, red.cy + 50);  // head 1 is the second row of maps
  EXPECT_LT(blue.cx, red.cx);       // and its -1 is one cell left of token 5
}

}  // namespace
}  // namespace gmlp
