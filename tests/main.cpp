// The test runner's main: the same thread setup as the gmlp program, then GoogleTest.
#include <gtest/gtest.h>

#include "gmlp/threads.h"

int main(int argc, char** argv) {
  gmlp::choose_omp_wait_policy(argv);
  ::testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}
