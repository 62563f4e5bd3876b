// Schedule lookup by name and the checks of a pipeline shape, so that every builder can assume
// numbers that make sense and a user sees which number is wrong and what was expected.
#include <keel_support/common/abi_guard.hpp>

#include "schedules.hpp"

namespace keel_schedule {

namespace {

using Builder = std::vector<Action> (*)(const PipelineShape&);

struct NamedSchedule {
  const char* name;
  Builder build;
};

const NamedSchedule kSchedules[] = {
    {"gpipe", build_gpipe},
    {"1f1b", build_one_f_one_b},
    {"interleaved", build_interleaved},
    {"zero-bubble", build_zero_bubble},
};

[[noreturn]] void refuse(const std::string& name, const std::string& why) {
  throw keel_support::StatusError(KEEL_ERR_INVALID_ARGUMENT, "pipeline schedule \"" + name + "\": " + why);
}

}  // namespace

// Worded with the config's keys (parallel.pp, parallel.virtual_stages), since this is what a
// user reads when keel validate refuses a pipeline.
std::string shape_problem(const std::string& name, const PipelineShape& shape) {
  const std::string p = std::to_string(shape.stages), m = std::to_string(shape.microbatches),
                    s = std::to_string(shape.stage), v = std::to_string(shape.virtual_stages);
  if (shape.stages < 1) return "pp is " + p + ", expected at least 1";
  if (shape.microbatches < 1) return "micro-batches is " + m + ", expected at least 1";
  if (shape.stage < 0 || shape.stage >= shape.stages)
    return "stage is " + s + ", expected 0 .. " + std::to_string(shape.stages - 1) + " for pp " + p;
  if (shape.virtual_stages < 1) return "virtual_stages is " + v + ", expected at least 1";
  if (name != "interleaved") {
    if (shape.virtual_stages != 1)
      return "virtual_stages is " + v + ", expected 1 (only \"interleaved\" runs several chunks per stage)";
    return "";
  }
  if (shape.virtual_stages < 2) return "virtual_stages is " + v + ", expected at least 2 (with 1 it is \"1f1b\")";
  if (shape.stages < 2) return "pp is " + p + ", expected at least 2 (with 1 stage, nothing interleaves)";
  if (shape.microbatches % shape.stages != 0)
    return "micro-batches " + m + " must be a multiple of pp " + p +
           " (micro-batches run in groups of pp, as in Megatron)";
  return "";
}

const std::vector<std::string>& schedule_names() {
  static const std::vector<std::string> names = [] {
    std::vector<std::string> all;
    for (const auto& schedule : kSchedules) all.push_back(schedule.name);
    return all;
  }();
  return names;
}

std::vector<Action> build_schedule(const std::string& name, int stages, int microbatches, int stage,
                                   int virtual_stages) {
  for (const auto& schedule : kSchedules) {
    if (name != schedule.name) continue;
    PipelineShape shape{stages, microbatches, stage, virtual_stages};
    if (std::string problem = shape_problem(name, shape); !problem.empty()) refuse(name, problem);
    return schedule.build(shape);
  }
  std::string known;
  for (const auto& known_name : schedule_names()) known += (known.empty() ? "\"" : ", \"") + known_name + "\"";
  refuse(name, "no such schedule; expected one of " + known);
}

}  // namespace keel_schedule
