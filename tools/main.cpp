// gmlp: train, sample from and inspect gMLP language models.
#include <cblas.h>
#include <omp.h>

#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <exception>

#include "commands.h"
#include "gmlp/error.h"

namespace {

// libgomp's default lets idle threads spin before sleeping. On the small virtual
// machines we run on, a spinning vCPU gets descheduled by the hypervisor and a step of
// the default model took 1.1 s instead of 0.13 s (measured with the bench in docs/).
// The policy is read once, when libgomp loads, so when the user has not chosen one we
// set it and re-execute ourselves before any thread exists.
void ensure_passive_omp_wait(char** argv) {
  if (std::getenv("OMP_WAIT_POLICY") || std::getenv("GOMP_SPINCOUNT")) return;
  setenv("OMP_WAIT_POLICY", "PASSIVE", 1);
  execv("/proc/self/exe", argv);  // returns only on failure: then run as we are
}

}  // namespace

int main(int argc, char** argv) {
  ensure_passive_omp_wait(argv);
  CLI::App app{"gmlp: gMLP (Pay Attention to MLPs) in C++ -- train, generate, eval, inspect"};
  app.require_subcommand(1);
  app.set_help_all_flag("--help-all", "Show help for every subcommand");
  int threads = 0;
  app.add_option("--threads", threads, "Threads for BLAS and OpenMP (default: all cores)")->check(CLI::NonNegativeNumber);
  int exit_code = 0;
  gmlp::cli::add_train(app, exit_code);
  gmlp::cli::add_generate(app, exit_code);
  gmlp::cli::add_eval(app, exit_code);
  gmlp::cli::add_inspect(app, exit_code);
  // One thread pool: BLAS (OpenMP build) and our loops share libgomp's threads.
  app.parse_complete_callback([&] {
    if (threads > 0) {
      omp_set_num_threads(threads);
      openblas_set_num_threads(threads);
    }
  });
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  } catch (const gmlp::Error& e) {
    std::fprintf(stderr, "gmlp: error: %s\n", e.what());
    return 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "gmlp: internal error: %s\n", e.what());
    return 2;
  }
  return exit_code;
}
