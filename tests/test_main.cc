// GoogleTest entry point for every test binary: picks the fast OpenBLAS kernel first, as the
// streamrl binary does, so tests exercise the same BLAS code path users run.
#include <gtest/gtest.h>

#include "streamrl/core/threads.h"

int main(int argc, char** argv) {
  streamrl::core::select_blas_kernel(argv);
  testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}
