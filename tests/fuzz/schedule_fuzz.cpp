// Seeded fuzzing of the schedule simulator (keel_support/schedule/schedule_check.hpp), which the core
// trusts to refuse any action list that would hang or train wrong. Inputs are the built-in
// schedules' lists with one to three random mutations (an action dropped, duplicated, moved
// within or across stages, a field changed, the last-for-chunk flag toggled) and, one in ten,
// lists of random actions. Each must end with the simulator's verdict agreeing with an
// independent oracle written another way: counts over the whole input, per-stage order rules
// by list position, and deadlock as a cycle in the graph of list order plus send -> receive
// edges (Kahn's algorithm), where the simulator advances ranks round-robin. Every unmutated
// built-in list must be accepted, and at least a third of the mutated inputs refused, so a
// simulator that accepts or refuses everything fails.
//
//   keel-schedule-fuzz --seed S --count N
#include <keel_support/schedule/schedule_check.hpp>

#include <cstdint>
#include <cstdlib>
#include <iostream>
#include <map>
#include <random>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include "schedules.hpp"
#include "schedule_abi.hpp"

namespace {

using keel_support::ScheduleLists;
using Action = keel_schedule_action;

struct Shape {
  int32_t stages, microbatches, virtual_stages;
  int32_t chunks() const { return stages * virtual_stages; }
  int32_t stage_of(int32_t chunk) const { return chunk % stages; }
};

bool is_send(int32_t kind) { return kind == KEEL_ACTION_SEND_ACTIVATION || kind == KEEL_ACTION_SEND_GRADIENT; }
bool is_receive(int32_t kind) { return kind == KEEL_ACTION_RECV_ACTIVATION || kind == KEEL_ACTION_RECV_GRADIENT; }
bool is_gradient(int32_t kind) { return kind == KEEL_ACTION_SEND_GRADIENT || kind == KEEL_ACTION_RECV_GRADIENT; }
bool writes_weights(int32_t kind) { return kind == KEEL_ACTION_BACKWARD || kind == KEEL_ACTION_BACKWARD_WEIGHT; }

// The oracle: true when the lists can run. Written from schedule.h's rules, not from the simulator.
bool oracle_accepts(const ScheduleLists& lists, const Shape& shape) {
  const int32_t p = shape.stages, m = shape.microbatches, chunks = shape.chunks();
  if (int32_t(lists.size()) != p) return false;
  using Pair = std::pair<int32_t, int32_t>;                 // micro-batch, chunk
  using Transfer = std::tuple<bool, int32_t, int32_t>;      // gradient, micro-batch, chunk
  std::map<Pair, int> forwards, input_gradients, weight_gradients;
  std::map<Transfer, std::vector<std::pair<int32_t, size_t>>> sends, receives;  // -> (stage, index)
  // 1. Every field in range; compute on its own chunks; transfers between the right stages.
  for (int32_t s = 0; s < p; ++s)
    for (size_t i = 0; i < lists[s].size(); ++i) {
      const Action& a = lists[s][i];
      if (a.kind < 0 || a.kind > 7 || a.microbatch < 0 || a.microbatch >= m || a.chunk < 0 || a.chunk >= chunks ||
          (a.flags & ~1u))
        return false;
      const Pair key{a.microbatch, a.chunk};
      if (is_send(a.kind) || is_receive(a.kind)) {
        const bool gradient = is_gradient(a.kind);
        if (gradient ? a.chunk == chunks - 1 : a.chunk == 0) return false;  // nothing produces it
        const int32_t producer = shape.stage_of(gradient ? a.chunk + 1 : a.chunk - 1);
        const int32_t consumer = shape.stage_of(a.chunk);
        if (producer == consumer) return false;
        if (is_send(a.kind) ? (s != producer || a.peer_stage != consumer) : (s != consumer || a.peer_stage != producer))
          return false;
        (is_send(a.kind) ? sends : receives)[{gradient, a.microbatch, a.chunk}].push_back({s, i});
        continue;
      }
      if (shape.stage_of(a.chunk) != s) return false;
      if (a.kind == KEEL_ACTION_FORWARD) ++forwards[key];
      if (a.kind == KEEL_ACTION_BACKWARD || a.kind == KEEL_ACTION_BACKWARD_INPUT) ++input_gradients[key];
      if (writes_weights(a.kind)) ++weight_gradients[key];
    }
  // 2. Counts: every pair computed once each way; every transfer sent once and received once.
  for (int32_t mb = 0; mb < m; ++mb)
    for (int32_t c = 0; c < chunks; ++c)
      if (forwards[{mb, c}] != 1 || input_gradients[{mb, c}] != 1 || weight_gradients[{mb, c}] != 1) return false;
  for (const auto& [key, where] : sends)
    if (where.size() != 1 || receives[key].size() != 1) return false;
  for (const auto& [key, where] : receives)
    if (where.size() != 1 || sends[key].size() != 1) return false;
  // 3. Order within each stage's list: inputs before the compute that reads them, products
  //    before the send that carries them, and last-for-chunk on each chunk's last weight write.
  for (int32_t s = 0; s < p; ++s) {
    std::set<Pair> forwarded, input_done, activation_in, gradient_in;
    std::map<int32_t, size_t> last_write;
    std::map<int32_t, std::vector<size_t>> flagged;
    for (size_t i = 0; i < lists[s].size(); ++i) {
      const Action& a = lists[s][i];
      const int32_t mb = a.microbatch, c = a.chunk;
      const bool local_previous = c > 0 && shape.stage_of(c - 1) == s;
      const bool local_next = c < chunks - 1 && shape.stage_of(c + 1) == s;
      if (a.flags & 1u) {
        if (!writes_weights(a.kind)) return false;
        flagged[c].push_back(i);
      }
      switch (a.kind) {
        case KEEL_ACTION_FORWARD:
          if (c > 0 && !(local_previous ? forwarded.count({mb, c - 1}) : activation_in.count({mb, c}))) return false;
          forwarded.insert({mb, c});
          break;
        case KEEL_ACTION_BACKWARD:
        case KEEL_ACTION_BACKWARD_INPUT:
          if (!forwarded.count({mb, c})) return false;
          if (c < chunks - 1 && !(local_next ? input_done.count({mb, c + 1}) : gradient_in.count({mb, c}))) return false;
          input_done.insert({mb, c});
          break;
        case KEEL_ACTION_BACKWARD_WEIGHT:
          if (!input_done.count({mb, c})) return false;
          break;
        case KEEL_ACTION_SEND_ACTIVATION:
          if (!forwarded.count({mb, c - 1})) return false;
          break;
        case KEEL_ACTION_SEND_GRADIENT:
          if (!input_done.count({mb, c + 1})) return false;
          break;
        case KEEL_ACTION_RECV_ACTIVATION: activation_in.insert({mb, c}); break;
        case KEEL_ACTION_RECV_GRADIENT: gradient_in.insert({mb, c}); break;
      }
      if (writes_weights(a.kind)) last_write[c] = i;
    }
    for (int32_t local = 0; local < shape.virtual_stages; ++local) {
      const int32_t c = s + local * p;
      if (flagged[c].size() != 1 || flagged[c][0] != last_write[c]) return false;
    }
  }
  // 4. No deadlock: list order plus send -> receive edges form no cycle.
  std::vector<size_t> offset(p + 1, 0);
  for (int32_t s = 0; s < p; ++s) offset[s + 1] = offset[s] + lists[s].size();
  std::vector<std::vector<size_t>> edges(offset[p]);
  std::vector<int> incoming(offset[p], 0);
  auto edge = [&](size_t from, size_t to) { edges[from].push_back(to), ++incoming[to]; };
  for (int32_t s = 0; s < p; ++s)
    for (size_t i = 0; i + 1 < lists[s].size(); ++i) edge(offset[s] + i, offset[s] + i + 1);
  for (const auto& [key, from] : sends) {
    const auto& to = receives[key];
    edge(offset[from[0].first] + from[0].second, offset[to[0].first] + to[0].second);
  }
  std::vector<size_t> ready;
  for (size_t n = 0; n < incoming.size(); ++n)
    if (!incoming[n]) ready.push_back(n);
  size_t done = 0;
  while (!ready.empty()) {
    const size_t n = ready.back();
    ready.pop_back();
    ++done;
    for (size_t next : edges[n])
      if (--incoming[next] == 0) ready.push_back(next);
  }
  return done == offset[p];
}

struct Fuzzer {
  std::mt19937_64 random;
  int32_t pick(int32_t low, int32_t high) { return std::uniform_int_distribution<int32_t>(low, high)(random); }

