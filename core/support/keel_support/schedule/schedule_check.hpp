// Every rank's pipeline action list (keel/schedule.h) run together without a model, to
// check a schedule before anything trusts it. The core runs it at start-up and in `keel
// validate` on the lists a schedule plugin builds, `keel schedule-check` runs it for a plugin's
// author, and a schedule's own tests can include this header alone.
//
// What it models is what the core's executor does: sends are buffered (issued without waiting
// for the receive), a receive blocks until its send was issued, and a rank runs its list in
// order. What it refuses: a deadlock (every unfinished rank waiting on a receive); a send or a
// receive without its partner, sent twice, or with its own stage; a compute action on a chunk
// another stage holds; a backward before its forward or before its output gradient arrived;
// any (micro-batch, chunk) not forwarded, back-propagated and weight-graded exactly once; and a
// LAST_FOR_CHUNK flag that is missing, doubled or not on the chunk's last weight-gradient
// action. A unit-time model (forward 1, backward 2; or input 1 + weight 1) gives the bubble on
// the side.
#pragma once

#include <keel/schedule.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace keel_support {

using ScheduleLists = std::vector<std::vector<keel_schedule_action>>;  // [stage] -> that rank's list

struct ScheduleCosts {
  double forward = 1;
  double backward = 2;
  double backward_input = 1;
  double backward_weight = 1;
};

struct ScheduleReport {
  // Empty when every rank ran to its end; otherwise, for each stuck rank, the action it waits on.
  std::string deadlock;
  // Every broken rule, each naming the stage, the action's position and what was expected, in
  // the order found: those met while running first, then what was missing at the end.
  std::vector<std::string> violations;
  size_t violations_while_running = 0;  // the first this many of `violations`
  // Per stage: the most (micro-batch, chunk) pairs forwarded whose weight gradient was not yet
  // done, i.e. the activation sets held at once.
  std::vector<int> max_in_flight;
  std::vector<double> busy_time;    // per stage, unit-time model
  std::vector<double> finish_time;  // per stage: when its last action ended
  double makespan = 0;              // end of the last stage
  // Idle time over all stages / (stages * makespan). For GPipe and 1F1B: (p-1)/(m+p-1).
  double bubble_fraction = 0;

  bool ok() const { return deadlock.empty() && violations.empty(); }
  size_t problem_count() const { return violations.size() + (deadlock.empty() ? 0 : 1); }
  // The problem a reader should see first: one met while running, else the deadlock, else the
  // first thing found missing at the end. Empty when ok().
  std::string first_problem() const {
    if (violations_while_running > 0) return violations.front();
    if (!deadlock.empty()) return "deadlock: " + deadlock.substr(0, deadlock.size() - 2);  // without the last "; "
    return violations.empty() ? std::string() : violations.front();
  }
};

// How long the compute action at `index` of `stage`'s list takes (called for compute actions
// only: transfers take no time, a receive waits for its send). For replaying measured costs.
using ScheduleDuration = std::function<double(int stage, size_t index, const keel_schedule_action& action)>;

// "F(mb 2, chunk 1)", "SEND_ACT(mb 0, chunk 1, to 1)", with " last" when flagged.
inline std::string describe_action(const keel_schedule_action& action) {
  static const char* const kNames[] = {"F", "B", "BI", "BW", "SEND_ACT", "RECV_ACT", "SEND_GRAD", "RECV_GRAD"};
  const bool known = action.kind >= KEEL_ACTION_FORWARD && action.kind <= KEEL_ACTION_RECV_GRADIENT;
  std::string text = (known ? std::string(kNames[action.kind]) : "KIND_" + std::to_string(action.kind)) + "(mb " +
                     std::to_string(action.microbatch) + ", chunk " + std::to_string(action.chunk);
  if (action.kind == KEEL_ACTION_SEND_ACTIVATION || action.kind == KEEL_ACTION_SEND_GRADIENT)
    text += ", to " + std::to_string(action.peer_stage);
  if (action.kind == KEEL_ACTION_RECV_ACTIVATION || action.kind == KEEL_ACTION_RECV_GRADIENT)
    text += ", from " + std::to_string(action.peer_stage);
  text += ")";
  if (action.flags & KEEL_ACTION_LAST_FOR_CHUNK) text += " last";
  return text;
}

