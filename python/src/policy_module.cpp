// gmlp._policy: how OpenMP's threads will wait, decided before the engine (gmlp._core,
// which loads libgomp) is imported. Built from src/io/wait_policy.cpp alone, so that
// importing it loads no OpenMP; the gmlp program makes the same choice
// (include/gmlp/threads.h).
#include <pybind11/pybind11.h>

#include "gmlp/threads.h"

PYBIND11_MODULE(_policy, m) {
  m.doc() = "Chooses OpenMP's wait policy before the engine loads (include/gmlp/threads.h)";
  m.def(
      "choose",
      [](int threads) {
        gmlp::choose_omp_wait_env(threads);
        return gmlp::omp_wait_choice();
      },
      pybind11::arg("threads") = 0,
      "Sets GOMP_SPINCOUNT or OMP_WAIT_POLICY unless the user has set one; returns the choice and its reason "
      "('' when the user chose)");
}