  Action random_action(const Shape& shape) {
    return Action{pick(-1, 8), pick(-1, shape.microbatches), pick(-1, shape.chunks()), pick(-1, shape.stages),
                  uint32_t(pick(0, 9) == 0 ? pick(0, 3) : pick(0, 1))};
  }

  // A built-in schedule's lists for a shape it can run.
  bool built_in(Shape& shape, ScheduleLists& lists) {
    const auto& names = keel_schedule::schedule_names();
    const std::string name = names[size_t(pick(0, int32_t(names.size()) - 1))];
    shape = Shape{pick(1, 4), pick(1, 6), pick(1, 2)};
    if (!keel_schedule::shape_problem(name, {shape.stages, shape.microbatches, 0, shape.virtual_stages}).empty())
      return false;
    lists.assign(size_t(shape.stages), {});
    for (int32_t s = 0; s < shape.stages; ++s)
      for (const auto& action :
           keel_schedule::build_schedule(name, shape.stages, shape.microbatches, s, shape.virtual_stages))
        lists[size_t(s)].push_back(keel_schedule::action_to_abi(action));
    return true;
  }

  void mutate(ScheduleLists& lists, const Shape& shape) {
    auto& list = lists[size_t(pick(0, int32_t(lists.size()) - 1))];
    if (list.empty()) {
      list.push_back(random_action(shape));
      return;
    }
    const size_t i = size_t(pick(0, int32_t(list.size()) - 1));
    const size_t j = size_t(pick(0, int32_t(list.size()) - 1));
    switch (pick(0, 7)) {
      case 0: list.erase(list.begin() + long(i)); break;
      case 1: list.insert(list.begin() + long(j), list[i]); break;
      case 2: std::swap(list[i], list[j]); break;
      case 3: if (i + 1 < list.size()) std::swap(list[i], list[i + 1]); break;
      case 4: list[i].flags ^= KEEL_ACTION_LAST_FOR_CHUNK; break;
      case 5: list[i].microbatch = pick(0, shape.microbatches - 1); break;
      case 6: list[i].peer_stage = pick(-1, shape.stages); break;
      default: {  // move to another stage's list
        const Action moved = list[i];
        list.erase(list.begin() + long(i));
        auto& other = lists[size_t(pick(0, int32_t(lists.size()) - 1))];
        other.insert(other.begin() + long(pick(0, int32_t(other.size()))), moved);
      }
    }
  }
};

std::string show(const ScheduleLists& lists) {
  std::string text;
  for (size_t s = 0; s < lists.size(); ++s) {
    text += "  stage " + std::to_string(s) + ":";
    for (const auto& a : lists[s]) text += " " + keel_support::describe_action(a);
    text += "\n";
  }
  return text;
}

}  // namespace

