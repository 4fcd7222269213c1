// The test runner's main: the same thread setup as the gmlp program, then GoogleTest.
#include <gtest/gtest.h>

#include "gmlp/threads.h"

#include <cstdlib>
#include <cstring>

int main(int argc, char** argv) {
  gmlp::choose_omp_wait_policy(argv);
  // The gmlp commands the tests start run on the CPU even where a GPU is visible: their
  // resume and rank checks are bit for bit, which the GPU's atomic sums are not. Tests
  // of the GPU pass --device cuda; a caller may still set GMLP_DEVICE itself.
  setenv("GMLP_DEVICE", "cpu", /*overwrite=*/0);
  ::testing::InitGoogleTest(&argc, argv);
  // --cuda-emulator-order=reverse: the CUDA emulator's second schedule (tests/cuda_emu),
  // an argument because CTest's test discovery keeps one variable per environment
  // property, and those tests need two besides (OMP_NUM_THREADS, GMLP_CUDA_EMULATOR).
  const char* flag = "--cuda-emulator-order=";
  for (int i = 1; i < argc; ++i)
    if (std::strncmp(argv[i], flag, std::strlen(flag)) == 0)
      setenv("GMLP_CUDA_EMULATOR_ORDER", argv[i] + std::strlen(flag), /*overwrite=*/1);
  return RUN_ALL_TESTS();
}
