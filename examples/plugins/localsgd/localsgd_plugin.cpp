// The localsgd plugin's entry: its config section, the strategy table and the one
// exported symbol, keel_plugin_entry. keel_support::StrategySlots writes the table's slots:
// each runs its body under keel_support::guard, so no C++ exception crosses the ABI (a thrown
// error becomes a status code with its message set through the host), and forwards to
// LocalSgd or to its parameter store. This file adds what is localsgd's own: parsing
// "parallel.strategy" and the per-rank own-state slots (ABI 0.5).
#include <keel/plugin.h>
#include <keel/strategy.h>

#include <keel_support/common/abi_guard.hpp>
#include <keel_support/common/json_section.hpp>
#include <keel_support/common/plugin_entry.hpp>
#include <keel_support/strategy/strategy_slots.hpp>

#include <climits>
#include <memory>

#include "localsgd_strategy.hpp"

namespace localsgd {

Config parse_config(const char* config_json, const char* json_path) {
  auto section = keel_support::JsonSection::parse(config_json, json_path);
  section.allow("plugin");  // the selector, read by the core
  Config config;
  config.sync_every = section.get_in_range<int64_t>("sync_every", config.sync_every, 1, INT32_MAX);
  section.finish();  // unknown keys are errors, with "did you mean"
  return config;
}

namespace {

using keel_support::StatusError;
using Slots = keel_support::StrategySlots<LocalSgd>;

keel_status validate_config(const keel_host* host, const char* config_json, const char* json_path) {
  return keel_support::guard(host, LocalSgd::kSource, [&] { parse_config(config_json, json_path); });
}

keel_status create(const keel_host* host, const keel_strategy_create_args* args, void** out_strategy) {
  return keel_support::guard(host, LocalSgd::kSource, [&] {
    if (!host || !args || !out_strategy) throw StatusError(KEEL_ERR_INVALID_ARGUMENT, "create: a NULL argument");
    auto strategy = std::make_unique<LocalSgd>(host, *args, parse_config(args->config_json, args->json_path));
    *out_strategy = strategy.release();  // only on success: outputs are untouched on error
  });
}

// --- own state (0.5) ---

keel_status own_state_count(void* handle, int32_t* out) {
  return Slots::with(handle, [&](LocalSgd& s) {
    if (!out) throw StatusError(KEEL_ERR_INVALID_ARGUMENT, "own_state_count: out is NULL");
    *out = s.own_state_count();
  });
}
keel_status own_state_info(void* handle, int32_t index, const char** out_name, int64_t* out_count) {
  return Slots::with(handle, [&](LocalSgd& s) {
    if (!out_name || !out_count) throw StatusError(KEEL_ERR_INVALID_ARGUMENT, "own_state_info: an output is NULL");
    const std::string& name = s.own_state_name(index);
    *out_name = name.c_str();
    *out_count = s.own_state_elements();
  });
}
keel_status read_own_state(void* handle, int32_t index, float* dst) {
  return Slots::with(handle, [&](LocalSgd& s) { s.read_own_state(index, dst); });
}
keel_status write_own_state(void* handle, int32_t index, const float* src) {
  return Slots::with(handle, [&](LocalSgd& s) { s.write_own_state(index, src); });
}

// The table's order is strategy.h's; struct_size tells the core how many slots it holds.
keel_strategy_api make_table() {
  keel_strategy_api table = Slots::table(validate_config, create);
  table.own_state_count = own_state_count;
  table.own_state_info = own_state_info;
  table.read_own_state = read_own_state;
  table.write_own_state = write_own_state;
  return table;
}

const keel_strategy_api kTable = make_table();

// Built against these headers' ABI version: a core of the same major loads it when its own minor
// is this one or newer (minors only append), and refuses it when its minor is older.
const keel_plugin_info kInfos[] = {keel_support::plugin_info(
    KEEL_KIND_STRATEGY, "localsgd", "1.0.0", &kTable,
    "local SGD: each rank steps on its own gradients; parameters averaged every sync_every steps")};

const keel_plugin_list kList = keel_support::plugin_list(kInfos);

}  // namespace
}  // namespace localsgd

// The library's one exported symbol (everything else is hidden by keel_add_plugin).
extern "C" KEEL_EXPORT const keel_plugin_list* keel_plugin_entry(void) { return &localsgd::kList; }
