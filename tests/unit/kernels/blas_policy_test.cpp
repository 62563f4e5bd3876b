// The OpenBLAS environment policy of keel::cpu::load_blas. OpenBLAS reads OPENBLAS_CORETYPE and
// OPENBLAS_L2_SIZE once, when it is loaded, so every case runs in a fresh child process (a gtest
// death test that exits 0) and this binary never loads OpenBLAS in the parent.
#include <dlfcn.h>
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <string>

#include "cpu/blas.h"

namespace {

const char* value_of(const char* name) {
  const char* value = std::getenv(name);
  return value ? value : "(unset)";
}

// Presets the environment as these machines do (either may be NULL: unset), optionally loads
// OpenBLAS first as NumPy would, applies `policy`, prints the log line, the kernels picked and
// both variables afterwards to stderr, and exits 0.
[[noreturn]] void load_and_report(const char* coretype, const char* l2_size, const char* policy,
                                  bool loaded_before = false) {
  if (coretype) setenv("OPENBLAS_CORETYPE", coretype, 1); else unsetenv("OPENBLAS_CORETYPE");
  if (l2_size) setenv("OPENBLAS_L2_SIZE", l2_size, 1); else unsetenv("OPENBLAS_L2_SIZE");
  if (loaded_before && !dlopen("libopenblas.so.0", RTLD_NOW | RTLD_GLOBAL)) std::exit(3);
  std::string line;
  keel::cpu::load_blas(policy, &line);
  std::fprintf(stderr, "line=[%s] core=[%s] coretype=[%s] l2=[%s]\n", line.c_str(),
               keel::cpu::blas_corename().c_str(), value_of("OPENBLAS_CORETYPE"), value_of("OPENBLAS_L2_SIZE"));
  std::exit(0);
}

TEST(BlasPolicy, AutoUnsetsBothPresets) {
  EXPECT_EXIT(load_and_report("Haswell", "262144", "auto"), ::testing::ExitedWithCode(0),
              "line=\\[OPENBLAS_CORETYPE=Haswell OPENBLAS_L2_SIZE=262144 were preset: unsetting them.*\"env\".*\\] "
              "core=\\[.*\\] coretype=\\[\\(unset\\)\\] l2=\\[\\(unset\\)\\]");
}

TEST(BlasPolicy, AutoUnsetsALoneL2Size) {
  EXPECT_EXIT(load_and_report(nullptr, "131072", "auto"), ::testing::ExitedWithCode(0),
              "line=\\[OPENBLAS_L2_SIZE=131072 were preset.*\\] core=\\[.*\\] coretype=\\[\\(unset\\)\\] "
              "l2=\\[\\(unset\\)\\]");
}

TEST(BlasPolicy, AutoWithoutPresetsSaysNothing) {
  EXPECT_EXIT(load_and_report(nullptr, nullptr, "auto"), ::testing::ExitedWithCode(0),
              "line=\\[\\] core=\\[.*\\] coretype=\\[\\(unset\\)\\]");
}

TEST(BlasPolicy, EnvKeepsThePresets) {
  EXPECT_EXIT(load_and_report("Haswell", "262144", "env"), ::testing::ExitedWithCode(0),
              "line=\\[\\] core=\\[[Hh]aswell\\] coretype=\\[Haswell\\] l2=\\[262144\\]");
}

TEST(BlasPolicy, ANamedCoreIsSetBeforeLoading) {
  EXPECT_EXIT(load_and_report("Haswell", nullptr, "Sandybridge"), ::testing::ExitedWithCode(0),
              "line=\\[\\] core=\\[[Ss]andybridge\\] coretype=\\[Sandybridge\\]");
}

// NumPy (or torch) loaded OpenBLAS first with the presets: the policy cannot apply, and the
// one line says so with what to do.
TEST(BlasPolicy, AlreadyLoadedWithPresetsSaysWhatToDo) {
  EXPECT_EXIT(load_and_report("Haswell", "262144", "auto", true), ::testing::ExitedWithCode(0),
              "line=\\[OpenBLAS was already loaded in this process \\(in Python, by NumPy or torch\\) with "
              "OPENBLAS_CORETYPE=Haswell OPENBLAS_L2_SIZE=262144, so \"openblas_coretype\": \"auto\" cannot "
              "apply.*unset those variables before starting the process.*\\] core=\\[[Hh]aswell\\]");
}

TEST(BlasPolicy, AlreadyLoadedWithoutPresetsSaysNothing) {
  EXPECT_EXIT(load_and_report(nullptr, nullptr, "auto", true), ::testing::ExitedWithCode(0), "line=\\[\\] core=");
}

}  // namespace
