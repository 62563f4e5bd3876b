// What a strategy holds of the run's state, as checkpoints read and write it: the flat ranges of
// each parameter and optimizer state slot this rank owns, and the strategy's own named arrays
// (strategy.h, ABI 0.5). A thin, checked face over the strategy's table, so the checkpoint code
// needs nothing else of the trainer.
#pragma once

#include <keel/keel.h>

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace keel {

struct PluginInstances;

class StrategyState {
 public:
  // `plugin` names the strategy in messages.
  StrategyState(PluginInstances& plugins, std::string plugin) : plugins_(plugins), plugin_(std::move(plugin)) {}

  // This rank's persistent strategy memory and the dp group's communication counters.
  keel_strategy_info info() const;

  // The flat range [begin, end) of parameter `index` (kind -1) or of its state slot `kind` that
  // this rank holds, in the parameter's local piece.
  std::pair<int64_t, int64_t> owned_range(int32_t kind, size_t index) const;
  std::vector<float> read_range(int32_t kind, size_t index, int64_t begin, int64_t end) const;
  // The same into `out`, which holds end - begin floats (a checkpoint snapshot's arena).
  void read_range_into(int32_t kind, size_t index, int64_t begin, int64_t end, float* out) const;
  void write_range(int32_t kind, size_t index, int64_t begin, const std::vector<float>& values);

  // The strategy's own per-rank arrays; none from a strategy older than 0.5.
  struct OwnArray {
    std::string name;
    int64_t count = 0;
  };
  std::vector<OwnArray> own_arrays() const;
  std::vector<float> read_own_array(int32_t index, int64_t count) const;
  void write_own_array(int32_t index, const std::vector<float>& values);

 private:
  PluginInstances& plugins_;
  std::string plugin_;
};

}  // namespace keel
