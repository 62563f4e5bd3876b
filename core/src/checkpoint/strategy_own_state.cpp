// Saving and restoring a strategy's own per-rank arrays (see strategy_own_state.h).
#include "checkpoint/strategy_own_state.h"

#include <cmath>

#include "host/errors.h"
#include "mesh/topology.h"
#include "host/log.h"
#include "train/run_state_view.h"

namespace keel {

nlohmann::json collect_strategy_own_state(const RunStateView& view, const std::string& rank_file,
                                          std::vector<std::vector<float>>& buffers,
                                          std::vector<SafetensorsEntry>& entries) {
  nlohmann::json records = nlohmann::json::array();
  const std::vector<StrategyState::OwnArray> arrays = view.strategy.own_arrays();
  const MeshPosition& at = view.mesh.position();
  const MeshLayout& layout = view.mesh.layout();
  for (size_t i = 0; i < arrays.size(); ++i) {
    buffers.push_back(view.strategy.read_own_array(int32_t(i), arrays[i].count));
    const std::string key = "own/" + std::to_string(at.dp) + "/" + arrays[i].name;
    entries.push_back({key, "F32", {arrays[i].count}, buffers.back().data(), size_t(arrays[i].count) * sizeof(float)});
    // Per (dp rank, tp rank): the tp ranks of one dp rank hold different pieces (0.6).
    records.push_back({{"rank", at.dp}, {"tp_rank", at.tp}, {"name", arrays[i].name},
                       {"count", arrays[i].count}, {"file", rank_file}, {"key", key}});
  }
  return records;
}

bool restore_strategy_own_state(const RunStateView& view, const nlohmann::json& manifest, const std::string& where,
                                const std::function<const SafetensorsFile&(const std::string&)>& open) {
  const std::vector<StrategyState::OwnArray> arrays = view.strategy.own_arrays();
  const MeshPosition& at = view.mesh.position();
  const MeshLayout& layout = view.mesh.layout();
  const nlohmann::json saved = manifest.value("strategy_own_state", nlohmann::json::array());
  const std::string saved_strategy = manifest.value("strategy", nlohmann::json::object()).value("plugin", "");
  const nlohmann::json mesh = manifest.value("mesh", nlohmann::json::object());
  const int64_t saved_dp = mesh.value("dp", int64_t(-1)), saved_tp = mesh.value("tp", int64_t(1));
  // The dp group's levels too (0.19): a rank's state belongs to its group's worker (diloco by site).
  const bool same_ranks = saved_strategy == view.config.strategy.plugin && saved_dp == layout.dp && saved_tp == layout.tp &&
                          mesh.value("ep", int64_t(1)) == layout.ep &&
                          mesh.value("dp_groups", std::string("flat")) == describe_dp_groups(view.config) &&
                          mesh.value("dp_inner", int64_t(1)) == int64_t(view.mesh.strategy_dp_inner.size);
  if (arrays.empty() && saved.empty()) return same_ranks;
  if (!saved.is_array()) throw KeelError(KEEL_ERR_IO, where + ": strategy_own_state: expected an array");
  if (!same_ranks) {
    // Per-rank state has no meaning on other ranks: the strategy starts it afresh.
    log_warn("the checkpoint's per-rank state of strategy '" + saved_strategy + "' at data-parallel size " +
             std::to_string(saved_dp) + ", tp " + std::to_string(saved_tp) + ", dp_groups " +
             mesh.value("dp_groups", std::string("flat")) + " is not restored into strategy '" +
             view.config.strategy.plugin + "' at size " + std::to_string(layout.dp) + ", tp " +
             std::to_string(layout.tp) + ", dp_groups " + describe_dp_groups(view.config) + "; it starts afresh");
    return false;
  }
  for (size_t i = 0; i < arrays.size(); ++i) {
    const nlohmann::json* found = nullptr;
    for (const auto& record : saved)
      if (record.is_object() && record.value("rank", int64_t(-1)) == at.dp &&
          record.value("tp_rank", int64_t(0)) == at.tp && record.value("name", "") == arrays[i].name) {
        if (found)
          throw KeelError(KEEL_ERR_IO, where + ": strategy_own_state lists \"" + arrays[i].name + "\" twice for rank " +
                                           std::to_string(at.dp) + ", tp rank " + std::to_string(at.tp));
        found = &record;
      }
    if (!found)
      throw KeelError(KEEL_ERR_IO, where + ": strategy_own_state has no array \"" + arrays[i].name + "\" for rank " +
                                       std::to_string(at.dp) + ", tp rank " + std::to_string(at.tp) +
                                       " that strategy '" +
                                       view.config.strategy.plugin + "' needs");
    if (found->value("count", int64_t(-1)) != arrays[i].count)
      throw KeelError(KEEL_ERR_IO, where + ": strategy_own_state \"" + arrays[i].name + "\" of rank " +
                                       std::to_string(at.dp) + " holds " + found->at("count").dump() +
                                       " elements; the strategy expects " + std::to_string(arrays[i].count));
    std::vector<float> values(static_cast<size_t>(arrays[i].count));
    open(found->value("file", "")).read_f32(found->value("key", ""), 0, arrays[i].count, values.data());
    view.strategy.write_own_array(int32_t(i), values);
  }
  return true;
}

}  // namespace keel
