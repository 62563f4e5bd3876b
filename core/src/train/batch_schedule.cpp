// The batch schedule's rule (see batch_schedule.h).
#include "train/batch_schedule.h"

#include <cmath>

#include "host/errors.h"

namespace keel {

BatchSchedule::BatchSchedule(const BatchScheduleConfig& config, int32_t base)
    : config_(config), base_(base), batch_(base) {}

int32_t BatchSchedule::largest() const {
  int64_t b = base_;
  while (2 * b <= config_.max_global_batch) b *= 2;
  return int32_t(b);
}

double BatchSchedule::lr_factor() const {
  const double ratio = double(batch_) / double(base_);
  return config_.lr_rule == "linear" ? ratio : std::sqrt(ratio);
}

bool BatchSchedule::after_step(int64_t step, double b_simple) {
  if (step % config_.check_every != 0 || !std::isfinite(b_simple)) return false;
  bool grew = false;
  while (int64_t(batch_) * 2 <= config_.max_global_batch && b_simple >= 2.0 * double(batch_)) {
    batch_ *= 2;
    grew = true;
  }
  return grew;
}

void BatchSchedule::restore(const nlohmann::json& state, const std::string& where) {
  const nlohmann::json batch = state.is_object() && state.contains("global_batch") ? state["global_batch"] : nullptr;
  int64_t b = batch.is_number_integer() ? batch.get<int64_t>() : -1;
  bool reachable = false;
  for (int64_t candidate = base_; candidate <= largest(); candidate *= 2) reachable |= candidate == b;
  if (!reachable)
    throw KeelError(KEEL_ERR_IO, where + ": batch_schedule.global_batch: " + batch.dump() + " is not data.global_batch " +
                                     std::to_string(base_) + " × 2^k within max_global_batch " +
                                     std::to_string(config_.max_global_batch));
  batch_ = int32_t(b);
}

}  // namespace keel
