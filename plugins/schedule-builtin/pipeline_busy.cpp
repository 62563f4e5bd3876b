// Busy fractions from measured durations and the schedules' closed-form bubbles
// (pipeline_busy.hpp).
#include "pipeline_busy.hpp"

#include <keel_support/common/abi_guard.hpp>

#include <algorithm>
#include <cmath>

#include "schedule_simulator.hpp"
#include "schedules.hpp"

namespace keel_schedule {

namespace {

using keel_support::StatusError;

bool is_compute(ActionKind kind) {
  return kind == ActionKind::FORWARD || kind == ActionKind::BACKWARD || kind == ActionKind::BACKWARD_INPUT ||
         kind == ActionKind::BACKWARD_WEIGHT;
}

void check_durations(const std::vector<std::vector<Action>>& rank_actions,
                     const std::vector<std::vector<double>>& durations) {
  if (rank_actions.empty()) throw StatusError(KEEL_ERR_INVALID_ARGUMENT, "measured durations: no stages");
  if (durations.size() != rank_actions.size())
    throw StatusError(KEEL_ERR_INVALID_ARGUMENT, "measured durations: " + std::to_string(durations.size()) +
                                                     " stages of durations for " +
                                                     std::to_string(rank_actions.size()) + " action lists");
  for (size_t s = 0; s < rank_actions.size(); ++s) {
    if (durations[s].size() != rank_actions[s].size())
      throw StatusError(KEEL_ERR_INVALID_ARGUMENT, "measured durations: stage " + std::to_string(s) + " has " +
                                                       std::to_string(durations[s].size()) + " durations for " +
                                                       std::to_string(rank_actions[s].size()) + " actions");
    for (size_t i = 0; i < durations[s].size(); ++i)
      if (!std::isfinite(durations[s][i]) || durations[s][i] < 0)
        throw StatusError(KEEL_ERR_INVALID_ARGUMENT,
                          "measured durations: stage " + std::to_string(s) + ", action " + std::to_string(i) + " " +
                              describe(rank_actions[s][i]) + " took " + std::to_string(durations[s][i]) +
                              " s, expected a finite number of seconds >= 0");
  }
}

// Fills each stage's fraction and the bubble from busy times and spans.
PipelineBusy summarise(std::vector<StageBusy> stages) {
  PipelineBusy result;
  double total_busy = 0;
  for (const auto& stage : stages) {
    result.makespan_seconds = std::max(result.makespan_seconds, stage.span_seconds);
    total_busy += stage.busy_seconds;
  }
  if (result.makespan_seconds > 0) {
    for (auto& stage : stages) stage.busy_fraction = stage.busy_seconds / result.makespan_seconds;
    result.bubble_fraction = 1.0 - total_busy / (double(stages.size()) * result.makespan_seconds);
  }
  result.stages = std::move(stages);
  return result;
}

}  // namespace

PipelineBusy measured_busy(const std::vector<std::vector<Action>>& rank_actions,
                           const std::vector<std::vector<double>>& durations) {
  check_durations(rank_actions, durations);
  std::vector<StageBusy> stages(rank_actions.size());
  for (size_t s = 0; s < rank_actions.size(); ++s)
    for (size_t i = 0; i < rank_actions[s].size(); ++i) {
      stages[s].span_seconds += durations[s][i];
      if (is_compute(rank_actions[s][i].kind)) stages[s].busy_seconds += durations[s][i];
    }
  return summarise(std::move(stages));
}

PipelineBusy replayed_busy(const std::vector<std::vector<Action>>& rank_actions, const PipelineShape& shape,
                           const std::vector<std::vector<double>>& durations) {
  check_durations(rank_actions, durations);
  const SimulationReport report = replay_pipeline(
      rank_actions, shape, [&](int stage, size_t index, const Action&) { return durations[stage][index]; });
  if (!report.deadlock.empty())
    throw StatusError(KEEL_ERR_INVALID_ARGUMENT, "replaying measured durations: the lists deadlock: " + report.deadlock);
  if (!report.violations.empty())
    throw StatusError(KEEL_ERR_INVALID_ARGUMENT, "replaying measured durations: " + report.violations.front());
  std::vector<StageBusy> stages(rank_actions.size());
  for (size_t s = 0; s < stages.size(); ++s) {
    stages[s].busy_seconds = report.busy_time[s];
    stages[s].span_seconds = report.finish_time[s];
  }
  return summarise(std::move(stages));
}

double theoretical_bubble_fraction(const std::string& name, const PipelineShape& shape) {
  if (std::string problem = shape_problem(name, shape); !problem.empty())
    throw StatusError(KEEL_ERR_INVALID_ARGUMENT, "bubble of \"" + name + "\": " + problem);
  const double p = shape.stages, m = shape.microbatches, v = shape.virtual_stages;
  if (name == "gpipe" || name == "1f1b") return (p - 1) / (m + p - 1);
  if (name == "interleaved") return (p - 1) / (v * m + p - 1);
  if (name == "zero-bubble") {
    if (shape.microbatches < shape.stages)
      throw StatusError(KEEL_ERR_INVALID_ARGUMENT,
                        "bubble of \"zero-bubble\": micro-batches " + std::to_string(shape.microbatches) +
                            " below pp " + std::to_string(shape.stages) +
                            " has no closed form (expected micro-batches >= pp; simulate_pipeline gives it)");
    return (p - 1) / (3 * m + p - 1);
  }
  throw StatusError(KEEL_ERR_INVALID_ARGUMENT, "bubble of \"" + name + "\": no such schedule");
}

}  // namespace keel_schedule
