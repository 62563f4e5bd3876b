// Learning-rate schedule: linear warmup, then cosine (or linear) decay to a floor, as GPT-2/3
// and llm.c train. A pure function of the step, so resuming needs only the step count.
#pragma once

#include <cstdint>

#include "config/run_config.h"

namespace keel {

// The multiplier of the peak learning rate for 0-based optimizer step `step` of `total_steps`.
double lr_multiplier(const LrScheduleConfig& schedule, int64_t step, int64_t total_steps);

}  // namespace keel
