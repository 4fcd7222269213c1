// The test runner's main: the same thread setup as the gmlp program, then GoogleTest.
#include <gtest/gtest.h>

#include "gmlp/threads.h"

#include <cstdlib>

int main(int argc, char** argv) {
  gmlp::choose_omp_wait_policy(argv);
  // The gmlp commands the tests start run on the CPU even where a GPU is visible: their
  // resume and rank checks are bit for bit, which the GPU's atomic sums are not. Tests
  // of the GPU pass --device cuda; a caller may still set GMLP_DEVICE itself.
  setenv("GMLP_DEVICE", "cpu", /*overwrite=*/0);
  ::testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}
