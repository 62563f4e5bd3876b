// The built-in pipeline schedules: pure functions from the pipeline's shape to one rank's
// action list. build_schedule checks the shape and picks the schedule by name; the builders
// assume a checked shape.
#pragma once

#include <string>
#include <vector>

#include "pipeline_shape.hpp"
#include "schedule_action.hpp"

namespace keel_schedule {

// "gpipe", "1f1b", "interleaved", "zero-bubble".
const std::vector<std::string>& schedule_names();

// Why the named schedule cannot run `shape` (the numbers and what was expected), or "" when it
// can. The one shape check: build_schedule and the plugin's check_shape both use it.
std::string shape_problem(const std::string& name, const PipelineShape& shape);

// The action list of the rank at `stage`. Throws keel_support::StatusError
// (KEEL_ERR_INVALID_ARGUMENT) for an unknown name or a shape the schedule cannot run, with the
// numbers in the message.
std::vector<Action> build_schedule(const std::string& name, int stages, int microbatches, int stage,
                                   int virtual_stages);

std::vector<Action> build_gpipe(const PipelineShape& shape);
std::vector<Action> build_one_f_one_b(const PipelineShape& shape);
std::vector<Action> build_interleaved(const PipelineShape& shape);
std::vector<Action> build_zero_bubble(const PipelineShape& shape);

}  // namespace keel_schedule
