// The checked face over a model's rule-moved state (model_state.h).
#include "train/model_state.h"

#include "host/errors.h"
#include "train/plugin_instances.h"

namespace keel {

bool ModelState::keeps_state() const {
  const keel_model_api* api = plugins_.model;
  return KEEL_HAS_SLOT(api, write_own_state) && api->step_tallies && api->end_step && api->own_state_count &&
         api->own_state_info && api->read_own_state && api->write_own_state;
}

std::vector<double> ModelState::step_tallies() const {
  if (!keeps_state()) return {};
  std::vector<double> out(64);
  int64_t count = 0;
  for (int tries = 0; tries < 2; ++tries) {
    check_plugin(plugins_.model->step_tallies(plugins_.model_obj, out.data(), int64_t(out.size()), &count),
                 "model " + plugin_ + " step_tallies");
    if (count < 0 || count > (int64_t(1) << 24))
      throw KeelError(KEEL_ERR_INTERNAL, "model " + plugin_ + " step_tallies: reported " + std::to_string(count) +
                                             " values, expected 0 to 2^24");
    if (size_t(count) <= out.size()) break;
    out.resize(size_t(count));  // asked again with room for all: the values stay until end_step
  }
  out.resize(size_t(count));
  return out;
}

void ModelState::end_step(const std::vector<double>& summed, bool applied) {
  if (!keeps_state()) return;
  check_plugin(plugins_.model->end_step(plugins_.model_obj, summed.data(), int64_t(summed.size()), applied ? 1 : 0),
               "model " + plugin_ + " end_step");
}

std::vector<ModelState::Array> ModelState::arrays() const {
  if (!keeps_state()) return {};
  int32_t count = 0;
  check_plugin(plugins_.model->own_state_count(plugins_.model_obj, &count), "model " + plugin_ + " own_state_count");
  if (count < 0 || count > (1 << 20))
    throw KeelError(KEEL_ERR_INTERNAL, "model " + plugin_ + " own_state_count: " + std::to_string(count) +
                                           ", expected 0 to 2^20");
  std::vector<Array> out;
  for (int32_t i = 0; i < count; ++i) {
    const char* name = nullptr;
    int64_t elements = 0;
    check_plugin(plugins_.model->own_state_info(plugins_.model_obj, i, &name, &elements),
                 "model " + plugin_ + " own_state_info");
    const std::string text = name ? name : "";
    const bool named = !text.empty() && text.size() <= 256 &&
                       text.find_first_not_of("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_.-") ==
                           std::string::npos;
    if (!named || elements < 0 || elements > (int64_t(1) << 40))
      throw KeelError(KEEL_ERR_INTERNAL, "model " + plugin_ + " own_state_info: array " + std::to_string(i) + " (\"" +
                                             text + "\", " + std::to_string(elements) +
                                             " elements) needs a name of letters, digits, '_', '.' or '-' and a count "
                                             "of 0 to 2^40");
    out.push_back({text, elements});
  }
  return out;
}

std::vector<float> ModelState::read_array(int32_t index, int64_t count) const {
  std::vector<float> values(static_cast<size_t>(count));
  check_plugin(plugins_.model->read_own_state(plugins_.model_obj, index, values.data()),
               "model " + plugin_ + " read_own_state");
  return values;
}

void ModelState::write_array(int32_t index, const std::vector<float>& values) {
  check_plugin(plugins_.model->write_own_state(plugins_.model_obj, index, values.data()),
               "model " + plugin_ + " write_own_state");
}

}  // namespace keel
