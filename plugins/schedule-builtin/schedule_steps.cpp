// Compute actions with their transfers (see schedule_steps.hpp).
#include "schedule_steps.hpp"

#include <set>

namespace keel_schedule {

void append_forward(std::vector<Action>& actions, const PipelineShape& shape, int microbatch, int chunk) {
  if (!shape.is_first_chunk(chunk))
    actions.push_back({ActionKind::RECV_ACTIVATION, microbatch, chunk, shape.stage_of(chunk - 1)});
  actions.push_back({ActionKind::FORWARD, microbatch, chunk});
  if (!shape.is_last_chunk(chunk))
    actions.push_back({ActionKind::SEND_ACTIVATION, microbatch, chunk + 1, shape.stage_of(chunk + 1)});
}

static void append_input_gradient(std::vector<Action>& actions, const PipelineShape& shape, ActionKind kind,
                                  int microbatch, int chunk) {
  if (!shape.is_last_chunk(chunk))
    actions.push_back({ActionKind::RECV_GRADIENT, microbatch, chunk, shape.stage_of(chunk + 1)});
  actions.push_back({kind, microbatch, chunk});
  if (!shape.is_first_chunk(chunk))
    actions.push_back({ActionKind::SEND_GRADIENT, microbatch, chunk - 1, shape.stage_of(chunk - 1)});
}

void append_backward(std::vector<Action>& actions, const PipelineShape& shape, int microbatch, int chunk) {
  append_input_gradient(actions, shape, ActionKind::BACKWARD, microbatch, chunk);
}

void append_backward_input(std::vector<Action>& actions, const PipelineShape& shape, int microbatch, int chunk) {
  append_input_gradient(actions, shape, ActionKind::BACKWARD_INPUT, microbatch, chunk);
}

void append_backward_weight(std::vector<Action>& actions, int microbatch, int chunk) {
  actions.push_back({ActionKind::BACKWARD_WEIGHT, microbatch, chunk});
}

void mark_last_for_chunk(std::vector<Action>& actions) {
  std::set<int> marked_chunks;
  for (auto it = actions.rbegin(); it != actions.rend(); ++it) {
    if (writes_weight_gradients(it->kind) && marked_chunks.insert(it->chunk).second) it->last_for_chunk = true;
  }
}

}  // namespace keel_schedule
