// gmlp convert: timm gMLP checkpoints <-> gmlp.cpp checkpoints (docs/timm.md).
#include <cstdio>
#include <memory>
#include <vector>

#include "commands.h"
#include "gmlp/checkpoint.h"
#include "gmlp/error.h"
#include "gmlp/timm.h"

namespace gmlp::cli {
namespace {

struct ConvertArgs {
  std::string from_timm, to_timm, out, prefix;
  int image_size = 0, image_height = 0, image_width = 0;
  float norm_eps = 1e-6f;
  std::vector<float> mean, std;
};

void print_summary(const ModelConfig& c, const std::string& from, const std::string& to, size_t params) {
  std::printf("%s -> %s\n  %d blocks, d %d, d_ffn %d, n %d (%dx%d image, %dx%d patches, %d channels), %d classes, "
              "%zu parameters\n",
              from.c_str(), to.c_str(), c.n_layers, c.d_model, c.d_ffn, c.seq_len, c.image_height, c.image_width,
              c.patch_height, c.patch_width, c.image_channels, c.n_classes, params);
}

int run_convert(const ConvertArgs& a) {
  require(a.from_timm.empty() != a.to_timm.empty(), "convert: give exactly one of --from-timm and --to-timm");
  const char* eps_note =
      "  note: timm's LayerNorm eps is 1e-6 in blocks.*.norm and norm but 1e-5 in the gate's norm; "
      "this model uses %g for all of them (docs/timm.md)\n";
  if (!a.from_timm.empty()) {
    TimmImportOptions opt;
    require(a.image_size == 0 || (a.image_height == 0 && a.image_width == 0),
            "convert: give --image-size or --image-height/--image-width, not both");
    opt.image_height = a.image_size ? a.image_size : a.image_height;
    opt.image_width = a.image_size ? a.image_size : a.image_width;
    opt.norm_eps = a.norm_eps;
    opt.prefix = a.prefix;
    require(a.mean.empty() == a.std.empty(), "convert: --mean and --std go together");
    if (!a.mean.empty()) opt.normalization = {{"mean", a.mean}, {"std", a.std}};
    auto model = load_timm_gmlp(a.from_timm, opt);
    save_model(*model, a.out);
    print_summary(model->config(), a.from_timm, a.out, model->num_params());
    std::printf(eps_note, double(model->config().norm_eps));
    return 0;
  }
  require(a.image_size == 0 && a.image_height == 0 && a.image_width == 0 && a.prefix.empty() && a.mean.empty(),
          "convert: --image-size, --image-height, --image-width, --prefix, --mean and --std are for --from-timm");
  auto model = load_model(resolve_model_path(a.to_timm));
  save_timm_gmlp(*model, a.out);
  print_summary(model->config(), a.to_timm, a.out, model->num_params());
  std::printf(eps_note, double(model->config().norm_eps));
  return 0;
}

}  // namespace

void add_convert(CLI::App& app, int& exit_code) {
  auto a = std::make_shared<ConvertArgs>();
  auto* c = app.add_subcommand("convert", "Convert vision gMLP checkpoints from and to timm's names (docs/timm.md)");
  c->add_option("--from-timm", a->from_timm, "timm gMLP state_dict (.safetensors) to import");
  c->add_option("--to-timm", a->to_timm, "gmlp.cpp vision checkpoint (file or run directory) to export");
  c->add_option("--out", a->out, "Output .safetensors (written atomically)")->required();
  c->add_option("--image-size", a->image_size, "--from-timm: square image side in pixels (default: inferred)")
      ->check(CLI::PositiveNumber);
  c->add_option("--image-height", a->image_height, "--from-timm: image height in pixels (default: inferred)")
      ->check(CLI::PositiveNumber);
  c->add_option("--image-width", a->image_width, "--from-timm: image width in pixels (default: inferred)")
      ->check(CLI::PositiveNumber);
  c->add_option("--norm-eps", a->norm_eps, "--from-timm: the LayerNorm eps of the imported model")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  c->add_option("--prefix", a->prefix, "--from-timm: prefix of every tensor name (e.g. \"module.\")");
  c->add_option("--mean", a->mean, "--from-timm: per-channel input mean to store, e.g. 0.5,0.5,0.5")->delimiter(',');
  c->add_option("--std", a->std, "--from-timm: per-channel input std to store, e.g. 0.5,0.5,0.5")->delimiter(',');
  c->callback([a, &exit_code] { exit_code = run_convert(*a); });
}

}  // namespace gmlp::cli
