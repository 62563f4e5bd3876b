// The sgd plugin's C ABI face: the optimizer table, its entry symbol, and argument checks.
// Every slot runs under keel_support::guard so no exception crosses the ABI.
#include <keel/optimizer.h>
#include <keel/params.h>
#include <keel/plugin.h>
#include <keel_support/abi_guard.hpp>
#include <keel_support/sized_output.hpp>

#include <memory>
#include <string>

#include "sgd_config.hpp"
#include "sgd_update.hpp"

namespace keel_sgd {
namespace {

constexpr const char* kSource = "optimizer sgd";

struct SgdOptimizer {
  const keel_host* host;
  SgdConfig config;
  int32_t n_state_slots() const { return config.momentum > 0.0 ? 1 : 0; }
};

void check_step_args(const SgdOptimizer& optimizer, const keel_optimizer_step_args* args) {
  using keel_support::StatusError;
  if (!args || args->struct_size < sizeof(keel_optimizer_step_args))
    throw StatusError(KEEL_ERR_INVALID_ARGUMENT, "step: args is NULL or older than this plugin's ABI");
  if (args->device.device_type != KEEL_DEVICE_CPU)
    throw StatusError(KEEL_ERR_UNIMPLEMENTED, "step: only host (CPU) memory is supported, found device type " +
                                                  std::to_string(args->device.device_type));
  if (args->n < 0) throw StatusError(KEEL_ERR_INVALID_ARGUMENT, "step: n is negative: " + std::to_string(args->n));
  if (args->step < 1)
    throw StatusError(KEEL_ERR_INVALID_ARGUMENT, "step: step is 1-based, found " + std::to_string(args->step));
  if (args->n == 0) return;
  if (!args->params || !args->grads) throw StatusError(KEEL_ERR_INVALID_ARGUMENT, "step: params or grads is NULL");
  if (optimizer.n_state_slots() > 0 && (!args->state || !args->state[0]))
    throw StatusError(KEEL_ERR_INVALID_ARGUMENT, "step: momentum > 0 needs state slot 0, found NULL");
}

keel_status validate_config(const keel_host* host, const char* config_json, const char* json_path) {
  return keel_support::guard(host, kSource, [&] { parse_sgd_config(config_json, json_path); });
}

keel_status create(const keel_host* host, const char* config_json, const char* json_path, void** out_optimizer) {
  return keel_support::guard(host, kSource, [&] {
    if (!out_optimizer) throw keel_support::StatusError(KEEL_ERR_INVALID_ARGUMENT, "create: out_optimizer is NULL");
    auto optimizer = std::make_unique<SgdOptimizer>(SgdOptimizer{host, parse_sgd_config(config_json, json_path)});
    *out_optimizer = optimizer.release();
  });
}

void destroy(void* optimizer) { delete static_cast<SgdOptimizer*>(optimizer); }

keel_status describe(void* handle, keel_optimizer_info* out_info) {
  auto* optimizer = static_cast<SgdOptimizer*>(handle);
  if (!optimizer) return KEEL_ERR_INVALID_ARGUMENT;  // no host to carry a message
  return keel_support::guard(optimizer->host, kSource, [&] {
    keel_optimizer_info info{};
    info.struct_size = sizeof(info);
    info.n_state_slots = optimizer->n_state_slots();
    info.base_lr = static_cast<float>(optimizer->config.lr);
    // Biases, norm gains and position embeddings take no L2 decay, as in GPT-2 recipes.
    info.decay_flags = KEEL_PARAM_NO_WEIGHT_DECAY;
    keel_support::write_sized_output(out_info, info, sizeof info, "describe: out_info");
  });
}

keel_status step(void* handle, const keel_optimizer_step_args* args) {
  auto* optimizer = static_cast<SgdOptimizer*>(handle);
  if (!optimizer) return KEEL_ERR_INVALID_ARGUMENT;  // no host to carry a message
  return keel_support::guard(optimizer->host, kSource, [&] {
    check_step_args(*optimizer, args);
    sgd_update_host(optimizer->config, *args);
  });
}

const keel_optimizer_api kApi = {
    sizeof(keel_optimizer_api), validate_config, create, destroy, describe, step,
};

const keel_plugin_info kInfo = {
    sizeof(keel_plugin_info), KEEL_KIND_OPTIMIZER, "sgd", "0.1.0", KEEL_ABI_VERSION_MAJOR, KEEL_ABI_VERSION_MINOR,
    &kApi, "SGD with momentum, dampening, Nesterov and coupled L2 weight decay (torch.optim.SGD rule)",
};

const keel_plugin_list kList = {sizeof(keel_plugin_list), KEEL_ABI_VERSION_MAJOR, KEEL_ABI_VERSION_MINOR, 1, &kInfo};

}  // namespace
}  // namespace keel_sgd

extern "C" KEEL_EXPORT const keel_plugin_list* keel_plugin_entry(void) { return &keel_sgd::kList; }
