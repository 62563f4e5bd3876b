// The adamw plugin's C ABI face: the optimizer table, its entry symbol, and argument checks.
// Every slot runs under keel_support::guard so no exception crosses the ABI.
#include <keel/optimizer.h>
#include <keel/params.h>
#include <keel/plugin.h>
#include <keel_support/abi_guard.hpp>
#include <keel_support/sized_output.hpp>

#include <memory>
#include <string>

#include "adamw_config.hpp"
#include "adamw_update.hpp"

namespace keel_adamw {
namespace {

constexpr const char* kSource = "optimizer adamw";
constexpr int32_t kStateSlots = 2;  // first moment m, second moment v

struct AdamwOptimizer {
  const keel_host* host;
  AdamwConfig config;
};

void check_step_args(const keel_optimizer_step_args* args) {
  using keel_support::StatusError;
  if (!args || args->struct_size < sizeof(keel_optimizer_step_args))
    throw StatusError(KEEL_ERR_INVALID_ARGUMENT, "step: args is NULL or older than this plugin's ABI");
  // A CUDA path arrives with the CUDA backend; until then device memory is refused, not read.
  if (args->device.device_type != KEEL_DEVICE_CPU)
    throw StatusError(KEEL_ERR_UNIMPLEMENTED, "step: only host (CPU) memory is supported, found device type " +
                                                  std::to_string(args->device.device_type));
  if (args->n < 0) throw StatusError(KEEL_ERR_INVALID_ARGUMENT, "step: n is negative: " + std::to_string(args->n));
  if (args->step < 1)
    throw StatusError(KEEL_ERR_INVALID_ARGUMENT, "step: step is 1-based, found " + std::to_string(args->step));
  if (args->n == 0) return;
  if (!args->params || !args->grads) throw StatusError(KEEL_ERR_INVALID_ARGUMENT, "step: params or grads is NULL");
  if (!args->state || !args->state[0] || !args->state[1])
    throw StatusError(KEEL_ERR_INVALID_ARGUMENT, "step: AdamW needs state slots 0 (m) and 1 (v), found NULL");
}

keel_status validate_config(const keel_host* host, const char* config_json, const char* json_path) {
  return keel_support::guard(host, kSource, [&] { parse_adamw_config(config_json, json_path); });
}

keel_status create(const keel_host* host, const char* config_json, const char* json_path, void** out_optimizer) {
  return keel_support::guard(host, kSource, [&] {
    if (!out_optimizer) throw keel_support::StatusError(KEEL_ERR_INVALID_ARGUMENT, "create: out_optimizer is NULL");
    auto optimizer = std::make_unique<AdamwOptimizer>(AdamwOptimizer{host, parse_adamw_config(config_json, json_path)});
    *out_optimizer = optimizer.release();
  });
}

void destroy(void* optimizer) { delete static_cast<AdamwOptimizer*>(optimizer); }

keel_status describe(void* handle, keel_optimizer_info* out_info) {
  auto* optimizer = static_cast<AdamwOptimizer*>(handle);
  if (!optimizer) return KEEL_ERR_INVALID_ARGUMENT;  // no host to carry a message
  return keel_support::guard(optimizer->host, kSource, [&] {
    keel_optimizer_info info{};
    info.struct_size = sizeof(info);
    info.n_state_slots = kStateSlots;
    info.base_lr = static_cast<float>(optimizer->config.lr);
    info.decay_flags = optimizer->config.decay_all_params ? 0u : static_cast<uint32_t>(KEEL_PARAM_NO_WEIGHT_DECAY);
    keel_support::write_sized_output(out_info, info, sizeof info, "describe: out_info");
  });
}

keel_status step(void* handle, const keel_optimizer_step_args* args) {
  auto* optimizer = static_cast<AdamwOptimizer*>(handle);
  if (!optimizer) return KEEL_ERR_INVALID_ARGUMENT;  // no host to carry a message
  return keel_support::guard(optimizer->host, kSource, [&] {
    check_step_args(args);
    adamw_update_host(optimizer->config, *args);
  });
}

const keel_optimizer_api kApi = {
    sizeof(keel_optimizer_api), validate_config, create, destroy, describe, step,
};

const keel_plugin_info kInfo = {
    sizeof(keel_plugin_info), KEEL_KIND_OPTIMIZER, "adamw", "0.1.0", KEEL_ABI_VERSION_MAJOR, KEEL_ABI_VERSION_MINOR,
    &kApi, "AdamW with decoupled weight decay and bias correction (torch.optim.AdamW rule)",
};

const keel_plugin_list kList = {sizeof(keel_plugin_list), KEEL_ABI_VERSION_MAJOR, KEEL_ABI_VERSION_MINOR, 1, &kInfo};

}  // namespace
}  // namespace keel_adamw

extern "C" KEEL_EXPORT const keel_plugin_list* keel_plugin_entry(void) { return &keel_adamw::kList; }
