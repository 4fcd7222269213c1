// The communicator of a run (gmlp/comm.h): this process alone, or MPI's world when an
// MPI launcher started the process. MPI's communicator is a module of its own
// (libgmlp_mpi.so, src/train/comm_mpi.cpp, built with GMLP_HAVE_MPI), opened only then:
// a single-process run neither maps MPI's libraries nor needs them installed.
#include "gmlp/comm.h"

#include <cstdlib>
#include <memory>

#include "gmlp/error.h"

#ifdef GMLP_HAVE_MPI
#include <dlfcn.h>

#include "io/module.h"
#endif

namespace gmlp {

namespace {

// One process: every collective is the identity.
class SingleProcess final : public Communicator {
 public:
  int rank() const override { return 0; }
  int size() const override { return 1; }
  std::string describe() const override { return "single process"; }
  void allreduce_sum(float*, size_t) override {}
  void allreduce_sum(double*, size_t) override {}
  void allreduce_sum(int64_t*, size_t) override {}
  void broadcast(void*, size_t, int) override {}
  void allgather_blocks(float*, size_t) override {}
  void gather_blocks(float* full, const float* mine, size_t n, int) override {
    if (full != mine) std::copy(mine, mine + n, full);
  }
  void start_allreduce_sum(float*, size_t) override {}
  void progress() override {}
  void wait_all() override {}
  [[noreturn]] void abort(int code) override { std::exit(code); }
};

std::unique_ptr<Communicator> g_world;

int env_int(const char* name) {
  const char* v = std::getenv(name);
  return v && *v ? std::atoi(v) : 0;
}

}  // namespace

// Open MPI's mpirun, MPICH's hydra and Slurm's PMI2 say how many processes they
// started; PMIx launchers (srun --mpi=pmix, PRRTE) set PMIX_RANK.
int launcher_world_size() {
  for (const char* v : {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "SLURM_NTASKS"})
    if (env_int(v) > 0) return env_int(v);
  return 1;
}

bool launched_by_mpi() {
  return std::getenv("OMPI_COMM_WORLD_SIZE") || std::getenv("PMI_SIZE") || std::getenv("PMIX_RANK");
}

Communicator& world() {
  if (g_world) return *g_world;
  if (launched_by_mpi()) {
    std::string why = "this gmlp was built without MPI (install libopenmpi-dev and rebuild)";
#ifdef GMLP_HAVE_MPI
    std::string error;
    if (void* h = open_module("libgmlp_mpi.so", GMLP_MPI_MODULE_PATH, {"gmlp_mpi_world"}, error))
      g_world.reset(reinterpret_cast<Communicator* (*)()>(dlsym(h, "gmlp_mpi_world"))());
    else
      why = "gmlp's MPI module does not load: " + error;
#endif
    // Without MPI, several copies would each train the whole model and race for the same
    // run directory; one process under a launcher (srun -n 1) trains alone as well.
    require(g_world || launcher_world_size() <= 1,
            "started as one of " + std::to_string(launcher_world_size()) + " processes, but " + why);
  }
  if (!g_world) g_world = std::make_unique<SingleProcess>();
  return *g_world;
}

bool world_started() { return g_world != nullptr; }

Communicator& this_process() {
  static SingleProcess alone;
  return alone;
}

}  // namespace gmlp