int main(int argc, char** argv) {
  uint64_t seed = 1;
  long count = 1000;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string flag = argv[i];
    if (flag == "--seed") seed = std::strtoull(argv[i + 1], nullptr, 10);
    else if (flag == "--count") count = std::strtol(argv[i + 1], nullptr, 10);
    else {
      std::cerr << "usage: keel-schedule-fuzz --seed S --count N\n";
      return 2;
    }
  }
  Fuzzer fuzzer{std::mt19937_64(seed)};
  long built_in = 0, mutated = 0, refused = 0, random_lists = 0;
  for (long n = 0; n < count; ++n) {
    Shape shape{};
    ScheduleLists lists;
    if (fuzzer.pick(0, 9) == 0) {
      shape = Shape{fuzzer.pick(1, 3), fuzzer.pick(1, 3), fuzzer.pick(1, 2)};
      lists.assign(size_t(shape.stages), {});
      for (auto& list : lists)
        for (int32_t k = fuzzer.pick(0, 10); k > 0; --k) list.push_back(fuzzer.random_action(shape));
      ++random_lists;
    } else {
      if (!fuzzer.built_in(shape, lists)) continue;
      const auto report = keel_support::simulate_schedule(lists, shape.stages, shape.microbatches, shape.virtual_stages);
      if (!report.ok() || !oracle_accepts(lists, shape)) {
        std::cerr << "FAIL input " << n << ": a built-in list was refused (simulator: " << report.first_problem()
                  << ")\n" << show(lists);
        return 1;
      }
      ++built_in;
      for (int32_t k = fuzzer.pick(1, 3); k > 0; --k) fuzzer.mutate(lists, shape);
      ++mutated;
    }
    const auto report = keel_support::simulate_schedule(lists, shape.stages, shape.microbatches, shape.virtual_stages);
    const bool expected = oracle_accepts(lists, shape);
    if (report.ok() != expected) {
      std::cerr << "FAIL input " << n << " (seed " << seed << "): the simulator " << (report.ok() ? "accepts" : "refuses")
                << " what the oracle " << (expected ? "accepts" : "refuses") << " (pp " << shape.stages
                << ", micro-batches " << shape.microbatches << ", virtual_stages " << shape.virtual_stages
                << "); simulator: " << report.first_problem() << "\n" << show(lists);
      return 1;
    }
    if (!report.ok() && report.first_problem().empty()) {
      std::cerr << "FAIL input " << n << ": refused without a message\n" << show(lists);
      return 1;
    }
    refused += report.ok() ? 0 : 1;
  }
  std::cout << built_in << " built-in lists accepted, " << mutated << " mutated and " << random_lists
            << " random inputs, " << refused << " refused, every verdict the oracle's\n";
  if (built_in == 0 || refused * 3 < mutated) {
    std::cerr << "FAIL: too few inputs were compared or refused to trust the run\n";
    return 1;
  }
  return 0;
}
