// Traffic per step over each logging interval, for the metrics record: bytes each collective
// moved on the strategy's data-parallel group, the model's tensor-parallel group, the pipeline
// group, and with experts split the model's expert-parallel group and the expert half of the
// strategy's expert-data-parallel group (comm.h's counting convention), and what the offload tier read and wrote with
// the rates it had to sustain for training to run at this speed.
#pragma once

#include <keel/keel.h>

#include <nlohmann/json.hpp>

#include <optional>

#include "metrics/run_reporter.h"
#include "train/trainer.h"

namespace keel {

class IntervalTraffic {
 public:
  explicit IntervalTraffic(const Trainer& trainer);

  // Adds the interval's per-step figures to `report` (comm only on more than one rank, offload
  // only with a tier) and starts the next interval.
  void report(StepReport& report, int64_t steps, double seconds);
  // An evaluation moves activations and reads offloaded parameters too: the next interval
  // starts after it.
  void restart_after_evaluation();

 private:
  const Trainer& trainer_;
  keel_comm_counters dp_start_{}, tp_start_{}, pp_start_{}, ep_start_{}, expert_dp_start_{}, cp_start_{};
  keel_comm_counters dp_inner_start_{}, dp_outer_start_{};  // parallel.dp_groups' levels
  std::optional<keel_offload_counters> offload_start_;
};

}  // namespace keel
