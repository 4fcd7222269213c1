#pragma once
// Each subcommand registers itself on the app; main() runs the one chosen and turns
// gmlp::Error into a message and a non-zero exit (the only place that exits).
#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "gmlp/checkpoint.h"
#include "gmlp/model.h"

namespace gmlp {
struct TrainOptions;
struct TrainSummary;
}

namespace gmlp::cli {

// Each returns the process exit code of the command when it ran.
void add_train(CLI::App& app, int& exit_code);
void add_finetune(CLI::App& app, int& exit_code);
void add_classify(CLI::App& app, int& exit_code);  // classify and classify-image
void add_ablate(CLI::App& app, int& exit_code);
void add_generate(CLI::App& app, int& exit_code);
void add_eval(CLI::App& app, int& exit_code);
void add_inspect(CLI::App& app, int& exit_code);
void add_bench(CLI::App& app, int& exit_code);
void add_plot(CLI::App& app, int& exit_code);
void add_tokenizer(CLI::App& app, int& exit_code);
void add_baseline(CLI::App& app, int& exit_code);
void add_convert(CLI::App& app, int& exit_code);  // timm gMLP checkpoints <-> ours

// gmlp eval for classify and vision checkpoints: top-1 and the confusion matrix.
int run_classifier_eval(Model& model, const std::string& data, int batch, bool json);

// "model.d_model=256" into a RunConfig JSON; the value is parsed as JSON when it can be.
void apply_set(nlohmann::json& j, const std::string& kv);

// --device on a command that runs a model: cpu, cuda or auto (the default: cuda when
// this build has the CUDA backend and a device is visible, else cpu).
void add_device_option(CLI::App* c, std::string& device, std::string& precision);
// The device the two options name, with its backend set to that precision. Error naming
// what cannot be done (no GPU, bf16 on the CPU).
gmlp::Device choose_device(const std::string& device, const std::string& precision);
// --grid KEY=V1,V2 (repeatable): the search of gmlp/search.h over base (the run's
// options), with refit after choosing; prints its table (rank 0).
int run_grid(const std::vector<std::string>& specs, const gmlp::TrainOptions& base, bool overwrite, bool refit);
// What a finished (or interrupted) run says on stdout; the caller is rank 0.
void print_summary(const gmlp::TrainSummary& s, const std::string& out, const std::string& task);

}  // namespace gmlp::cli
