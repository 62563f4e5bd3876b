// Conversions between the builders' Action lists and the C ABI's structs (schedule_abi.hpp).
#include "schedule_abi.hpp"

#include <keel_support/common/abi_guard.hpp>

#include <algorithm>
#include <string>

namespace keel_schedule {

using keel_support::StatusError;

PipelineShape shape_from_abi(const keel_schedule_shape* shape) {
  if (!shape) throw StatusError(KEEL_ERR_INVALID_ARGUMENT, "shape is NULL");
  if (shape->struct_size < sizeof(keel_schedule_shape))
    throw StatusError(KEEL_ERR_INVALID_ARGUMENT, "shape->struct_size is " + std::to_string(shape->struct_size) +
                                                     ", below the " + std::to_string(sizeof(keel_schedule_shape)) +
                                                     " bytes of ABI 0.7's keel_schedule_shape");
  return PipelineShape{shape->stages, shape->microbatches, shape->stage, shape->virtual_stages};
}

static int32_t kind_to_abi(ActionKind kind) {
  switch (kind) {
    case ActionKind::FORWARD: return KEEL_ACTION_FORWARD;
    case ActionKind::BACKWARD: return KEEL_ACTION_BACKWARD;
    case ActionKind::BACKWARD_INPUT: return KEEL_ACTION_BACKWARD_INPUT;
    case ActionKind::BACKWARD_WEIGHT: return KEEL_ACTION_BACKWARD_WEIGHT;
    case ActionKind::SEND_ACTIVATION: return KEEL_ACTION_SEND_ACTIVATION;
    case ActionKind::RECV_ACTIVATION: return KEEL_ACTION_RECV_ACTIVATION;
    case ActionKind::SEND_GRADIENT: return KEEL_ACTION_SEND_GRADIENT;
    case ActionKind::RECV_GRADIENT: return KEEL_ACTION_RECV_GRADIENT;
  }
  throw StatusError(KEEL_ERR_INTERNAL, "action kind " + std::to_string(static_cast<int>(kind)) + " has no ABI value");
}

keel_schedule_action action_to_abi(const Action& action) {
  keel_schedule_action out{};
  out.kind = kind_to_abi(action.kind);
  out.microbatch = action.microbatch;
  out.chunk = action.chunk;
  out.peer_stage = action.peer_stage;
  out.flags = action.last_for_chunk ? uint32_t(KEEL_ACTION_LAST_FOR_CHUNK) : 0u;
  return out;
}

void write_actions(const std::vector<Action>& actions, keel_schedule_action* out, size_t capacity,
                   size_t* out_count) {
  if (!out_count) throw StatusError(KEEL_ERR_INVALID_ARGUMENT, "out_count is NULL");
  if (!out && capacity > 0)
    throw StatusError(KEEL_ERR_INVALID_ARGUMENT,
                      "out is NULL but capacity is " + std::to_string(capacity) + " (expected 0 with no buffer)");
  const size_t written = std::min(capacity, actions.size());
  for (size_t i = 0; i < written; ++i) out[i] = action_to_abi(actions[i]);
  *out_count = actions.size();
}

}  // namespace keel_schedule
