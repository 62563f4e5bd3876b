// The built-in schedules' view of the all-rank simulator: their Action lists run through the
// installed checker (keel_support/schedule/schedule_check.hpp, which the core also runs on every
// schedule plugin's lists), so the schedules' tests and the core check with one simulator.
#pragma once

#include <keel_support/schedule/schedule_check.hpp>

#include <cstddef>
#include <functional>
#include <vector>

#include "pipeline_shape.hpp"
#include "schedule_action.hpp"

namespace keel_schedule {

using UnitCosts = keel_support::ScheduleCosts;
using SimulationReport = keel_support::ScheduleReport;

// rank_actions[s] is the list of the rank at stage s; shape.stage is ignored.
SimulationReport simulate_pipeline(const std::vector<std::vector<Action>>& rank_actions, const PipelineShape& shape,
                                   const UnitCosts& costs = {});

// How long the compute action at `index` of `stage`'s list takes (called for compute actions
// only; transfers take no time, a receive waits for its send). For replaying measured costs.
using ActionDuration = std::function<double(int stage, size_t index, const Action& action)>;
SimulationReport replay_pipeline(const std::vector<std::vector<Action>>& rank_actions, const PipelineShape& shape,
                                 const ActionDuration& duration);

}  // namespace keel_schedule
