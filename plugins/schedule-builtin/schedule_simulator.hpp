// Runs every rank's action list together, without a model, to check a schedule: blocking
// point-to-point semantics (a receive completes only once its send was issued; sends are
// buffered), deadlock detection, the data dependencies between compute actions, and a unit-time
// model of the bubble (forward 1, backward 2; or input gradient 1 + weight gradient 1).
// Used by the schedule tests, and meant for a benchmark comparing measured bubbles to theory.
#pragma once

#include <cstddef>
#include <functional>
#include <string>
#include <vector>

#include "pipeline_shape.hpp"
#include "schedule_action.hpp"

namespace keel_schedule {

struct UnitCosts {
  double forward = 1;
  double backward = 2;
  double backward_input = 1;
  double backward_weight = 1;
};

struct SimulationReport {
  // Empty when every rank ran to its end; otherwise, for each stuck rank, the action it waits on.
  std::string deadlock;
  // Every broken rule, each naming the rank, the action's position and what was expected.
  std::vector<std::string> violations;
  // Per rank: the most (micro-batch, chunk) pairs forwarded whose backward (weight gradient
  // under zero-bubble) was not yet done, i.e. activations held at once.
  std::vector<int> max_in_flight;
  std::vector<double> busy_time;    // per rank, unit-time model
  std::vector<double> finish_time;  // per rank: when its last action ended
  double makespan = 0;            // end of the last rank, unit-time model
  // Idle time over all ranks / (stages * makespan). For GPipe and 1F1B: (p-1)/(m+p-1).
  double bubble_fraction = 0;
};

// rank_actions[s] is the list of the rank at stage s; shape.stage is ignored.
SimulationReport simulate_pipeline(const std::vector<std::vector<Action>>& rank_actions, const PipelineShape& shape,
                                   const UnitCosts& costs = {});

// How long the compute action at `index` of `stage`'s list takes (called for compute actions
// only; transfers take no time, a receive waits for its send). For replaying measured costs.
using ActionDuration = std::function<double(int stage, size_t index, const Action& action)>;
SimulationReport replay_pipeline(const std::vector<std::vector<Action>>& rank_actions, const PipelineShape& shape,
                                 const ActionDuration& duration);

}  // namespace keel_schedule
