// The ddp plugin's C ABI face: its config section, the strategy table (keel_support's
// StrategySlots, with ddp's own read_grad) and the entry symbol.
#include <keel/plugin.h>
#include <keel/strategy.h>
#include <keel_support/abi_guard.hpp>
#include <keel_support/json_section.hpp>
#include <keel_support/plugin_entry.hpp>
#include <keel_support/strategy_slots.hpp>

#include <cstddef>
#include <memory>

#include "ddp_strategy.hpp"

namespace keel_ddp {
namespace {

using keel_support::StatusError;

// The "parallel.strategy" section: the selector and "bucket_mb", the size (MiB) at which
// consecutive layers' gradients stop coalescing into one all-reduce (PyTorch DDP's bucket_cap_mb).
DdpConfig parse_ddp_config(const char* config_json, const char* json_path) {
  auto section = keel_support::JsonSection::parse(config_json, json_path);
  section.allow("plugin");
  const double bucket_mb = section.get<double>("bucket_mb", 25.0);
  if (!(bucket_mb > 0.0) || bucket_mb > 1e6)
    throw keel_support::ConfigError(section.path_of("bucket_mb") + ": expected a number of MiB in (0, 1e6], found " +
                                    nlohmann::json(bucket_mb).dump());
  section.finish();
  DdpConfig config;
  config.bucket_bytes = static_cast<uint64_t>(bucket_mb * 1024.0 * 1024.0);
  return config;
}

using Slots = keel_support::StrategySlots<DdpStrategy>;

keel_status validate_config(const keel_host* host, const char* config_json, const char* json_path) {
  return keel_support::guard(host, DdpStrategy::kSource, [&] { parse_ddp_config(config_json, json_path); });
}

keel_status create(const keel_host* host, const keel_strategy_create_args* args, void** out_strategy) {
  return keel_support::guard(host, DdpStrategy::kSource, [&] {
    if (!host || !args || !out_strategy)
      throw StatusError(KEEL_ERR_INVALID_ARGUMENT, "create: host, args or out_strategy is NULL");
    const DdpConfig config = parse_ddp_config(args->config_json, args->json_path);
    auto strategy = std::make_unique<DdpStrategy>(host, *args, config);
    *out_strategy = strategy.release();
  });
}

// Waits for the reduction in flight before reading (ddp_strategy.hpp).
keel_status read_grad(void* handle, size_t index, int64_t begin, int64_t count, float* dst_host) {
  return Slots::with(handle, [&](DdpStrategy& s) { s.read_grad(index, begin, count, dst_host); });
}

keel_strategy_api make_table() {
  keel_strategy_api api = Slots::table(validate_config, create);
  api.read_grad = read_grad;
  return api;
}

const keel_strategy_api kApi = make_table();

const keel_plugin_info kInfos[] = {keel_support::plugin_info(
    KEEL_KIND_STRATEGY, "ddp", "0.2.0", &kApi,
    "Replicated parameters, gradients and optimizer state in flat buffers; gradients averaged over the "
    "data-parallel group by bucketed all-reduce overlapping the backward")};

const keel_plugin_list kList = keel_support::plugin_list(kInfos);

}  // namespace
}  // namespace keel_ddp

extern "C" KEEL_EXPORT const keel_plugin_list* keel_plugin_entry(void) { return &keel_ddp::kList; }
