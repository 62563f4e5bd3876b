// The all-rank pipeline simulator (see schedule_simulator.hpp). Ranks advance round-robin, each
// as far as it can; since every rank is sequential and a receive's time is the later of its
// rank's clock and its send's time, the result does not depend on the order ranks advance in.
#include "schedule_simulator.hpp"

#include <algorithm>
#include <map>
#include <set>
#include <tuple>
#include <utility>

namespace keel_schedule {

namespace {

using MicrobatchChunk = std::pair<int, int>;

struct Message {
  int from_stage;
  int to_stage;
  double sent_at;
  int receives = 0;
};

// (is gradient, micro-batch, consuming chunk) -> the send that carries it.
using MessageKey = std::tuple<bool, int, int>;

struct RankState {
  size_t next = 0;
  double clock = 0;
  double busy = 0;
  int in_flight = 0;
  int max_in_flight = 0;
  std::set<MicrobatchChunk> forwarded, input_gradient_done, activation_received, gradient_received;
};

class Simulation {
 public:
  Simulation(const std::vector<std::vector<Action>>& rank_actions, const PipelineShape& shape,
             ActionDuration duration)
      : actions_(rank_actions), shape_(shape), duration_(std::move(duration)), ranks_(rank_actions.size()) {}

  SimulationReport run() {
    if (static_cast<int>(actions_.size()) != shape_.stages) {
      report_.violations.push_back("expected one action list per stage (" + std::to_string(shape_.stages) +
                                   "), got " + std::to_string(actions_.size()));
      return report_;
    }
    for (bool progress = true; progress;) {
      progress = false;
      for (int rank = 0; rank < shape_.stages; ++rank)
        while (ranks_[rank].next < actions_[rank].size() && step(rank)) progress = true;
    }
    describe_deadlock();
    check_totals();
    check_last_for_chunk();
    summarise_time();
    return report_;
  }

 private:
  void violation(int rank, const std::string& what) {
    const auto& state = ranks_[rank];
    report_.violations.push_back("stage " + std::to_string(rank) + ", action " + std::to_string(state.next) + " " +
                                 describe(actions_[rank][state.next]) + ": " + what);
  }

  // Runs the rank's next action; false when it is a receive whose send was not issued yet.
  bool step(int rank) {
    auto& state = ranks_[rank];
    const Action& action = actions_[rank][state.next];
    const MicrobatchChunk key{action.microbatch, action.chunk};
    const int c = action.chunk;
    if (action.microbatch < 0 || action.microbatch >= shape_.microbatches || c < 0 || c >= shape_.chunks()) {
      violation(rank, "micro-batch or chunk out of range (m " + std::to_string(shape_.microbatches) + ", chunks " +
                          std::to_string(shape_.chunks()) + ")");
      ++state.next;
      return true;
    }
    switch (action.kind) {
      case ActionKind::RECV_ACTIVATION:
      case ActionKind::RECV_GRADIENT:
        return receive(rank, action);
      case ActionKind::SEND_ACTIVATION:
      case ActionKind::SEND_GRADIENT:
        send(rank, action);
        break;
      case ActionKind::FORWARD:
        forward(rank, action, key);
        break;
      case ActionKind::BACKWARD:
      case ActionKind::BACKWARD_INPUT:
        input_gradient(rank, action, key);
        break;
      case ActionKind::BACKWARD_WEIGHT:
        weight_gradient(rank, key);
        break;
    }
    ++state.next;
    return true;
  }

  // The rank's current action computes for its duration.
  void compute(int rank) {
    auto& state = ranks_[rank];
    const double duration = duration_(rank, state.next, actions_[rank][state.next]);
    state.clock += duration;
    state.busy += duration;
  }

  void forward(int rank, const Action& action, const MicrobatchChunk& key) {
    auto& state = ranks_[rank];
    const int c = action.chunk;
    if (shape_.stage_of(c) != rank) violation(rank, "chunk " + std::to_string(c) + " lives on stage " +
                                                        std::to_string(shape_.stage_of(c)));
    if (c > 0) {
      const bool local_input = shape_.stage_of(c - 1) == rank;
      const bool has_input = local_input ? state.forwarded.count({action.microbatch, c - 1}) > 0
                                         : state.activation_received.count(key) > 0;
      if (!has_input) violation(rank, "input activation not received from stage " +
                                          std::to_string(shape_.stage_of(c - 1)) + " (chunk " + std::to_string(c - 1) +
                                          ") before the forward");
    }
    if (++forward_count_[key] > 1) violation(rank, "forwarded a second time");
    state.forwarded.insert(key);
    state.in_flight++;
    state.max_in_flight = std::max(state.max_in_flight, state.in_flight);
    compute(rank);
  }

