// Action lists converted to the ABI's structs and run through keel_support's simulator.
#include "schedule_simulator.hpp"

#include "schedule_abi.hpp"

namespace keel_schedule {

namespace {

keel_support::ScheduleLists to_abi(const std::vector<std::vector<Action>>& rank_actions) {
  keel_support::ScheduleLists lists(rank_actions.size());
  for (size_t s = 0; s < rank_actions.size(); ++s)
    for (const Action& action : rank_actions[s]) lists[s].push_back(action_to_abi(action));
  return lists;
}

}  // namespace

SimulationReport simulate_pipeline(const std::vector<std::vector<Action>>& rank_actions, const PipelineShape& shape,
                                   const UnitCosts& costs) {
  return keel_support::simulate_schedule(to_abi(rank_actions), shape.stages, shape.microbatches,
                                         shape.virtual_stages, costs);
}

SimulationReport replay_pipeline(const std::vector<std::vector<Action>>& rank_actions, const PipelineShape& shape,
                                 const ActionDuration& duration) {
  return keel_support::replay_schedule(
      to_abi(rank_actions), shape.stages, shape.microbatches, shape.virtual_stages,
      [&](int stage, size_t index, const keel_schedule_action&) { return duration(stage, index, rank_actions[stage][index]); });
}

}  // namespace keel_schedule
