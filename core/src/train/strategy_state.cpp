// The strategy's ranges and own arrays through its table (strategy_state.h), with the checks a
// plugin's answers get before the core sizes anything by them.
#include "train/strategy_state.h"

#include <algorithm>
#include <cctype>

#include "host/errors.h"
#include "train/plugin_instances.h"

namespace keel {
namespace {

int64_t local_numel(const keel_param_spec& spec) {
  int64_t n = 1;
  for (int32_t d = 0; d < spec.ndim; ++d) n *= spec.local_shape[d];
  return n;
}

bool plain_name(const std::string& text) {
  return !text.empty() && text.size() <= 128 && std::all_of(text.begin(), text.end(), [](char c) {
    return std::isalnum((unsigned char)c) || c == '_' || c == '.' || c == '-';
  });
}

}  // namespace

keel_strategy_info StrategyState::info() const {
  keel_strategy_info info{};
  info.struct_size = sizeof(info);
  if (KEEL_HAS_SLOT(plugins_.strategy, describe))
    check_plugin(plugins_.strategy->describe(plugins_.strategy_obj, &info), "strategy describe");
  return info;
}

std::pair<int64_t, int64_t> StrategyState::owned_range(int32_t kind, size_t index) const {
  // A strategy without the 0.4 slot holds everything, as every single-rank strategy does.
  if (!KEEL_HAS_SLOT(plugins_.strategy, owned_range)) return {0, local_numel(plugins_.model_info.params[index])};
  int64_t begin = 0, end = 0;
  check_plugin(plugins_.strategy->owned_range(plugins_.strategy_obj, kind, index, &begin, &end), "strategy owned_range");
  return {begin, end};
}

std::vector<float> StrategyState::read_range(int32_t kind, size_t index, int64_t begin, int64_t end) const {
  std::vector<float> out(static_cast<size_t>(end - begin));
  read_range_into(kind, index, begin, end, out.data());
  return out;
}

void StrategyState::read_range_into(int32_t kind, size_t index, int64_t begin, int64_t end, float* out) const {
  if (end <= begin) return;
  auto* s = plugins_.strategy;
  check_plugin(kind < 0 ? s->read_param(plugins_.strategy_obj, index, begin, end - begin, out)
                        : s->read_state(plugins_.strategy_obj, kind, index, begin, end - begin, out),
               kind < 0 ? "strategy read_param" : "strategy read_state");
}

void StrategyState::write_range(int32_t kind, size_t index, int64_t begin, const std::vector<float>& values) {
  if (values.empty()) return;
  auto* s = plugins_.strategy;
  const int64_t count = int64_t(values.size());
  check_plugin(kind < 0 ? s->write_param(plugins_.strategy_obj, index, begin, count, values.data())
                        : s->write_state(plugins_.strategy_obj, kind, index, begin, count, values.data()),
               kind < 0 ? "strategy write_param" : "strategy write_state");
}

std::vector<StrategyState::OwnArray> StrategyState::own_arrays() const {
  auto* s = plugins_.strategy;
  if (!KEEL_HAS_SLOT(s, own_state_count) || !s->own_state_count) return {};
  const std::string who = "strategy '" + plugin_ + "' ";
  if (!KEEL_HAS_SLOT(s, write_own_state) || !s->own_state_info || !s->read_own_state || !s->write_own_state)
    throw KeelError(KEEL_ERR_UNIMPLEMENTED, who + "implements own_state_count but not all of own_state_info, "
                                                  "read_own_state and write_own_state");
  int32_t count = 0;
  check_plugin(s->own_state_count(plugins_.strategy_obj, &count), who + "own_state_count");
  if (count < 0 || count > 1024)
    throw KeelError(KEEL_ERR_INVALID_ARGUMENT, who + "reports " + std::to_string(count) + " own state arrays (0..1024)");
  std::vector<OwnArray> arrays;
  for (int32_t i = 0; i < count; ++i) {
    const char* name = nullptr;
    int64_t elements = -1;
    check_plugin(s->own_state_info(plugins_.strategy_obj, i, &name, &elements), who + "own_state_info");
    const std::string text = name ? name : "";
    if (!plain_name(text) || elements < 0 || elements > (int64_t(1) << 40))
      throw KeelError(KEEL_ERR_INVALID_ARGUMENT, who + "own state array " + std::to_string(i) + " is named \"" + text +
                                                     "\" with " + std::to_string(elements) + " elements; expected a "
                                                     "name of letters, digits, '_', '.', '-' and 0..2^40 elements");
    arrays.push_back({text, elements});
  }
  return arrays;
}

std::vector<float> StrategyState::read_own_array(int32_t index, int64_t count) const {
  std::vector<float> out(static_cast<size_t>(count));
  check_plugin(plugins_.strategy->read_own_state(plugins_.strategy_obj, index, out.data()), "strategy read_own_state");
  return out;
}

void StrategyState::write_own_array(int32_t index, const std::vector<float>& values) {
  check_plugin(plugins_.strategy->write_own_state(plugins_.strategy_obj, index, values.data()),
               "strategy write_own_state");
}

}  // namespace keel
