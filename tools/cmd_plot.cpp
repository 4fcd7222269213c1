// gmlp plot: PNG figures of a run.
//   plot metrics  training and validation loss (and any accuracy) against the step, from
//                 the trainer's metrics.jsonl
//   plot spatial  the learned spatial weights W of chosen layers: for vision models, rows
//                 of W on the patch grid; for token models, W itself (or rows as strips)
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>

#include "commands.h"
#include "gmlp/checkpoint.h"
#include "gmlp/error.h"
#include "gmlp/files.h"
#include "gmlp/plot.h"

namespace gmlp::cli {
namespace {

namespace fs = std::filesystem;

// ---------------------------------------------------------------- metrics

struct MetricsArgs {
  std::string log = "runs/default/metrics.jsonl";
  std::string out;
  std::string title;
  bool log_y = false;
  int width = 900, panel_height = 480;
};

bool is_accuracy_key(const std::string& k) {
  return k.find("acc") != std::string::npos || k.find("top1") != std::string::npos ||
         k.find("top5") != std::string::npos || k.find("top_1") != std::string::npos ||
         k.find("top_5") != std::string::npos;
}

int run_plot_metrics(MetricsArgs a) {
  // A run directory stands for its metrics.jsonl.
  if (fs::is_directory(a.log)) a.log = (fs::path(a.log) / "metrics.jsonl").string();
  std::ifstream in(a.log);
  require(in.good(), a.log + ": cannot open metrics log");
  plot::Series train{"train loss", {}, {}}, val{"val loss", {}, {}, true};
  std::map<std::string, plot::Series> acc;  // key -> series, sorted by name
  std::string line;
  int lineno = 0, records = 0;
  while (std::getline(in, line)) {
    ++lineno;
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    check_json_depth(line, a.log + ":" + std::to_string(lineno));
    nlohmann::json j = nlohmann::json::parse(line, nullptr, false);
    if (j.is_discarded() || !j.is_object()) {
      // A crash may cut the last line short; anything else malformed is an error.
      if (in.peek() == EOF) {
        std::fprintf(stderr, "gmlp plot: warning: %s:%d: skipping an incomplete last line\n", a.log.c_str(), lineno);
        break;
      }
      throw Error(a.log + ":" + std::to_string(lineno) + ": not a JSON object");
    }
    if (!j.contains("step") || !j["step"].is_number())
      throw Error(a.log + ":" + std::to_string(lineno) + ": no numeric \"step\"");
    ++records;
    const double step = j["step"].get<double>();
    for (const auto& [k, v] : j.items()) {
      if (!v.is_number()) continue;
      const double x = v.get<double>();
      if (k == "loss") {
        train.x.push_back(step), train.y.push_back(x);
      } else if (k == "val_loss") {
        val.x.push_back(step), val.y.push_back(x);
      } else if (is_accuracy_key(k)) {
        auto& s = acc[k];
        s.name = k;
        s.markers = true;
        s.x.push_back(step), s.y.push_back(x);
      }
    }
  }
  require(records > 0, a.log + ": no metrics records");
  require(!train.x.empty() || !val.x.empty() || !acc.empty(),
          a.log + ": no \"loss\", \"val_loss\" or accuracy fields to plot");

  // Every panel shares the step axis.
  double x0 = INFINITY, x1 = -INFINITY;
  auto span = [&](const plot::Series& s) {
    for (double x : s.x) x0 = std::min(x0, x), x1 = std::max(x1, x);
  };
  span(train), span(val);
  for (const auto& [k, s] : acc) span(s);
  if (!(x1 > x0)) x0 -= 1, x1 += 1;

  std::vector<plot::Chart> panels;
  if (!train.x.empty() || !val.x.empty()) {
    plot::Chart c;
    c.title = a.title.empty() ? "Loss: " + a.log : a.title;
    c.xlabel = "step";
    c.ylabel = "loss (nats)";
    c.log_y = a.log_y;
    if (!train.x.empty()) c.series.push_back(train);
    if (!val.x.empty()) {
      val.markers = val.x.size() <= 60;
      c.series.push_back(val);
    }
    panels.push_back(std::move(c));
  }
  if (!acc.empty()) {
    plot::Chart c;
    c.title = panels.empty() && !a.title.empty() ? a.title : "Accuracy";
    c.xlabel = "step";
    c.ylabel = "accuracy";
    bool fraction = true;  // accuracies in [0, 1] (not percent): the axis stops at 0 and 1
    for (auto& [k, s] : acc) {
      s.markers = s.x.size() <= 60;
      for (double y : s.y) fraction = fraction && y >= 0 && y <= 1;
      c.series.push_back(s);
    }
    if (fraction) c.y_min_limit = 0, c.y_max_limit = 1;
    panels.push_back(std::move(c));
  }
  for (auto& p : panels) p.fixed_x = true, p.x_min = x0, p.x_max = x1;
  if (a.out.empty()) a.out = (fs::path(a.log).parent_path() / "curves.png").string();
  plot::line_charts(panels, a.width, a.panel_height).write_png(a.out);
  std::printf("wrote %s (%zu train, %zu val points%s)\n", a.out.c_str(), train.x.size(), val.x.size(),
              acc.empty() ? "" : (", " + std::to_string(acc.size()) + " accuracy series").c_str());
  return 0;
}

// ---------------------------------------------------------------- spatial

struct SpatialArgs {
  std::string model;
  std::string out;
  std::string layers = "all";
  std::string tokens;
  float vmax = 0;
};

// "all" or a comma list of integers in [0, limit).
std::vector<int> parse_index_list(const std::string& s, int limit, const std::string& what, const std::string& unit) {
  std::vector<int> out;
  if (s == "all") {
    for (int i = 0; i < limit; ++i) out.push_back(i);
    return out;
  }
  std::stringstream ss(s);
  std::string item;
  while (std::getline(ss, item, ',')) {
    item.erase(0, item.find_first_not_of(" \t"));
    item.erase(item.find_last_not_of(" \t") + 1);
    size_t used = 0;
    long v = -1;
    try {
      v = std::stol(item, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    require(used == item.size() && !item.empty(),
            what + ": '" + item + "' is not an integer (expected \"all\" or a comma list like 0,3)");
    require(v >= 0 && v < limit, what + ": " + unit + " " + std::to_string(v) + " is out of range (the model has " +
                                     std::to_string(limit) + " " + unit + "s, 0.." + std::to_string(limit - 1) + ")");
    if (std::find(out.begin(), out.end(), int(v)) == out.end()) out.push_back(int(v));
  }
  require(!out.empty(), what + ": empty list");
  return out;
}

// Locality in numbers: the mean |W[i, j]| over pairs of patches at each Chebyshev
// distance on the grid (the paper's Figure 3 shows the weights of nearby patches
// standing out).
void print_locality(const std::vector<float>& W, int gh, int gw, const std::string& what) {
  const int n = gh * gw, far = std::max(gh, gw) - 1;
  std::vector<double> sum(size_t(far) + 1, 0.0);
  std::vector<int64_t> count(size_t(far) + 1, 0);
  for (int i = 0; i < n; ++i)
    for (int j = 0; j < n; ++j) {
      const int k = std::max(std::abs(i / gw - j / gw), std::abs(i % gw - j % gw));
      sum[size_t(k)] += std::fabs(W[size_t(i) * n + j]);
      ++count[size_t(k)];
    }
  std::printf("%s: mean |W[i,j]| at grid distance 0..%d:", what.c_str(), far);
  for (int k = 0; k <= far; ++k) std::printf(" %.4f", sum[size_t(k)] / double(count[size_t(k)]));
  std::printf("\n");
}

int run_plot_spatial(const SpatialArgs& a) {
  const std::string path = resolve_model_path(a.model);
  auto model = load_model(path);
  const ModelConfig& c = model->config();
  require(c.has_sgu(), path + ": sgu is \"none\": the model has no spatial weights to plot");
  const int n = c.seq_len, heads = c.sgu_heads;
  const bool vision = c.task == Task::vision;
  int gh = 1, gw = n;
  if (vision) {
    require(c.patch_height > 0 && c.patch_width > 0 && c.image_height % c.patch_height == 0 &&
                c.image_width % c.patch_width == 0,
            path + ": image " + std::to_string(c.image_height) + "x" + std::to_string(c.image_width) +
                " does not split into " + std::to_string(c.patch_height) + "x" + std::to_string(c.patch_width) +
                " patches");
    gh = c.image_height / c.patch_height;
    gw = c.image_width / c.patch_width;
    require(gh * gw == n, path + ": the patch grid " + std::to_string(gh) + "x" + std::to_string(gw) +
                              " does not hold seq_len = " + std::to_string(n) + " tokens");
  }
  const std::vector<int> layers = parse_index_list(a.layers, c.n_layers, "--layers", "layer");

  // Token positions: chosen, or spread over the grid (corners, edges' middles, centre).
  std::vector<int> tokens;
  if (!a.tokens.empty()) {
    tokens = parse_index_list(a.tokens, n, "--tokens", "token position");
  } else if (vision) {
    const std::vector<int> rows = {0, gh / 2, gh - 1}, cols = {0, gw / 2, gw - 1};
    std::vector<std::pair<int, int>> cells;
    if (heads == 1) {
      for (int r : rows)
        for (int col : cols) cells.push_back({r, col});
    } else {
      cells = {{gh / 2, gw / 2}, {0, 0}, {0, gw - 1}, {gh - 1, 0}, {gh - 1, gw - 1}};
    }
    for (const auto& [r, col] : cells) {
      const int t = r * gw + col;
      if (std::find(tokens.begin(), tokens.end(), t) == tokens.end()) tokens.push_back(t);
    }
  }

  fs::create_directories(a.out);
  for (int l : layers) {
    const std::string name = "blocks." + std::to_string(l) + ".sgu.spatial.weight";
    const ParamInfo& info = model->param(name);
    std::vector<plot::Heatmap> maps;
    plot::HeatmapGridOptions opt;
    opt.vmax = a.vmax;
    opt.colorbar_label = "W[i, j]";
    opt.title = "Spatial weights, layer " + std::to_string(l) + (heads > 1 ? " (" + std::to_string(heads) + " heads)" : "");
    std::string shape;
    for (size_t k = 0; k < info.shape.size(); ++k) shape += (k ? "x" : "") + std::to_string(info.shape[k]);
    const std::string kind = c.spatial == Spatial::full ? "" : (c.causal() ? ", causal Toeplitz" : ", Toeplitz");
    for (int h = 0; h < heads; ++h) {
      std::vector<float> W = dense_spatial_weights(*model, l, h);
      if (c.causal())  // the masked half is never read: blank (gray) rather than zeros
        for (int i = 0; i < n; ++i)
          for (int j = i + 1; j < n; ++j) W[size_t(i) * n + j] = NAN;
      const std::string hp = heads > 1 ? "h" + std::to_string(h) + " " : "";
      if (vision) print_locality(W, gh, gw, "layer " + std::to_string(l) + (heads > 1 ? " head " + std::to_string(h) : ""));
      if (vision) {
        for (int t : tokens) {
          plot::Heatmap m;
          m.title = hp + "i=" + std::to_string(t) + " (" + std::to_string(t / gw) + "," + std::to_string(t % gw) + ")";
          m.rows = gh;
          m.cols = gw;
          m.values.assign(W.begin() + size_t(t) * n, W.begin() + size_t(t + 1) * n);
          m.marks = {{t / gw, t % gw}};
          maps.push_back(std::move(m));
        }
      } else if (!tokens.empty()) {
        for (int t : tokens) {
          plot::Heatmap m;
          m.title = hp + "row i=" + std::to_string(t);
          m.rows = 1;
          m.cols = n;
          m.values.assign(W.begin() + size_t(t) * n, W.begin() + size_t(t + 1) * n);
          m.marks = {{0, t}};
          maps.push_back(std::move(m));
        }
      } else {
        plot::Heatmap m;
        m.title = heads > 1 ? "head " + std::to_string(h) : "W";
        m.rows = n;
        m.cols = n;
        m.values = W;
        maps.push_back(std::move(m));
      }
    }
    if (vision) {
      opt.subtitle = "row i of W (" + shape + kind + ") on the " + std::to_string(gh) + "x" + std::to_string(gw) +
                     " patch grid; the box marks token i";
      // One head: the default 3x3 picks, or up to 6 chosen in a row, or more laid out like
      // the grid itself; several heads: a row each.
      const int t = int(tokens.size());
      opt.columns = heads > 1 ? t : a.tokens.empty() ? 3 : t <= 6 ? t : gw;
    } else if (!tokens.empty()) {
      opt.subtitle = "rows of W (" + shape + kind + ") over input positions j = 0.." + std::to_string(n - 1) +
                     "; the box marks j = i" + (c.causal() ? "; gray: j > i (masked)" : "");
      opt.columns = 1;
      opt.cell_px = std::clamp(720 / n, 1, 24);
      opt.cell_h = 24;
    } else {
      opt.subtitle = "W[i, j] (" + shape + kind + "): row i = output position, column j = input position" +
                     (c.causal() ? "; gray: masked" : "");
      opt.columns = std::min(heads, 4);
      opt.cell_px = std::clamp(480 / n, 1, 16);
    }
    const std::string file = (fs::path(a.out) / ("spatial_layer" + std::to_string(l) + ".png")).string();
    plot::heatmap_grid(maps, opt).write_png(file);
    std::printf("wrote %s\n", file.c_str());
  }
  return 0;
}

}  // namespace

void add_plot(CLI::App& app, int& exit_code) {
  auto* p = app.add_subcommand("plot", "Draw PNG figures: training curves, learned spatial weights");
  p->require_subcommand(1);

  auto m = std::make_shared<MetricsArgs>();
  auto* cm = p->add_subcommand("metrics", "Train/validation loss (and any accuracy) against the step");
  cm->add_option("--log", m->log, "The trainer's metrics.jsonl (or its run directory)")->capture_default_str();
  cm->add_option("--out", m->out, "PNG to write (default: curves.png beside the log)");
  cm->add_option("--title", m->title, "Title of the loss panel (default: names the log)");
  cm->add_flag("--log-y", m->log_y, "Logarithmic loss axis");
  cm->add_option("--width", m->width, "Image width in pixels")->capture_default_str()->check(CLI::Range(300, 8000));
  cm->add_option("--panel-height", m->panel_height, "Height of each panel in pixels")
      ->capture_default_str()
      ->check(CLI::Range(200, 8000));
  cm->callback([m, &exit_code] { exit_code = run_plot_metrics(*m); });

  auto s = std::make_shared<SpatialArgs>();
  auto* cs = p->add_subcommand("spatial", "Heatmaps of the spatial weights W, one PNG per layer");
  cs->add_option("--model", s->model, "Checkpoint file or run directory")->required();
  cs->add_option("--out", s->out, "Folder for spatial_layer<L>.png")->required();
  cs->add_option("--layers", s->layers, "\"all\" or a comma list of layers, e.g. 0,3")->capture_default_str();
  cs->add_option("--tokens", s->tokens,
                 "Token positions i whose row of W to draw (comma list or \"all\"); default: vision models a few "
                 "spread over the grid incl. the centre, token models W itself");
  cs->add_option("--vmax", s->vmax, "Colour scale [-vmax, vmax] (default: each layer's largest |W|)")
      ->check(CLI::NonNegativeNumber);
  cs->callback([s, &exit_code] { exit_code = run_plot_spatial(*s); });
}

}  // namespace gmlp::cli
