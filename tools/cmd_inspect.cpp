// gmlp inspect: what a checkpoint holds -- its config and every tensor with its count.
#include <cstdio>
#include <cstdlib>

#include "commands.h"
#include "gmlp/checkpoint.h"
#include "gmlp/files.h"
#include "gmlp/safetensors.h"

namespace gmlp::cli {
namespace {

// A config file: the parameter table of the model it describes (no weights needed),
// e.g. to check the paper's gMLP-Ti/S/B sizes.
int inspect_config(const std::string& path) {
  const RunConfig rc = RunConfig::load(path);
  std::printf("%s\nconfig:\n%s\n", path.c_str(), rc.model.to_json().dump(2).c_str());
  const auto layout = param_layout(rc.model);
  size_t width = 6;
  for (const auto& p : layout) width = std::max(width, p.name.size());
  std::printf("\n%-*s  %-16s %12s\n", int(width), "tensor", "shape", "params");
  int64_t total = 0;
  for (const auto& p : layout) {
    std::string shape = "[";
    for (size_t i = 0; i < p.shape.size(); ++i) shape += (i ? ", " : "") + std::to_string(p.shape[i]);
    shape += "]";
    total += int64_t(p.size);
    // 30-layer models: the blocks after the first two are the same; show them once.
    if (p.name.rfind("blocks.", 0) == 0 && std::atoi(p.name.c_str() + 7) >= 2) continue;
    std::printf("%-*s  %-16s %12lld\n", int(width), p.name.c_str(), shape.c_str(), (long long)p.size);
  }
  if (rc.model.n_layers > 2) std::printf("%-*s\n", int(width), "(blocks.2 .. blocks.N-1 as blocks.1)");
  std::printf("%-*s  %-16s %12lld  (%.2fM)\n", int(width), "total", "", (long long)total, double(total) / 1e6);
  return 0;
}

int run_inspect(const std::string& arg) {
  if (arg.size() > 5 && arg.compare(arg.size() - 5, 5, ".json") == 0) return inspect_config(arg);
  const auto file = SafeTensorsFile::load(resolve_model_path(arg));
  const ModelConfig cfg = read_model_config(file);
  nlohmann::json shown = cfg.to_json();
  // A SentencePiece model is ~200 KB of base64: say how big instead of printing it.
  if (shown.contains("tokenizer") && shown["tokenizer"].contains("model"))
    shown["tokenizer"]["model"] = "<" + std::to_string(shown["tokenizer"]["model"].get<std::string>().size()) +
                                  " bytes of base64>";
  std::printf("%s\nconfig:\n%s\n", file.path().c_str(), shown.dump(2).c_str());
  auto st = file.metadata().find("gmlp.train_state");
  if (st != file.metadata().end()) {
    try {
      const auto meta = parse_json(st->second, file.path() + ": training state");
      std::printf("training state at step %lld\n", (long long)meta.at("step").get<int64_t>());
    } catch (const std::exception&) {
      std::printf("training state: unreadable metadata\n");
    }
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
  std::printf("%-*s  %-6s %-16s %12lld  (%.2fM)\n", int(width), "total", "", "", (long long)total,
              double(total) / 1e6);
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
  auto* c = app.add_subcommand("inspect", "Show a checkpoint's (or a config file's) per-tensor parameter counts");
  c->add_option("checkpoint", *path, "Checkpoint file, run directory, or a JSON config file")->capture_default_str();
  c->callback([path, &exit_code] { exit_code = run_inspect(*path); });
}

}  // namespace gmlp::cli