  void input_gradient(int rank, const Action& action, const MicrobatchChunk& key) {
    auto& state = ranks_[rank];
    const int c = action.chunk;
    if (!state.forwarded.count(key)) violation(rank, "backward before the forward of this micro-batch and chunk");
    if (!shape_.is_last_chunk(c)) {
      const bool local_gradient = shape_.stage_of(c + 1) == rank;
      const bool has_gradient = local_gradient ? state.input_gradient_done.count({action.microbatch, c + 1}) > 0
                                               : state.gradient_received.count(key) > 0;
      if (!has_gradient) violation(rank, "output gradient not received from stage " +
                                             std::to_string(shape_.stage_of(c + 1)) + " before the backward");
    }
    if (++input_gradient_count_[key] > 1) violation(rank, "backward run a second time");
    state.input_gradient_done.insert(key);
    if (action.kind == ActionKind::BACKWARD) {
      ++weight_gradient_count_[key];
      state.in_flight--;
      compute(rank);
    } else {
      compute(rank);
    }
  }

  void weight_gradient(int rank, const MicrobatchChunk& key) {
    auto& state = ranks_[rank];
    if (!state.input_gradient_done.count(key)) violation(rank, "weight gradient before the input gradient");
    if (++weight_gradient_count_[key] > 1) violation(rank, "weight gradient run a second time");
    state.in_flight--;
    compute(rank);
  }

  // Where the data of a transfer comes from and goes to: an activation of chunk c is produced
  // by chunk c-1, a gradient of chunk c's output by chunk c+1.
  int producer_stage(const Action& action) const {
    const bool gradient = action.kind == ActionKind::SEND_GRADIENT || action.kind == ActionKind::RECV_GRADIENT;
    return shape_.stage_of(gradient ? action.chunk + 1 : action.chunk - 1);
  }

  void send(int rank, const Action& action) {
    auto& state = ranks_[rank];
    const bool gradient = action.kind == ActionKind::SEND_GRADIENT;
    const int c = action.chunk;
    if ((gradient && shape_.is_last_chunk(c)) || (!gradient && c == 0)) {
      violation(rank, "nothing produces this transfer");
      return;
    }
    if (producer_stage(action) != rank) violation(rank, "sent from the wrong stage");
    if (action.peer_stage != shape_.stage_of(c))
      violation(rank, "peer should be stage " + std::to_string(shape_.stage_of(c)) + ", which runs chunk " +
                          std::to_string(c));
    const bool produced = gradient ? state.input_gradient_done.count({action.microbatch, c + 1}) > 0
                                   : state.forwarded.count({action.microbatch, c - 1}) > 0;
    if (!produced) violation(rank, "sent before the compute that produces it");
    const MessageKey key{gradient, action.microbatch, c};
    if (messages_.count(key)) {
      violation(rank, "a second send of the same micro-batch, chunk and kind");
      return;
    }
    messages_[key] = Message{rank, action.peer_stage, state.clock};
  }

  bool receive(int rank, const Action& action) {
    auto& state = ranks_[rank];
    const bool gradient = action.kind == ActionKind::RECV_GRADIENT;
    const MessageKey key{gradient, action.microbatch, action.chunk};
    auto found = messages_.find(key);
    if (found == messages_.end()) return false;  // blocked until the send is issued
    Message& message = found->second;
    if (++message.receives > 1) violation(rank, "received a second time");
    if (action.peer_stage != message.from_stage)
      violation(rank, "names stage " + std::to_string(action.peer_stage) + " but the send came from stage " +
                          std::to_string(message.from_stage));
    if (message.to_stage != rank) violation(rank, "the send went to stage " + std::to_string(message.to_stage));
    (gradient ? state.gradient_received : state.activation_received).insert({action.microbatch, action.chunk});
    state.clock = std::max(state.clock, message.sent_at);
    ++state.next;
    return true;
  }

  void describe_deadlock() {
    for (int rank = 0; rank < shape_.stages; ++rank) {
      const auto& state = ranks_[rank];
      if (state.next >= actions_[rank].size()) continue;
      report_.deadlock += "stage " + std::to_string(rank) + " waits at action " + std::to_string(state.next) + " " +
                          describe(actions_[rank][state.next]) + "; ";
    }
  }

