// Test main for the kernel tests: loads OpenBLAS once (the matmul and attention kernels need it)
// with the default policy, then runs every test.
#include <gtest/gtest.h>

#include <cstdio>

#include "cpu/blas.h"

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  std::string note;
  keel::cpu::load_blas("auto", &note);
  if (!note.empty()) std::fprintf(stderr, "%s\n", note.c_str());
  return RUN_ALL_TESTS();
}
