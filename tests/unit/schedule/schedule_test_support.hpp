// Shorthands shared by the schedule tests: building every rank's list, and writing golden
// action lists compactly.
#pragma once

#include <string>
#include <vector>

#include "schedule_action.hpp"
#include "schedule_simulator.hpp"

namespace keel_schedule_test {

using keel_schedule::Action;
using keel_schedule::ActionKind;

std::vector<std::vector<Action>> build_all_ranks(const std::string& name, int stages, int microbatches,
                                                 int virtual_stages);
keel_schedule::SimulationReport simulate(const std::string& name, int stages, int microbatches, int virtual_stages);

// One action per line, for readable failure output.
std::string listing(const std::vector<Action>& actions);

inline Action F(int mb, int chunk) { return {ActionKind::FORWARD, mb, chunk}; }
inline Action B(int mb, int chunk) { return {ActionKind::BACKWARD, mb, chunk}; }
inline Action SendAct(int mb, int chunk, int peer) { return {ActionKind::SEND_ACTIVATION, mb, chunk, peer}; }
inline Action RecvAct(int mb, int chunk, int peer) { return {ActionKind::RECV_ACTIVATION, mb, chunk, peer}; }
inline Action SendGrad(int mb, int chunk, int peer) { return {ActionKind::SEND_GRADIENT, mb, chunk, peer}; }
inline Action RecvGrad(int mb, int chunk, int peer) { return {ActionKind::RECV_GRADIENT, mb, chunk, peer}; }
inline Action Last(Action action) {
  action.last_for_chunk = true;
  return action;
}

}  // namespace keel_schedule_test