namespace schedule_check_detail {

inline bool writes_weight_gradients(int32_t kind) {
  return kind == KEEL_ACTION_BACKWARD || kind == KEEL_ACTION_BACKWARD_WEIGHT;
}

// Ranks advance round-robin, each as far as it can; since every rank is sequential and a
// receive's time is the later of its rank's clock and its send's time, the result does not
// depend on the order ranks advance in. State is kept in flat arrays indexed by (micro-batch,
// chunk), so checking a list of a million actions takes well under a second.
class Simulation {
 public:
  Simulation(const ScheduleLists& lists, int32_t stages, int32_t microbatches, int32_t virtual_stages,
             ScheduleDuration duration)
      : lists_(lists), stages_(stages), microbatches_(microbatches), chunks_(int64_t(stages) * virtual_stages),
        virtual_stages_(virtual_stages), duration_(std::move(duration)) {}

  ScheduleReport run() {
    if (stages_ < 1 || microbatches_ < 1 || virtual_stages_ < 1) {
      report_.violations.push_back("the shape needs pp, micro-batches and virtual_stages of at least 1 (pp " +
                                   std::to_string(stages_) + ", micro-batches " + std::to_string(microbatches_) +
                                   ", virtual_stages " + std::to_string(virtual_stages_) + ")");
      return report_;
    }
    if (int64_t(lists_.size()) != stages_) {
      report_.violations.push_back("expected one action list per stage (" + std::to_string(stages_) + "), got " +
                                   std::to_string(lists_.size()));
      return report_;
    }
    const size_t pairs = size_t(microbatches_) * size_t(chunks_);
    forwards_.assign(pairs, 0);
    input_gradients_.assign(pairs, 0);
    weight_gradients_.assign(pairs, 0);
    activation_arrived_.assign(pairs, 0);
    gradient_arrived_.assign(pairs, 0);
    messages_.assign(2 * pairs, Message{});
    ranks_.assign(size_t(stages_), RankState{});
    for (bool progress = true; progress;) {
      progress = false;
      for (int rank = 0; rank < stages_; ++rank)
        while (ranks_[rank].next < lists_[rank].size() && step(rank)) progress = true;
    }
    report_.violations_while_running = report_.violations.size();
    describe_deadlock();
    check_totals();
    check_last_for_chunk();
    summarise_time();
    return report_;
  }

 private:
  struct Message {
    bool sent = false;
    int from_stage = -1;
    int to_stage = -1;
    double sent_at = 0;
    int receives = 0;
  };
  struct RankState {
    size_t next = 0;
    double clock = 0;
    double busy = 0;
    int in_flight = 0;
    int max_in_flight = 0;
  };

  int stage_of(int64_t chunk) const { return int(chunk % stages_); }
  bool is_last_chunk(int64_t chunk) const { return chunk == chunks_ - 1; }
  size_t pair(int64_t microbatch, int64_t chunk) const { return size_t(microbatch * chunks_ + chunk); }

  void violation(int rank, const std::string& what) {
    report_.violations.push_back("stage " + std::to_string(rank) + ", action " + std::to_string(ranks_[rank].next) +
                                 " " + describe_action(lists_[rank][ranks_[rank].next]) + ": " + what);
  }

