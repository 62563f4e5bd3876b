// The building blocks every schedule shares: a compute action together with the transfers
// around it (receive before, send after), and the last_for_chunk marking. Schedules differ
// only in the order in which they call these.
#pragma once

#include <vector>

#include "pipeline_shape.hpp"
#include "schedule_action.hpp"

namespace keel_schedule {

// RECV_ACTIVATION unless chunk is the first, FORWARD, SEND_ACTIVATION unless it is the last.
void append_forward(std::vector<Action>& actions, const PipelineShape& shape, int microbatch, int chunk);
// RECV_GRADIENT unless chunk is the last, BACKWARD, SEND_GRADIENT unless it is the first.
void append_backward(std::vector<Action>& actions, const PipelineShape& shape, int microbatch, int chunk);
// As append_backward with BACKWARD_INPUT: the gradient goes upstream as soon as it exists.
void append_backward_input(std::vector<Action>& actions, const PipelineShape& shape, int microbatch, int chunk);
// BACKWARD_WEIGHT alone: it needs nothing from, and sends nothing to, other ranks.
void append_backward_weight(std::vector<Action>& actions, int microbatch, int chunk);

// Flags, for each chunk, the last action that writes its weight gradients: a strategy starts
// that chunk's gradient reduction there (under 1F1B the last forward is not the last backward).
void mark_last_for_chunk(std::vector<Action>& actions);

}  // namespace keel_schedule
