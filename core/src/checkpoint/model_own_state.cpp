// Saving and restoring a model's rule-moved arrays (see model_own_state.h).
#include "checkpoint/model_own_state.h"

#include "host/errors.h"
#include "train/run_state_view.h"

namespace keel {

nlohmann::json collect_model_own_state(const RunStateView& view, const std::string& rank_file,
                                       std::vector<std::vector<float>>& buffers, std::vector<SafetensorsEntry>& entries) {
  nlohmann::json records = nlohmann::json::array();
  const MeshPosition& at = view.mesh.position();
  if (at.dp != 0 || at.tp != 0) return records;  // the replicas hold the same values
  const std::vector<ModelState::Array> arrays = view.model_state.arrays();
  for (size_t i = 0; i < arrays.size(); ++i) {
    buffers.push_back(view.model_state.read_array(int32_t(i), arrays[i].count));
    const std::string key = "model_state/" + arrays[i].name;
    entries.push_back({key, "F32", {arrays[i].count}, buffers.back().data(), size_t(arrays[i].count) * sizeof(float)});
    records.push_back({{"name", arrays[i].name}, {"count", arrays[i].count}, {"file", rank_file}, {"key", key}});
  }
  return records;
}

void restore_model_own_state(const RunStateView& view, const nlohmann::json& manifest, const std::string& where,
                             const std::function<const SafetensorsFile&(const std::string&)>& open) {
  const std::vector<ModelState::Array> arrays = view.model_state.arrays();
  if (arrays.empty()) return;
  const nlohmann::json saved = manifest.value("model_state", nlohmann::json::array());
  for (size_t i = 0; i < arrays.size(); ++i) {
    const nlohmann::json* found = nullptr;
    for (const auto& record : saved)
      if (record.value("name", "") == arrays[i].name) {
        if (found) throw KeelError(KEEL_ERR_IO, where + ": model_state lists \"" + arrays[i].name + "\" twice");
        found = &record;
      }
    if (!found)
      throw KeelError(KEEL_ERR_IO, where + ": model_state has no array \"" + arrays[i].name + "\" that model '" +
                                       view.config.model.plugin + "' keeps (a checkpoint saved before the model kept "
                                       "it); keel export it and start from its weights with model.init_from");
    if (found->value("count", int64_t(-1)) != arrays[i].count)
      throw KeelError(KEEL_ERR_IO, where + ": model_state \"" + arrays[i].name + "\" holds " + found->at("count").dump() +
                                       " elements; the model expects " + std::to_string(arrays[i].count));
    std::vector<float> values(static_cast<size_t>(arrays[i].count));
    open(found->value("file", "")).read_f32(found->value("key", ""), 0, arrays[i].count, values.data());
    view.model_state.write_array(int32_t(i), values);
  }
}

}  // namespace keel
