// One strategy table over two parts of the model's parameters, each part served by a strategy
// of its own. The core uses it where one group of tensors must live apart from the rest:
// experts over their expert-data-parallel group (expert_split_strategy.h), frozen tensors held by
// the core with no gradient or optimizer state (frozen_split_strategy.h). The split hands each
// part the model's specs that belong to it, then serves the model's acquire and release by
// asking both parts for their tensors of the layer and interleaving them back in spec order,
// maps the core's parameter indices to each part's, and forwards every other slot to one part
// or both. Its own arrays are the first part's, then the second's under a prefix.
#pragma once

#include <keel/keel.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

namespace keel {

struct SplitParts;

class SplitStrategy {
 public:
  virtual ~SplitStrategy();
  SplitStrategy(const SplitStrategy&) = delete;
  SplitStrategy& operator=(const SplitStrategy&) = delete;

  // The strategy table over SplitStrategy objects (its destroy deletes one); static.
  static const keel_strategy_api* table();

 protected:
  // Puts each of the model's `n_params` parameters in part 1 where `second(spec)`, else part 0.
  // `who` opens every message (the config file and the key that asked for the split).
  SplitStrategy(const keel_param_spec* params, size_t n_params, int32_t n_layers,
                const std::function<bool(const keel_param_spec&)>& second, const std::string& who);

  // The specs of part `which`, in the core's order: what its strategy is created over.
  const std::vector<keel_param_spec>& part_specs(int which) const;
  // Gives part `which` its strategy object (created over part_specs(which)), which the split now
  // owns; `plugin` names it in messages, `own_prefix` goes before its own arrays' names. A
  // strategy whose replicas step on their own is refused with `why_not_independent`.
  void attach(int which, const keel_strategy_api* api, void* obj, const std::string& plugin,
              const std::string& own_prefix, const std::string& why_not_independent);
  // Destroys both parts' strategies; for a subclass whose members they use (an offload tier).
  void destroy_parts();

  // The gradient norm from each part's sum: their sum unless a subclass knows better.
  virtual double join_norms(double first, double second) { return first + second; }
  // Which keel_strategy_info.holds_whole bits the split may pass on (both parts must have them).
  uint32_t holds_whole_mask_ = ~0u;

 private:
  friend struct SplitSlots;
  std::unique_ptr<SplitParts> parts_;
};

}  // namespace keel
