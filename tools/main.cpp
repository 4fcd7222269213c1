// gmlp: train, fine-tune, evaluate, sample from and inspect every gMLP model of the paper.
#include <cstdio>
#include <exception>

#include "commands.h"
#include "gmlp/comm.h"
#include "gmlp/device.h"
#include "gmlp/error.h"
#include "gmlp/threads.h"

namespace {
// Prints the error; with several ranks, names this one and ends the whole job, since
// the others may be waiting for it in a collective.
int fail(int code, const char* kind, const char* what) {
  if (gmlp::world_started() && gmlp::world().size() > 1) {
    std::fprintf(stderr, "gmlp: %s: rank %d: %s\n", kind, gmlp::world().rank(), what);
    std::fflush(stderr);
    gmlp::world().abort(code);
  }
  std::fprintf(stderr, "gmlp: %s: %s\n", kind, what);
  return code;
}
}  // namespace

int main(int argc, char** argv) {
  gmlp::choose_omp_wait_policy(argv);
  CLI::App app{"gmlp: gMLP (Pay Attention to MLPs) in C++ -- language models, masked LMs, classifiers and vision models: "
                "train, finetune, generate, eval, classify, ablate, plot, inspect, bench, convert"};
  app.require_subcommand(1);
  app.set_help_all_flag("--help-all", "Show help for every subcommand");
  int threads = 0;
  app.add_option("--threads", threads, "Threads for BLAS and OpenMP (default: all cores)")->check(CLI::NonNegativeNumber);
  int exit_code = 0;
  gmlp::cli::add_train(app, exit_code);
  gmlp::cli::add_finetune(app, exit_code);
  gmlp::cli::add_classify(app, exit_code);
  gmlp::cli::add_ablate(app, exit_code);
  gmlp::cli::add_generate(app, exit_code);
  gmlp::cli::add_eval(app, exit_code);
  gmlp::cli::add_inspect(app, exit_code);
  gmlp::cli::add_bench(app, exit_code);
  gmlp::cli::add_plot(app, exit_code);
  gmlp::cli::add_tokenizer(app, exit_code);
  gmlp::cli::add_baseline(app, exit_code);
  gmlp::cli::add_convert(app, exit_code);
  // One thread pool: BLAS (OpenMP build) and our loops share libgomp's threads.
  app.parse_complete_callback([&] {
    gmlp::set_threads(threads);
    gmlp::cpu_gemm();  // a bad GMLP_CPU_GEMM stops the run here, before anything is written
  });
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  } catch (const gmlp::Error& e) {
    return fail(1, "error", e.what());
  } catch (const std::exception& e) {
    return fail(2, "internal error", e.what());
  }
  return exit_code;
}
