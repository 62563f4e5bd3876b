// Shorthands shared by the schedule tests (see schedule_test_support.hpp).
#include "schedule_test_support.hpp"

#include "schedules.hpp"

namespace keel_schedule_test {

std::vector<std::vector<Action>> build_all_ranks(const std::string& name, int stages, int microbatches,
                                                 int virtual_stages) {
  std::vector<std::vector<Action>> lists;
  for (int stage = 0; stage < stages; ++stage)
    lists.push_back(keel_schedule::build_schedule(name, stages, microbatches, stage, virtual_stages));
  return lists;
}

keel_schedule::SimulationReport simulate(const std::string& name, int stages, int microbatches, int virtual_stages) {
  keel_schedule::PipelineShape shape{stages, microbatches, 0, virtual_stages};
  return keel_schedule::simulate_pipeline(build_all_ranks(name, stages, microbatches, virtual_stages), shape);
}

std::string listing(const std::vector<Action>& actions) {
  std::string text;
  for (const auto& action : actions) text += "  " + keel_schedule::describe(action) + "\n";
  return text;
}

}  // namespace keel_schedule_test
