// data.batch_schedule: a run that needs no hand-tuned batch. Every check_every steps the global
// batch doubles, by accumulating more micro-batches, for as long as the gradient noise scale
// (noise_scale.h, in sequences) is at least the doubled batch and max_global_batch allows: the
// batch follows B_simple from below, where McCandlish et al. (2018) put the efficient batch.
// It never shrinks. The learning rate follows the batch by the configured rule: × sqrt(B/B0)
// (the square-root rule of Adam-type optimizers, Malladi et al., 2022) or × B/B0 (the linear
// rule of SGD, Goyal et al., 2017), B0 being data.global_batch.
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <string>

#include "config/run_config.h"

namespace keel {

class BatchSchedule {
 public:
  // base: data.global_batch, where the schedule starts.
  BatchSchedule(const BatchScheduleConfig& config, int32_t base);

  int32_t global_batch() const { return batch_; }
  // The largest batch the schedule can reach: base × 2^k ≤ max_global_batch.
  int32_t largest() const;
  double lr_factor() const;
  // After optimizer step `step` with the smoothed noise scale `b_simple` (NaN: none yet):
  // whether the batch grew for the next step.
  bool after_step(int64_t step, double b_simple);

  nlohmann::json state() const { return {{"global_batch", batch_}}; }
  // Throws KeelError naming `where` for a batch the schedule could not have reached.
  void restore(const nlohmann::json& state, const std::string& where);

 private:
  BatchScheduleConfig config_;
  int32_t base_;
  int32_t batch_;
};

}  // namespace keel
