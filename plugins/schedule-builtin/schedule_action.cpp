// Comparison and printing of actions, for tests and error messages.
#include "schedule_action.hpp"

#include <keel_support/schedule/schedule_check.hpp>

#include "schedule_abi.hpp"

namespace keel_schedule {

bool operator==(const Action& a, const Action& b) {
  return a.kind == b.kind && a.microbatch == b.microbatch && a.chunk == b.chunk && a.peer_stage == b.peer_stage &&
         a.last_for_chunk == b.last_for_chunk;
}

bool writes_weight_gradients(ActionKind kind) {
  return kind == ActionKind::BACKWARD || kind == ActionKind::BACKWARD_WEIGHT;
}

std::string describe(const Action& action) { return keel_support::describe_action(action_to_abi(action)); }

}  // namespace keel_schedule
