// The zero plugin's entry: the strategy table (keel_support's StrategySlots, with zero's
// own write_param and read_grad) and the entry symbol.
#include <keel/plugin.h>
#include <keel/strategy.h>
#include <keel_support/common/abi_guard.hpp>
#include <keel_support/common/plugin_entry.hpp>
#include <keel_support/strategy/strategy_slots.hpp>

#include <memory>

#include "zero_config.hpp"
#include "zero_strategy.hpp"

namespace keel_zero {
namespace {

using keel_support::StatusError;

using Slots = keel_support::StrategySlots<ZeroStrategy>;

keel_status validate_config(const keel_host* host, const char* config_json, const char* json_path) {
  return keel_support::guard(host, ZeroStrategy::kSource, [&] { parse_zero_config(config_json, json_path); });
}

keel_status create(const keel_host* host, const keel_strategy_create_args* args, void** out_strategy) {
  return keel_support::guard(host, ZeroStrategy::kSource, [&] {
    if (!host || !args || !out_strategy)
      throw StatusError(KEEL_ERR_INVALID_ARGUMENT, "create: host, args or out_strategy is NULL");
    const ZeroConfig config = parse_zero_config(args->config_json, args->json_path);
    auto strategy = std::make_unique<ZeroStrategy>(host, config, *args);
    *out_strategy = strategy.release();
  });
}

// zero's own host access: a written parameter makes a prefetched layer stale, and gradients
// settle their reductions before they are read (zero_strategy.hpp).
keel_status write_param(void* handle, size_t index, int64_t begin, int64_t count, const float* src_host) {
  return Slots::with(handle, [&](ZeroStrategy& s) { s.write_param(index, begin, count, src_host); });
}

keel_status read_grad(void* handle, size_t index, int64_t begin, int64_t count, float* dst_host) {
  return Slots::with(handle, [&](ZeroStrategy& s) { s.read_grad(index, begin, count, dst_host); });
}

keel_status local_grad_sq_norm(void* handle, double* out) {
  return Slots::with(handle, [&](ZeroStrategy& s) {
    if (!out) throw StatusError(KEEL_ERR_INVALID_ARGUMENT, "local_grad_sq_norm: out is NULL");
    *out = s.local_grad_sq_norm();
  });
}

keel_strategy_api make_table() {
  keel_strategy_api api = Slots::table(validate_config, create);
  api.local_grad_sq_norm = local_grad_sq_norm;
  api.write_param = write_param;
  api.read_grad = read_grad;
  return api;
}

const keel_strategy_api kApi = make_table();

const keel_plugin_info kInfos[] = {keel_support::plugin_info(
    KEEL_KIND_STRATEGY, "zero", "0.1.0", &kApi,
    "ZeRO stages 1-3 across the data-parallel group: optimizer state, gradients and parameters sharded "
    "per layer in equal chunks, stage 3 gathering each layer on use with prefetch")};

const keel_plugin_list kList = keel_support::plugin_list(kInfos);

}  // namespace
}  // namespace keel_zero

extern "C" KEEL_EXPORT const keel_plugin_list* keel_plugin_entry(void) { return &keel_zero::kList; }