  // Runs the rank's next action; false when it is a receive whose send was not issued yet.
  bool step(int rank) {
    auto& state = ranks_[rank];
    const keel_schedule_action& action = lists_[rank][state.next];
    if (action.kind < KEEL_ACTION_FORWARD || action.kind > KEEL_ACTION_RECV_GRADIENT) {
      violation(rank, "unknown action kind " + std::to_string(action.kind) + " (expected KEEL_ACTION_FORWARD .. "
                      "KEEL_ACTION_RECV_GRADIENT, 0 .. 7)");
      ++state.next;
      return true;
    }
    if (action.microbatch < 0 || action.microbatch >= microbatches_ || action.chunk < 0 || action.chunk >= chunks_) {
      violation(rank, "micro-batch or chunk out of range (micro-batches " + std::to_string(microbatches_) +
                          ", chunks " + std::to_string(chunks_) + ")");
      ++state.next;
      return true;
    }
    if (action.flags & ~uint32_t(KEEL_ACTION_LAST_FOR_CHUNK))
      violation(rank, "unknown flag bits " + std::to_string(action.flags) + " (expected only KEEL_ACTION_LAST_FOR_CHUNK)");
    const bool transfer = action.kind >= KEEL_ACTION_SEND_ACTIVATION;
    if (transfer && action.peer_stage == rank) {
      violation(rank, "a transfer with its own stage (chunks on one stage pass data without one)");
      ++state.next;
      return true;
    }
    switch (action.kind) {
      case KEEL_ACTION_RECV_ACTIVATION:
      case KEEL_ACTION_RECV_GRADIENT:
        return receive(rank, action);
      case KEEL_ACTION_SEND_ACTIVATION:
      case KEEL_ACTION_SEND_GRADIENT:
        send(rank, action);
        break;
      case KEEL_ACTION_FORWARD:
        forward(rank, action);
        break;
      case KEEL_ACTION_BACKWARD:
      case KEEL_ACTION_BACKWARD_INPUT:
        input_gradient(rank, action);
        break;
      default:
        weight_gradient(rank, action);
        break;
    }
    ++state.next;
    return true;
  }

  // The rank's current action computes for its duration.
  void compute(int rank) {
    auto& state = ranks_[rank];
    const double duration = duration_(rank, state.next, lists_[rank][state.next]);
    state.clock += duration;
    state.busy += duration;
  }

  void check_home(int rank, int32_t chunk) {
    if (stage_of(chunk) != rank)
      violation(rank, "chunk " + std::to_string(chunk) + " lives on stage " + std::to_string(stage_of(chunk)));
  }

  void forward(int rank, const keel_schedule_action& action) {
    auto& state = ranks_[rank];
    const int32_t c = action.chunk, mb = action.microbatch;
    check_home(rank, c);
    if (c > 0) {
      const bool local_input = stage_of(c - 1) == rank;
      const bool has_input = local_input ? forwards_[pair(mb, c - 1)] > 0 : activation_arrived_[pair(mb, c)] > 0;
      if (!has_input)
        violation(rank, "input activation not received from stage " + std::to_string(stage_of(c - 1)) + " (chunk " +
                            std::to_string(c - 1) + ") before the forward");
    }
    if (++forwards_[pair(mb, c)] > 1) violation(rank, "forwarded a second time");
    state.max_in_flight = std::max(state.max_in_flight, ++state.in_flight);
    compute(rank);
  }

  void input_gradient(int rank, const keel_schedule_action& action) {
    auto& state = ranks_[rank];
    const int32_t c = action.chunk, mb = action.microbatch;
    check_home(rank, c);
    if (!forwards_[pair(mb, c)]) violation(rank, "backward before the forward of this micro-batch and chunk");
    if (!is_last_chunk(c)) {
      const bool local_gradient = stage_of(c + 1) == rank;
      const bool has_gradient =
          local_gradient ? input_gradients_[pair(mb, c + 1)] > 0 : gradient_arrived_[pair(mb, c)] > 0;
      if (!has_gradient)
        violation(rank, "output gradient not received from stage " + std::to_string(stage_of(c + 1)) +
                            " before the backward");
    }
    if (++input_gradients_[pair(mb, c)] > 1) violation(rank, "backward run a second time");
    if (action.kind == KEEL_ACTION_BACKWARD) {
      ++weight_gradients_[pair(mb, c)];
      state.in_flight--;
    }
    compute(rank);
  }

  void weight_gradient(int rank, const keel_schedule_action& action) {
    auto& state = ranks_[rank];
    const size_t key = pair(action.microbatch, action.chunk);
    check_home(rank, action.chunk);
    if (!input_gradients_[key]) violation(rank, "weight gradient before the input gradient");
    if (++weight_gradients_[key] > 1) violation(rank, "weight gradient run a second time");
    state.in_flight--;
    compute(rank);
  }

