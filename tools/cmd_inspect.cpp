// gmlp inspect: what a checkpoint holds -- its config and every tensor with its count.
#include <cstdio>

#include "commands.h"
#include "gmlp/checkpoint.h"
#include "gmlp/safetensors.h"

namespace gmlp::cli {
namespace {

int run_inspect(const std::string& arg) {
  const auto file = SafeTensorsFile::load(resolve_model_path(arg));
  const ModelConfig cfg = read_model_config(file);
  std::printf("%s\nconfig:\n%s\n", file.path().c_str(), cfg.to_json().dump(2).c_str());
  auto st = file.metadata().find("gmlp.train_state");
  if (st != file.metadata().end()) {
    const auto meta = nlohmann::json::parse(st->second, nullptr, false);
    if (meta.is_object()) std::printf("training state at step %lld\n", (long long)meta.value("step", int64_t(0)));
  }
  size_t width = 6;
  for (const auto& n : file.names()) width = std::max(width, n.size());
  std::printf("\n%-*s  %-6s %-16s %12s\n", int(width), "tensor", "dtype", "shape", "params");
  int64_t total = 0;
  for (const auto& n : file.names()) {
    const auto& t = file.info(n);
    std::string shape = "[";
    int64_t count = 1;
    for (size_t i = 0; i < t.shape.size(); ++i) {
      shape += (i ? ", " : "") + std::to_string(t.shape[i]);
      count *= t.shape[i];
    }
    shape += "]";
    total += count;
    std::printf("%-*s  %-6s %-16s %12lld\n", int(width), n.c_str(), t.dtype.c_str(), shape.c_str(), (long long)count);
  }
  std::printf("%-*s  %-6s %-16s %12lld\n", int(width), "total", "", "", (long long)total);
  // A model file must also load as a model: this catches missing or mis-shaped tensors.
  if (st == file.metadata().end()) {
    Model m(cfg);
    load_weights(m, file);
  }
  return 0;
}

}  // namespace

void add_inspect(CLI::App& app, int& exit_code) {
  auto path = std::make_shared<std::string>("runs/default");
  auto* c = app.add_subcommand("inspect", "Show a checkpoint's config and per-tensor parameter counts");
  c->add_option("checkpoint", *path, "Checkpoint file or run directory")->capture_default_str();
  c->callback([path, &exit_code] { exit_code = run_inspect(*path); });
}

}  // namespace gmlp::cli
