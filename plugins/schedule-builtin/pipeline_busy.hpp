// What a pipeline benchmark needs to compare a measured bubble with theory: each stage's busy
// fraction from measured per-action durations (as measured, or replayed through the simulator
// so that only the schedule's own waits count), and the closed-form bubble of each schedule.
#pragma once

#include <string>
#include <vector>

#include "pipeline_shape.hpp"
#include "schedule_action.hpp"

namespace keel_schedule {

struct StageBusy {
  double busy_seconds = 0;   // the stage's compute actions (forward, backward, input/weight gradient)
  double span_seconds = 0;   // from the step's start to the end of the stage's last action
  double busy_fraction = 0;  // busy_seconds / the pipeline's makespan; 1 - this is the stage's bubble
};

struct PipelineBusy {
  std::vector<StageBusy> stages;
  double makespan_seconds = 0;  // the longest span
  double bubble_fraction = 0;   // 1 - total busy / (stages * makespan), as simulate_pipeline defines it
};

// durations[s][i] is the measured wall time of rank s in action i of rank_actions[s], for every
// action, a receive's including its wait, with all ranks starting the step together (after a
// barrier). A rank runs its list in order, so its span is the sum of its durations. Throws
// keel_support::StatusError (KEEL_ERR_INVALID_ARGUMENT) when the counts differ from the lists'
// or a duration is negative or not finite, naming the stage and action.
PipelineBusy measured_busy(const std::vector<std::vector<Action>>& rank_actions,
                           const std::vector<std::vector<double>>& durations);

// The same lists replayed through the simulator: compute actions take their measured
// durations, transfers none, so the bubble is the schedule's alone (no communication cost).
// Measured minus replayed is what communication and waiting on it added. Transfer durations
// are checked but not used. Throws as measured_busy, and when the lists deadlock.
PipelineBusy replayed_busy(const std::vector<std::vector<Action>>& rank_actions, const PipelineShape& shape,
                           const std::vector<std::vector<double>>& durations);

// The bubble fraction theory gives with forward 1 and backward 2 units (zero-bubble: input and
// weight gradient 1 each), as a fraction of the makespan: gpipe and 1f1b (p-1)/(m+p-1), i.e.
// (p-1)/m of the busy time; interleaved (p-1)/(v*m+p-1); zero-bubble (ZB-H1) (p-1)/(3m+p-1)
// for m >= p. Throws StatusError (KEEL_ERR_INVALID_ARGUMENT) for a shape the schedule refuses
// or one without a closed form (zero-bubble with m < p: simulate it).
double theoretical_bubble_fraction(const std::string& name, const PipelineShape& shape);

}  // namespace keel_schedule