  static bool carries_gradient(const keel_schedule_action& action) {
    return action.kind == KEEL_ACTION_SEND_GRADIENT || action.kind == KEEL_ACTION_RECV_GRADIENT;
  }
  size_t message_index(const keel_schedule_action& action) const {
    return 2 * pair(action.microbatch, action.chunk) + (carries_gradient(action) ? 1 : 0);
  }

  // An activation of chunk c is produced by chunk c-1, a gradient of chunk c's output by c+1.
  void send(int rank, const keel_schedule_action& action) {
    auto& state = ranks_[rank];
    const bool gradient = carries_gradient(action);
    const int32_t c = action.chunk, mb = action.microbatch;
    if ((gradient && is_last_chunk(c)) || (!gradient && c == 0)) {
      violation(rank, "nothing produces this transfer");
      return;
    }
    if (stage_of(gradient ? c + 1 : c - 1) != rank) violation(rank, "sent from the wrong stage");
    if (action.peer_stage != stage_of(c))
      violation(rank, "peer should be stage " + std::to_string(stage_of(c)) + ", which runs chunk " + std::to_string(c));
    const bool produced = gradient ? input_gradients_[pair(mb, c + 1)] > 0 : forwards_[pair(mb, c - 1)] > 0;
    if (!produced) violation(rank, "sent before the compute that produces it");
    Message& message = messages_[message_index(action)];
    if (message.sent) {
      violation(rank, "a second send of the same micro-batch, chunk and kind");
      return;
    }
    message = Message{true, rank, action.peer_stage, state.clock, 0};
  }

  bool receive(int rank, const keel_schedule_action& action) {
    auto& state = ranks_[rank];
    Message& message = messages_[message_index(action)];
    if (!message.sent) return false;  // blocked until the send is issued
    if (++message.receives > 1) violation(rank, "received a second time");
    if (action.peer_stage != message.from_stage)
      violation(rank, "names stage " + std::to_string(action.peer_stage) + " but the send came from stage " +
                          std::to_string(message.from_stage));
    if (message.to_stage != rank) violation(rank, "the send went to stage " + std::to_string(message.to_stage));
    (carries_gradient(action) ? gradient_arrived_ : activation_arrived_)[pair(action.microbatch, action.chunk)] = 1;
    state.clock = std::max(state.clock, message.sent_at);
    ++state.next;
    return true;
  }

  void describe_deadlock() {
    for (int rank = 0; rank < stages_; ++rank) {
      const auto& state = ranks_[rank];
      if (state.next >= lists_[rank].size()) continue;
      report_.deadlock += "stage " + std::to_string(rank) + " waits at action " + std::to_string(state.next) + " " +
                          describe_action(lists_[rank][state.next]) + "; ";
    }
  }

  // Only the first few of each kind are listed: a list that is wholly wrong would otherwise
  // produce one line per (micro-batch, chunk).
  void missing(size_t& listed, const std::string& what) {
    if (++listed <= 8) report_.violations.push_back(what);
    else if (listed == 9) report_.violations.push_back("... and more like the above");
  }

  void check_totals() {
    size_t listed = 0;
    for (int64_t mb = 0; mb < microbatches_; ++mb)
      for (int64_t c = 0; c < chunks_; ++c) {
        const size_t key = pair(mb, c);
        const std::string where = "micro-batch " + std::to_string(mb) + ", chunk " + std::to_string(c) + ": ";
        if (forwards_[key] != 1) missing(listed, where + "forwarded " + std::to_string(forwards_[key]) + " times");
        if (input_gradients_[key] != 1)
          missing(listed, where + "backwarded " + std::to_string(input_gradients_[key]) + " times");
        if (weight_gradients_[key] != 1)
          missing(listed, where + "weight gradient done " + std::to_string(weight_gradients_[key]) + " times");
      }
    for (size_t i = 0; i < messages_.size(); ++i) {
      const Message& message = messages_[i];
      if (!message.sent || message.receives == 1) continue;
      const int64_t mb = int64_t(i / 2) / chunks_, c = int64_t(i / 2) % chunks_;
      missing(listed, std::string(i % 2 ? "gradient" : "activation") + " of micro-batch " + std::to_string(mb) +
                          ", chunk " + std::to_string(c) + " sent by stage " + std::to_string(message.from_stage) +
                          " received " + std::to_string(message.receives) + " times");
    }
  }

