// One step of a pipeline rank's action list: compute a chunk for a micro-batch, or move an
// activation / gradient between ranks. A schedule is nothing but an ordered list of these per
// rank, so it can be checked (schedule_simulator) without running a model.
// Sends are asynchronous: an executor must issue SEND_* without waiting for the peer's receive
// (isend, completed before the buffer is reused), as the simulator models them. With blocking
// sends (a send that waits for its receive) 1f1b deadlocks already at p 2, m 3: stage 0 sends
// activation 1 while stage 1 sends gradient 0.
#pragma once

#include <string>

namespace keel_schedule {

enum class ActionKind {
  FORWARD,          // run chunk's layers forward on the micro-batch
  BACKWARD,         // input and weight gradients together
  BACKWARD_INPUT,   // zero-bubble: input gradient only (what the previous chunk waits for)
  BACKWARD_WEIGHT,  // zero-bubble: weight gradient only (deferrable)
  SEND_ACTIVATION,  // send the input activation of `chunk` (the previous chunk's output) to peer
  RECV_ACTIVATION,  // receive the input activation of `chunk` from peer
  SEND_GRADIENT,    // send the gradient of `chunk`'s output (the next chunk's input grad) to peer
  RECV_GRADIENT,    // receive the gradient of `chunk`'s output from peer
};

// `chunk` is the global chunk index 0 .. stages*virtual_stages-1; chunk c lives on stage
// c % stages. On a transfer, `chunk` names the chunk that CONSUMES the data, on both sides:
// SEND_ACTIVATION(mb, c) follows FORWARD(mb, c-1) and RECV_ACTIVATION(mb, c) precedes
// FORWARD(mb, c); SEND_GRADIENT(mb, c) follows the input gradient of chunk c+1 and
// RECV_GRADIENT(mb, c) precedes chunk c's backward. So a send and its receive carry the same
// (kind pair, mb, chunk).
struct Action {
  ActionKind kind;
  int microbatch;
  int chunk;
  int peer_stage = -1;          // transfers only: the other rank's stage
  bool last_for_chunk = false;  // the last action touching chunk's weight gradients this step
};

bool operator==(const Action& a, const Action& b);
inline bool operator!=(const Action& a, const Action& b) { return !(a == b); }

// BACKWARD or BACKWARD_WEIGHT: the actions that write weight gradients.
bool writes_weight_gradients(ActionKind kind);

// "F(mb 2, chunk 1)", "SEND_ACT(mb 0, chunk 1, to 1)", with " last" when flagged.
std::string describe(const Action& action);

}  // namespace keel_schedule
