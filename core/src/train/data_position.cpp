// A data plugin's own position in checkpoints (data.h 0.16). A source that can save its place
// (a Python iterator with state_dict, or one the binding replays) gives this rank's position as
// text only it reads; every rank's goes into the checkpoint, in world-rank order, and a resume
// hands each rank its own back. A source without the slots restarts from its beginning, as
// before 0.16, with a warning.
#include <keel/plugin.h>

#include <string>

#include "host/errors.h"
#include "host/log.h"
#include "train/trainer.h"

namespace keel {

bool Trainer::data_plugin_resumes() const {
  const keel_data_api* data = plugins_.data;
  return data && KEEL_HAS_SLOT(data, save_position) && KEEL_HAS_SLOT(data, restore_position) &&
         data->save_position && data->restore_position;
}

std::string Trainer::data_position() const {
  if (!data_plugin_resumes()) return "";
  std::string out(256, '\0');
  for (int attempt = 0; attempt < 2; ++attempt) {
    size_t length = 0;
    check_plugin(plugins_.data->save_position(plugins_.data_obj, out.data(), out.size(), &length),
                 "data source '" + config_.data_plugin.plugin + "' save_position");
    if (length > kMaxDataPositionBytes)
      throw KeelError(KEEL_ERR_INVALID_ARGUMENT, "data source '" + config_.data_plugin.plugin + "' save_position gave " +
                                                     std::to_string(length) + " bytes (at most " +
                                                     std::to_string(kMaxDataPositionBytes) + ")");
    if (length < out.size()) return out.substr(0, length);
    out.assign(length + 1, '\0');
  }
  throw KeelError(KEEL_ERR_INTERNAL, "data source '" + config_.data_plugin.plugin +
                                         "': save_position's length changed between calls");
}

void Trainer::restore_data_positions(const nlohmann::json& positions, const std::string& where) {
  if (!plugins_.data) return;
  const std::string source = "data source '" + config_.data_plugin.plugin + "'";
  if (!data_plugin_resumes()) {
    log_warn(source + " cannot resume mid-stream (no save_position, ABI 0.16): it restarts from its beginning");
    return;
  }
  if (positions.is_null()) {
    log_warn(where + ": saved without " + source + "'s position: it restarts from its beginning");
    return;
  }
  // The manifest check bounded the list and each entry; a list of another world size belongs to
  // another layout, whose ranks read other streams.
  const int32_t world = mesh().world.size, rank = mesh().world.rank;
  if (!positions.is_array() || int64_t(positions.size()) != world) {
    log_warn(where + ": " + source + "'s positions were saved by " +
             (positions.is_array() ? std::to_string(positions.size()) : std::string("an unknown number of")) +
             " ranks, this run has " + std::to_string(world) + ": it restarts from its beginning");
    return;
  }
  const nlohmann::json& mine = positions[size_t(rank)];
  if (!mine.is_string())
    throw KeelError(KEEL_ERR_IO, where + ": data_positions[" + std::to_string(rank) + "]: expected a string");
  const std::string text = mine.get<std::string>();
  check_plugin(plugins_.data->restore_position(plugins_.data_obj, text.c_str()),
               where + ": data_positions[" + std::to_string(rank) + "]: " + source + " restore_position");
}

}  // namespace keel