  // Exactly one flag per chunk a rank holds, on the last action writing that chunk's weights.
  void check_last_for_chunk() {
    for (int rank = 0; rank < stages_; ++rank) {
      const auto& list = lists_[rank];
      std::vector<int> flags(size_t(virtual_stages_), 0);
      std::vector<int64_t> last_writer(size_t(virtual_stages_), -1);
      for (size_t i = 0; i < list.size(); ++i) {
        const keel_schedule_action& action = list[i];
        const bool mine = action.chunk >= 0 && action.chunk < chunks_ && stage_of(action.chunk) == rank;
        const size_t local = mine ? size_t(action.chunk / stages_) : 0;
        if (mine && writes_weight_gradients(action.kind)) last_writer[local] = int64_t(i);
        if (!(action.flags & KEEL_ACTION_LAST_FOR_CHUNK)) continue;
        if (!writes_weight_gradients(action.kind) || !mine) {
          report_.violations.push_back("stage " + std::to_string(rank) + ", action " + std::to_string(i) + " " +
                                       describe_action(action) + ": last_for_chunk on an action that writes no "
                                       "weights of this stage");
          continue;
        }
        ++flags[local];
      }
      for (int32_t local = 0; local < virtual_stages_; ++local) {
        const int64_t chunk = rank + int64_t(local) * stages_;
        const std::string where = "stage " + std::to_string(rank) + ", chunk " + std::to_string(chunk) + ": ";
        if (flags[local] != 1) {
          report_.violations.push_back(where + std::to_string(flags[local]) +
                                       " actions marked last_for_chunk, expected 1");
        } else if (last_writer[local] >= 0 && !(list[size_t(last_writer[local])].flags & KEEL_ACTION_LAST_FOR_CHUNK)) {
          report_.violations.push_back(where + "last_for_chunk is not on the last weight-gradient action (" +
                                       std::to_string(last_writer[local]) + ")");
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
    if (report_.makespan > 0) report_.bubble_fraction = idle / (stages_ * report_.makespan);
  }

  const ScheduleLists& lists_;
  int32_t stages_, microbatches_;
  int64_t chunks_;
  int32_t virtual_stages_;
  ScheduleDuration duration_;
  std::vector<RankState> ranks_;
  std::vector<Message> messages_;  // [2 * pair + is gradient]
  std::vector<uint8_t> activation_arrived_, gradient_arrived_;
  std::vector<int> forwards_, input_gradients_, weight_gradients_;
  ScheduleReport report_;
};

}  // namespace schedule_check_detail

// Runs every stage's list with the given compute durations.
inline ScheduleReport replay_schedule(const ScheduleLists& lists, int32_t stages, int32_t microbatches,
                                      int32_t virtual_stages, const ScheduleDuration& duration) {
  return schedule_check_detail::Simulation(lists, stages, microbatches, virtual_stages, duration).run();
}

// Runs every stage's list with unit costs: the check, plus the bubble of the unit-time model.
inline ScheduleReport simulate_schedule(const ScheduleLists& lists, int32_t stages, int32_t microbatches,
                                        int32_t virtual_stages, const ScheduleCosts& costs = {}) {
  return replay_schedule(lists, stages, microbatches, virtual_stages,
                         [costs](int, size_t, const keel_schedule_action& action) {
                           switch (action.kind) {
                             case KEEL_ACTION_FORWARD: return costs.forward;
                             case KEEL_ACTION_BACKWARD: return costs.backward;
                             case KEEL_ACTION_BACKWARD_INPUT: return costs.backward_input;
                             case KEEL_ACTION_BACKWARD_WEIGHT: return costs.backward_weight;
                             default: return 0.0;
                           }
                         });
}

}  // namespace keel_support