  void check_totals() {
    for (int mb = 0; mb < shape_.microbatches; ++mb)
      for (int c = 0; c < shape_.chunks(); ++c) {
        const MicrobatchChunk key{mb, c};
        const std::string where = "micro-batch " + std::to_string(mb) + ", chunk " + std::to_string(c) + ": ";
        if (forward_count_[key] != 1)
          report_.violations.push_back(where + "forwarded " + std::to_string(forward_count_[key]) + " times");
        if (input_gradient_count_[key] != 1)
          report_.violations.push_back(where + "backwarded " + std::to_string(input_gradient_count_[key]) + " times");
        if (weight_gradient_count_[key] != 1)
          report_.violations.push_back(where + "weight gradient done " + std::to_string(weight_gradient_count_[key]) +
                                       " times");
      }
    for (const auto& [key, message] : messages_)
      if (message.receives != 1)
        report_.violations.push_back(std::string(std::get<0>(key) ? "gradient" : "activation") + " of micro-batch " +
                                     std::to_string(std::get<1>(key)) + ", chunk " + std::to_string(std::get<2>(key)) +
                                     " sent by stage " + std::to_string(message.from_stage) + " received " +
                                     std::to_string(message.receives) + " times");
  }

  // Exactly one flag per chunk a rank holds, on the last action writing that chunk's weights.
  void check_last_for_chunk() {
    for (int rank = 0; rank < shape_.stages; ++rank) {
      std::map<int, int> flags, last_writer;
      const auto& list = actions_[rank];
      for (size_t i = 0; i < list.size(); ++i) {
        if (writes_weight_gradients(list[i].kind)) last_writer[list[i].chunk] = static_cast<int>(i);
        if (!list[i].last_for_chunk) continue;
        ++flags[list[i].chunk];
        if (!writes_weight_gradients(list[i].kind))
          report_.violations.push_back("stage " + std::to_string(rank) + ", action " + std::to_string(i) + " " +
                                       describe(list[i]) + ": last_for_chunk on an action that writes no weights");
      }
      for (int local = 0; local < shape_.virtual_stages; ++local) {
        const int chunk = rank + local * shape_.stages;
        const std::string where = "stage " + std::to_string(rank) + ", chunk " + std::to_string(chunk) + ": ";
        if (flags[chunk] != 1) {
          report_.violations.push_back(where + std::to_string(flags[chunk]) +
                                       " actions marked last_for_chunk, expected 1");
        } else if (last_writer.count(chunk) && !list[last_writer[chunk]].last_for_chunk) {
          report_.violations.push_back(where + "last_for_chunk is not on the last weight-gradient action (" +
                                       std::to_string(last_writer[chunk]) + ")");
        }
      }
    }
  }

  void summarise_time() {
    double idle = 0;
    for (const auto& state : ranks_) report_.makespan = std::max(report_.makespan, state.clock);
    for (const auto& state : ranks_) {
      report_.max_in_flight.push_back(state.max_in_flight);
      report_.busy_time.push_back(state.busy);
      report_.finish_time.push_back(state.clock);
      idle += report_.makespan - state.busy;
    }
    if (report_.makespan > 0) report_.bubble_fraction = idle / (shape_.stages * report_.makespan);
  }

  const std::vector<std::vector<Action>>& actions_;
  PipelineShape shape_;
  ActionDuration duration_;
  std::vector<RankState> ranks_;
  std::map<MessageKey, Message> messages_;
  std::map<MicrobatchChunk, int> forward_count_, input_gradient_count_, weight_gradient_count_;
  SimulationReport report_;
};

}  // namespace

SimulationReport simulate_pipeline(const std::vector<std::vector<Action>>& rank_actions, const PipelineShape& shape,
                                   const UnitCosts& costs) {
  return Simulation(rank_actions, shape, [costs](int, size_t, const Action& action) {
           switch (action.kind) {
             case ActionKind::FORWARD: return costs.forward;
             case ActionKind::BACKWARD: return costs.backward;
             case ActionKind::BACKWARD_INPUT: return costs.backward_input;
             case ActionKind::BACKWARD_WEIGHT: return costs.backward_weight;
             default: return 0.0;
           }
         }).run();
}

SimulationReport replay_pipeline(const std::vector<std::vector<Action>>& rank_actions, const PipelineShape& shape,
                                 const ActionDuration& duration) {
  return Simulation(rank_actions, shape, duration).run();
}

}  // namespace keel_schedule
