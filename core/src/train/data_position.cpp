// A data plugin's own position in checkpoints (data.h 0.16). A source that can save its place
// (a Python iterator with state_dict, or one the binding replays) gives this rank's position as
// text only it reads; every rank's goes into the checkpoint, in world-rank order, and a resume
// in the same layout hands each rank its own back. A source without the slots, or a resume in
// another layout (whose ranks read other streams), restarts the source, with a warning.
#include <keel/plugin.h>

#include <exception>
#include <string>

#include "host/errors.h"
#include "host/log.h"
#include "mesh/collectives.h"
#include "train/trainer.h"

namespace keel {

bool Trainer::data_plugin_resumes() const {
  const keel_data_api* data = plugins_.data;
  return data && KEEL_HAS_SLOT(data, save_position) && KEEL_HAS_SLOT(data, restore_position) &&
         data->save_position && data->restore_position;
}

std::string Trainer::data_position() const {
  if (!data_plugin_resumes()) return "";
  const std::string source = "data source '" + config_.data_plugin.plugin + "' save_position";
  std::string out(size_t(64) << 10, '\0');  // room for most states: a second call is rare
  for (int attempt = 0; attempt < 2; ++attempt) {
    size_t length = 0;
    check_plugin(plugins_.data->save_position(plugins_.data_obj, out.data(), out.size(), &length), source);
    if (length == 0 || int64_t(length) > kMaxDataPositionBytes)
      throw KeelError(KEEL_ERR_INVALID_ARGUMENT, source + " gave " + std::to_string(length) +
                                                     " bytes (expected 1 to " +
                                                     std::to_string(kMaxDataPositionBytes) + ")");
    if (length < out.size()) return out.substr(0, length);
    out.assign(length + 1, '\0');
  }
  throw KeelError(KEEL_ERR_INTERNAL, source + ": the text's length changed between calls");
}

void Trainer::restart_train_split(const std::string& why) {
  log_warn(why + ": data source '" + config_.data_plugin.plugin + "' restarts from its beginning");
  const keel_data_api* data = plugins_.data;
  if (KEEL_HAS_SLOT(data, reset_split) && data->reset_split)
    check_plugin(data->reset_split(plugins_.data_obj, KEEL_SPLIT_TRAIN), "data source reset_split");
}

void Trainer::restore_data_positions(const nlohmann::json& positions, bool same_layout, const std::string& where) {
  if (!plugins_.data) return;
  if (!data_plugin_resumes()) return restart_train_split("it cannot resume mid-stream (no save_position, ABI 0.16)");
  if (positions.is_null()) return restart_train_split(where + ": saved without its position");
  if (!same_layout)  // the manifest check sized the list by the saved world
    return restart_train_split(where + ": saved in another layout (dp, tp, pp or world size), whose ranks read "
                                       "other streams");
  const int32_t rank = mesh().world.rank;
  const std::string at = where + ": data_positions[" + std::to_string(rank) + "]";
  std::exception_ptr failure;
  try {
    if (!positions.is_array() || size_t(rank) >= positions.size() || !positions[size_t(rank)].is_string())
      throw KeelError(KEEL_ERR_IO, at + ": expected a string");
    const std::string text = positions[size_t(rank)].get<std::string>();
    check_plugin(plugins_.data->restore_position(plugins_.data_obj, text.c_str()),
                 at + ": data source '" + config_.data_plugin.plugin + "' restore_position");
  } catch (...) {
    failure = std::current_exception();
  }
  rethrow_if_any_failed(mesh().world, failure, KEEL_ERR_IO,
                        where + ": another rank's data source refused its saved position (its message says why)");
}

}  // namespace keel
