// State a model moves by a rule once per optimizer step (model.h 0.19: step_tallies, end_step,
// own_state_*), loss-free balancing's per-expert bias for one: the tallies read after the step's
// backwards and summed over the data-parallel group, end_step after the update, and the named
// arrays checkpoints save and restore. A thin, checked face over the model's table, as
// StrategyState is over the strategy's, so checkpoint code needs nothing else of the trainer.
#pragma once

#include <keel/keel.h>

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace keel {

struct PluginInstances;

class ModelState {
 public:
  // `plugin` names the model in messages; a model without the slots has no state and no tallies.
  ModelState(PluginInstances& plugins, std::string plugin) : plugins_(plugins), plugin_(std::move(plugin)) {}

  // This rank's tallies of the step's micro-batches (empty: nothing to tally).
  std::vector<double> step_tallies() const;
  // After the strategy's step (applied) or a skipped one, with the tallies summed over dp.
  void end_step(const std::vector<double>& summed, bool applied);

  struct Array {
    std::string name;
    int64_t count = 0;
  };
  std::vector<Array> arrays() const;
  std::vector<float> read_array(int32_t index, int64_t count) const;
  void write_array(int32_t index, const std::vector<float>& values);

 private:
  bool keeps_state() const;
  PluginInstances& plugins_;
  std::string plugin_;
};

}  // namespace keel
