// The learning-rate schedule against its closed form.
#include <gtest/gtest.h>

#include <cmath>

#include "train/lr_schedule.h"

namespace {

TEST(LrSchedule, WarmupIsLinearAndReachesThePeak) {
  keel::LrScheduleConfig s;
  s.warmup_steps = 4;
  EXPECT_DOUBLE_EQ(keel::lr_multiplier(s, 0, 100), 0.25);
  EXPECT_DOUBLE_EQ(keel::lr_multiplier(s, 3, 100), 1.0);
}

TEST(LrSchedule, CosineDecaysToTheFloor) {
  keel::LrScheduleConfig s;
  s.warmup_steps = 10;
  s.min_lr_ratio = 0.1;
  EXPECT_DOUBLE_EQ(keel::lr_multiplier(s, 10, 110), 1.0);
  EXPECT_NEAR(keel::lr_multiplier(s, 60, 110), 0.1 + 0.9 * 0.5, 1e-12);  // halfway: cos(π/2) = 0
  const double quarter = 0.1 + 0.9 * 0.5 * (1 + std::cos(M_PI * 0.25));
  EXPECT_NEAR(keel::lr_multiplier(s, 35, 110), quarter, 1e-12);
  EXPECT_NEAR(keel::lr_multiplier(s, 110, 110), 0.1, 1e-12);
  EXPECT_NEAR(keel::lr_multiplier(s, 500, 110), 0.1, 1e-12);  // holds the floor
}

TEST(LrSchedule, LinearAndConstant) {
  keel::LrScheduleConfig s;
  s.decay = "linear";
  s.min_lr_ratio = 0.0;
  EXPECT_NEAR(keel::lr_multiplier(s, 25, 100), 0.75, 1e-12);
  s.decay = "constant";
  EXPECT_DOUBLE_EQ(keel::lr_multiplier(s, 99, 100), 1.0);
}

}  // namespace
