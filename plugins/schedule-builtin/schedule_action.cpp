// Comparison and printing of actions, for tests and error messages.
#include "schedule_action.hpp"

namespace keel_schedule {

bool operator==(const Action& a, const Action& b) {
  return a.kind == b.kind && a.microbatch == b.microbatch && a.chunk == b.chunk && a.peer_stage == b.peer_stage &&
         a.last_for_chunk == b.last_for_chunk;
}

bool writes_weight_gradients(ActionKind kind) {
  return kind == ActionKind::BACKWARD || kind == ActionKind::BACKWARD_WEIGHT;
}

static const char* short_name(ActionKind kind) {
  switch (kind) {
    case ActionKind::FORWARD: return "F";
    case ActionKind::BACKWARD: return "B";
    case ActionKind::BACKWARD_INPUT: return "BI";
    case ActionKind::BACKWARD_WEIGHT: return "BW";
    case ActionKind::SEND_ACTIVATION: return "SEND_ACT";
    case ActionKind::RECV_ACTIVATION: return "RECV_ACT";
    case ActionKind::SEND_GRADIENT: return "SEND_GRAD";
    case ActionKind::RECV_GRADIENT: return "RECV_GRAD";
  }
  return "?";
}

std::string describe(const Action& action) {
  std::string text = std::string(short_name(action.kind)) + "(mb " + std::to_string(action.microbatch) + ", chunk " +
                     std::to_string(action.chunk);
  if (action.kind == ActionKind::SEND_ACTIVATION || action.kind == ActionKind::SEND_GRADIENT)
    text += ", to " + std::to_string(action.peer_stage);
  if (action.kind == ActionKind::RECV_ACTIVATION || action.kind == ActionKind::RECV_GRADIENT)
    text += ", from " + std::to_string(action.peer_stage);
  text += ")";
  if (action.last_for_chunk) text += " last";
  return text;
}

}  // namespace keel_schedule
