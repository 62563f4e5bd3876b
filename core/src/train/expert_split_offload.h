// One offload tier for the two halves of an expert-split strategy (parallel.ep > 1 with an
// "offload" section; expert_split_strategy.h). offload.h makes the tier its strategy's alone: the
// strategy names its extents as it likes, and its wait_all() waits on, and hands back the first
// error of, every request in flight. Two strategies on one tier would collide on names and take
// each other's errors, so each half gets a view: a table over the core's tier that puts a prefix
// before every extent name ("experts." for the expert half) and keeps the tickets its half
// submitted, so that its wait_all() waits on those alone. The views serialise their calls into
// the tier with one mutex, since each half may call from a thread of its own (a ZeRO reduction
// thread), and the contract lets one thread call the engine at a time. The tier's counters are its
// totals over both halves; the core destroys the tier, never a view.
#pragma once

#include <keel/offload.h>

#include <cstdint>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <vector>

namespace keel {

class SharedTier {
 public:
  SharedTier(const keel_offload_api* api, void* engine) : api_(api), engine_(engine) {}
  SharedTier(const SharedTier&) = delete;
  SharedTier& operator=(const SharedTier&) = delete;

  // A view whose extents are named `prefix` + the half's name; valid as long as this object.
  void* view(const std::string& prefix);
  // The table over views; static.
  static const keel_offload_api* table();

  struct View {
    SharedTier* shared;
    std::string prefix;
    std::set<uint64_t> in_flight;  // tickets this view submitted and has not waited on
  };

 private:
  friend struct SharedTierSlots;
  const keel_offload_api* api_;
  void* engine_;
  std::mutex calls_;  // one caller in the engine at a time (offload.h)
  std::vector<std::unique_ptr<View>> views_;
};

}  // namespace keel
