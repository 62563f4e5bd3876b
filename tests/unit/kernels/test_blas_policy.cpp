// The OPENBLAS_CORETYPE policy of keel::cpu::load_blas. OpenBLAS reads the variable once, when
// it is loaded, so every case runs in a fresh child process (a gtest death test that exits 0)
// and this binary never loads OpenBLAS in the parent.
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <string>

#include "cpu/blas.h"

namespace {

bool cpu_has_avx512f() {
  __builtin_cpu_init();
  return __builtin_cpu_supports("avx512f");
}

bool cpu_is_intel() {
  __builtin_cpu_init();
  return __builtin_cpu_is("intel");
}

// Loads OpenBLAS with OPENBLAS_CORETYPE preset to `preset` and the given policy, prints the
// log line, the kernels picked and the variable afterwards to stderr, and exits 0.
[[noreturn]] void load_and_report(const char* preset, const char* policy) {
  setenv("OPENBLAS_CORETYPE", preset, 1);
  std::string line;
  keel::cpu::load_blas(policy, &line);
  const char* after = std::getenv("OPENBLAS_CORETYPE");
  std::fprintf(stderr, "line=[%s] core=[%s] env=[%s]\n", line.c_str(), keel::cpu::blas_corename().c_str(),
               after ? after : "(unset)");
  std::exit(0);
}

TEST(BlasPolicy, AutoUnsetsAnOlderPresetOnIntelAvx512) {
  if (!cpu_has_avx512f() || !cpu_is_intel()) GTEST_SKIP() << "not an Intel CPU with AVX-512F: \"auto\" keeps the preset";
  EXPECT_EXIT(load_and_report("Haswell", "auto"), ::testing::ExitedWithCode(0),
              "line=\\[OPENBLAS_CORETYPE=Haswell was preset.*\"env\".*\\] core=\\[.*\\] env=\\[\\(unset\\)\\]");
}

TEST(BlasPolicy, AutoKeepsAnOlderPresetOffIntel) {
  if (cpu_is_intel() && cpu_has_avx512f()) GTEST_SKIP() << "an Intel AVX-512 CPU: \"auto\" drops the preset";
  EXPECT_EXIT(load_and_report("Haswell", "auto"), ::testing::ExitedWithCode(0),
              "line=\\[\\] core=\\[[Hh]aswell\\] env=\\[Haswell\\]");
}

TEST(BlasPolicy, AutoKeepsAnAvx512Preset) {
  if (!cpu_has_avx512f()) GTEST_SKIP() << "this CPU has no AVX-512F";
  EXPECT_EXIT(load_and_report("SkylakeX", "auto"), ::testing::ExitedWithCode(0),
              "line=\\[\\] core=\\[[Ss]kylake[Xx]\\] env=\\[SkylakeX\\]");
}

TEST(BlasPolicy, EnvKeepsThePreset) {
  EXPECT_EXIT(load_and_report("Haswell", "env"), ::testing::ExitedWithCode(0),
              "line=\\[\\] core=\\[[Hh]aswell\\] env=\\[Haswell\\]");
}

TEST(BlasPolicy, ANamedCoreIsSetBeforeLoading) {
  EXPECT_EXIT(load_and_report("Haswell", "Sandybridge"), ::testing::ExitedWithCode(0),
              "line=\\[\\] core=\\[[Ss]andybridge\\] env=\\[Sandybridge\\]");
}

}  // namespace
