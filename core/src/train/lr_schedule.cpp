// Warmup reaches the peak at the last warmup step; decay then runs over the remaining steps
// (or decay_steps) and holds the floor afterwards.
#include "train/lr_schedule.h"

#include <algorithm>
#include <cmath>

namespace keel {

double lr_multiplier(const LrScheduleConfig& schedule, int64_t step, int64_t total_steps) {
  if (step < schedule.warmup_steps) return double(step + 1) / double(schedule.warmup_steps);
  if (schedule.decay == "constant") return 1.0;
  const int64_t decay_end = schedule.decay_steps > 0 ? schedule.decay_steps : total_steps;
  const int64_t span = std::max<int64_t>(1, decay_end - schedule.warmup_steps);
  const double progress = std::clamp(double(step - schedule.warmup_steps) / double(span), 0.0, 1.0);
  const double shape = schedule.decay == "linear" ? 1.0 - progress : 0.5 * (1.0 + std::cos(M_PI * progress));
  return schedule.min_lr_ratio + (1.0 - schedule.min_lr_ratio) * shape;
}

}  // namespace keel
