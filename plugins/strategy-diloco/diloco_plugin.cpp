// The diloco and edit plugins' entry: their config sections, the strategy table (keel_support's
// StrategySlots plus the own-state slots of ABI 0.5) and the entry symbol.
#include <keel/plugin.h>
#include <keel/strategy.h>

#include <keel_support/common/abi_guard.hpp>
#include <keel_support/common/json_section.hpp>
#include <keel_support/common/plugin_entry.hpp>
#include <keel_support/strategy/strategy_slots.hpp>

#include <climits>
#include <memory>

#include "diloco_strategy.hpp"

namespace keel_diloco {

// A-EDiT's keys: "sync_seconds" (an interval is that much training time on each replica, not a
// step count) and "simulated_step_seconds" (a step's time on dp rank r is entry r mod n instead
// of the clock's: the same intervals on every run, for tests and for stragglers by design).
void parse_time_intervals(keel_support::JsonSection& section, Config& config) {
  const bool steps_given = section.has("sync_every");
  config.sync_seconds = section.get_in_range<double>("sync_seconds", 0.0, 0.0, 86400.0);
  if (config.sync_seconds > 0 && steps_given)
    throw keel_support::ConfigError(section.path_of("sync_seconds") + ": an interval is either sync_every steps or "
                                    "sync_seconds of training time (A-EDiT), not both; remove one");
  if (!section.has("simulated_step_seconds")) return;
  const nlohmann::json& times = section.raw("simulated_step_seconds");
  const std::string where = section.path_of("simulated_step_seconds");
  if (config.sync_seconds <= 0)
    throw keel_support::ConfigError(where + ": only with sync_seconds (A-EDiT's time-based intervals)");
  if (!times.is_array() || times.empty() || times.size() > 4096)
    throw keel_support::ConfigError(where + ": expected an array of 1 to 4096 step times in seconds, found " +
                                    times.dump());
  for (size_t i = 0; i < times.size(); ++i) {
    const double t = times[i].is_number() ? times[i].get<double>() : -1.0;
    if (!(t > 0 && t <= 86400.0))
      throw keel_support::ConfigError(where + "[" + std::to_string(i) + "]: expected seconds in (0, 86400], found " +
                                      times[i].dump());
    config.simulated_step_seconds.push_back(t);
  }
}

Config parse_config(const char* config_json, const char* json_path, bool edit) {
  auto section = keel_support::JsonSection::parse(config_json, json_path);
  section.allow("plugin");
  Config config;
  config.sync_every = section.get_in_range<int64_t>("sync_every", config.sync_every, 1, INT32_MAX);
  const std::string outer = section.get<std::string>("outer_optimizer", "nesterov");
  if (outer != "nesterov" && outer != "sgd")
    throw keel_support::ConfigError(section.path_of("outer_optimizer") + ": expected \"nesterov\" or \"sgd\", found \"" +
                                    outer + "\"");
  config.nesterov = outer == "nesterov";
  config.outer_lr = section.get_in_range<double>("outer_lr", config.outer_lr, 0.0, 100.0);
  config.outer_momentum = section.get<double>("outer_momentum", config.outer_momentum);
  if (!(config.outer_momentum >= 0.0 && config.outer_momentum < 1.0))
    throw keel_support::ConfigError(section.path_of("outer_momentum") + ": expected a value in [0, 1), found " +
                                    nlohmann::json(config.outer_momentum).dump());
  config.edit = edit;
  if (edit) {
    config.penalty.anomaly_z = section.get_in_range<double>("anomaly_z", config.penalty.anomaly_z, 0.0, 100.0);
    config.penalty.weighted_average = section.get<bool>("weighted_average", config.penalty.weighted_average);
    config.clip_norm = section.get_in_range<double>("clip_norm", config.clip_norm, 0.0, 1e6);
    parse_time_intervals(section, config);
  }
  if (config.nesterov && config.outer_momentum == 0.0)
    throw keel_support::ConfigError(section.path_of("outer_momentum") +
                                    ": Nesterov needs momentum > 0; use \"outer_optimizer\": \"sgd\" for none");
  section.finish();
  return config;
}

namespace {

using keel_support::StatusError;
using Slots = keel_support::StrategySlots<Diloco>;

template <bool kEdit>
keel_status validate_config(const keel_host* host, const char* config_json, const char* json_path) {
  return keel_support::guard(host, Diloco::kSource, [&] { parse_config(config_json, json_path, kEdit); });
}

template <bool kEdit>
keel_status create(const keel_host* host, const keel_strategy_create_args* args, void** out_strategy) {
  return keel_support::guard(host, Diloco::kSource, [&] {
    if (!host || !args || !out_strategy) throw StatusError(KEEL_ERR_INVALID_ARGUMENT, "create: a NULL argument");
    auto strategy = std::make_unique<Diloco>(host, *args, parse_config(args->config_json, args->json_path, kEdit));
    *out_strategy = strategy.release();
  });
}

keel_status own_state_count(void* handle, int32_t* out) {
  return Slots::with(handle, [&](Diloco& s) {
    if (!out) throw StatusError(KEEL_ERR_INVALID_ARGUMENT, "own_state_count: out is NULL");
    *out = s.own_state_count();
  });
}
keel_status own_state_info(void* handle, int32_t index, const char** out_name, int64_t* out_count) {
  return Slots::with(handle, [&](Diloco& s) {
    if (!out_name || !out_count) throw StatusError(KEEL_ERR_INVALID_ARGUMENT, "own_state_info: an output is NULL");
    *out_name = s.own_state_name(index).c_str();
    *out_count = s.own_state_elements(index);
  });
}
keel_status read_own_state(void* handle, int32_t index, float* dst) {
  return Slots::with(handle, [&](Diloco& s) { s.read_own_state(index, dst); });
}
keel_status write_own_state(void* handle, int32_t index, const float* src) {
  return Slots::with(handle, [&](Diloco& s) { s.write_own_state(index, src); });
}
keel_status independent_replicas(void* handle, int32_t* out) {
  return Slots::with(handle, [&](Diloco& s) {
    if (!out) throw StatusError(KEEL_ERR_INVALID_ARGUMENT, "independent_replicas: out is NULL");
    *out = s.independent_replicas() ? 1 : 0;
  });
}
keel_status sync_reached(void* handle, int32_t* out) {
  return Slots::with(handle, [&](Diloco& s) {
    if (!out) throw StatusError(KEEL_ERR_INVALID_ARGUMENT, "sync_reached: out is NULL");
    *out = s.sync_reached() ? 1 : 0;
  });
}

template <bool kEdit>
keel_strategy_api make_table() {
  keel_strategy_api table = Slots::table(validate_config<kEdit>, create<kEdit>);
  table.own_state_count = own_state_count;
  table.own_state_info = own_state_info;
  table.read_own_state = read_own_state;
  table.write_own_state = write_own_state;
  table.independent_replicas = independent_replicas;
  table.sync_reached = sync_reached;
  return table;
}

const keel_strategy_api kDiloco = make_table<false>();
const keel_strategy_api kEdit = make_table<true>();

const keel_plugin_info kInfos[] = {
    keel_support::plugin_info(KEEL_KIND_STRATEGY, "diloco", "0.1.0", &kDiloco,
                              "DiLoCo: sync_every local inner-optimizer steps per rank, then the averaged "
                              "pseudo-gradient through an outer SGD or Nesterov step"),
    keel_support::plugin_info(KEEL_KIND_STRATEGY, "edit", "0.1.0", &kEdit,
                              "EDiT: DiLoCo's intervals with layer-wise syncs in the next forward and the pseudo-gradient "
                              "penalty (anomaly elimination, weighted averaging, clipping); with sync_seconds, "
                              "A-EDiT: replicas step at their own pace and sync on training time")};

const keel_plugin_list kList = keel_support::plugin_list(kInfos);

}  // namespace
}  // namespace keel_diloco

extern "C" KEEL_EXPORT const keel_plugin_list* keel_plugin_entry(void) { return &keel_diloco::kList; }
