// The layout-free initialiser: any split of a parameter into ranges yields the same numbers,
// the statistics match the spec's rule, and padded rows stay zero.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "host/param_init.h"

namespace {

keel_param_spec normal_spec(const char* name, int64_t rows, int64_t cols, float std, int64_t init_rows = -1) {
  keel_param_spec spec{};
  spec.struct_size = sizeof spec;
  spec.name = name;
  spec.ndim = 2;
  spec.global_shape[0] = rows, spec.global_shape[1] = cols;
  spec.init = KEEL_INIT_NORMAL;
  spec.init_std = std;
  spec.init_rows = init_rows;
  return spec;
}

TEST(ParamInit, AnySplitGivesTheSameValues) {
  keel_param_spec spec = normal_spec("h.0.attn.qkv.weight", 37, 11, 0.02f);
  const int64_t n = 37 * 11;
  std::vector<float> whole(n), pieces(n);
  keel::init_param_range(spec, 1337, 0, n, whole.data());
  const int64_t cuts[] = {0, 5, 100, 101, 250, n};
  for (int i = 0; i + 1 < 6; ++i) keel::init_param_range(spec, 1337, cuts[i], cuts[i + 1] - cuts[i], pieces.data() + cuts[i]);
  EXPECT_EQ(whole, pieces);
}

TEST(ParamInit, SeedAndNameChangeTheValues) {
  keel_param_spec a = normal_spec("wte", 4, 4, 1.0f), b = normal_spec("wpe", 4, 4, 1.0f);
  std::vector<float> x(16), y(16), z(16);
  keel::init_param_range(a, 1, 0, 16, x.data());
  keel::init_param_range(b, 1, 0, 16, y.data());
  keel::init_param_range(a, 2, 0, 16, z.data());
  EXPECT_NE(x, y);
  EXPECT_NE(x, z);
}

TEST(ParamInit, NormalHasTheRequestedMeanAndStd) {
  const int64_t n = 200000;
  keel_param_spec spec = normal_spec("w", n, 1, 0.02f);
  std::vector<float> v(n);
  keel::init_param_range(spec, 42, 0, n, v.data());
  double sum = 0, sum_sq = 0;
  for (float x : v) sum += x, sum_sq += double(x) * x;
  const double mean = sum / n, std = std::sqrt(sum_sq / n - mean * mean);
  // Standard error of the mean is 0.02/sqrt(2e5) ≈ 4.5e-5; of the std about 3.2e-5.
  EXPECT_NEAR(mean, 0.0, 2.5e-4);
  EXPECT_NEAR(std, 0.02, 2.5e-4);
}

TEST(ParamInit, RowsPastInitRowsAreZeroAndConstantsAreExact) {
  keel_param_spec spec = normal_spec("wte", 6, 3, 0.5f, 4);
  std::vector<float> v(18);
  keel::init_param_range(spec, 7, 0, 18, v.data());
  for (int i = 0; i < 12; ++i) EXPECT_NE(v[i], 0.0f) << i;
  for (int i = 12; i < 18; ++i) EXPECT_EQ(v[i], 0.0f) << i;
  spec.init = KEEL_INIT_ONES;
  spec.init_rows = -1;
  keel::init_param_range(spec, 7, 0, 18, v.data());
  for (float x : v) EXPECT_EQ(x, 1.0f);
  spec.init = KEEL_INIT_ZEROS;
  keel::init_param_range(spec, 7, 0, 18, v.data());
  for (float x : v) EXPECT_EQ(x, 0.0f);
}

}  // namespace
