// The schedule plugins' side of abi/keel/schedule.h: reading the caller's shape struct and
// writing an action list into the caller's buffer, so the pure builders never see C structs.
#pragma once

#include <keel/schedule.h>

#include <vector>

#include "pipeline_shape.hpp"
#include "schedule_action.hpp"

namespace keel_schedule {

// Throws keel_support::StatusError (KEEL_ERR_INVALID_ARGUMENT) when shape is NULL or its
// struct_size is below the 0.7 struct's.
PipelineShape shape_from_abi(const keel_schedule_shape* shape);

keel_schedule_action action_to_abi(const Action& action);

// Writes the first min(capacity, size) actions and the full size to *out_count; out may be
// NULL only when capacity is 0.
void write_actions(const std::vector<Action>& actions, keel_schedule_action* out, size_t capacity,
                   size_t* out_count);

}  // namespace keel_schedule
