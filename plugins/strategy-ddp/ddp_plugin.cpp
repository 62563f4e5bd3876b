// The ddp plugin's C ABI face: config checks, the strategy table, the param-access table the
// model receives, and the entry symbol. Each slot forwards to DdpStrategy under a guard, so no
// exception crosses the ABI and a failing backend's or optimizer's own message is kept.
#include <keel/plugin.h>
#include <keel/strategy.h>
#include <keel_support/json_section.hpp>

#include <cstddef>
#include <memory>

#include "ddp_strategy.hpp"
#include <keel_support/abi_guard.hpp>
#include <keel_support/sized_output.hpp>

namespace keel_ddp {
namespace {

using keel_support::StatusError;

constexpr const char* kSource = "strategy ddp";

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

// Runs `body(strategy)` for a slot whose handle is a DdpStrategy; without one there is no
// host to carry a message, so only the status is returned.
template <typename Body>
keel_status with_strategy(void* handle, Body&& body) noexcept {
  auto* strategy = static_cast<DdpStrategy*>(handle);
  if (!strategy) return KEEL_ERR_INVALID_ARGUMENT;
  return keel_support::guard(strategy->host(), kSource, [&] { body(*strategy); });
}

// --- keel_param_access ---

keel_status acquire(void* ctx, int32_t layer, int32_t phase, keel_tensor* params, keel_tensor* grads, size_t n) {
  return with_strategy(ctx, [&](DdpStrategy& s) { s.acquire(layer, phase, params, grads, n); });
}

keel_status release(void* ctx, int32_t layer, int32_t phase, int32_t grads_final) {
  return with_strategy(ctx, [&](DdpStrategy& s) { s.release(layer, phase, grads_final); });
}

// --- keel_strategy_api ---

keel_status validate_config(const keel_host* host, const char* config_json, const char* json_path) {
  return keel_support::guard(host, kSource, [&] { parse_ddp_config(config_json, json_path); });
}

keel_status create(const keel_host* host, const keel_strategy_create_args* args, void** out_strategy) {
  return keel_support::guard(host, kSource, [&] {
    if (!host || !args || !out_strategy)
      throw StatusError(KEEL_ERR_INVALID_ARGUMENT, "create: host, args or out_strategy is NULL");
    const DdpConfig config = parse_ddp_config(args->config_json, args->json_path);
    auto strategy = std::make_unique<DdpStrategy>(host, *args, config);
    *out_strategy = strategy.release();
  });
}

void destroy(void* strategy) { delete static_cast<DdpStrategy*>(strategy); }

keel_status param_access(void* handle, keel_param_access* out_access) {
  return with_strategy(handle, [&](DdpStrategy& s) {
    if (!out_access) throw StatusError(KEEL_ERR_INVALID_ARGUMENT, "param_access: out_access is NULL");
    *out_access = keel_param_access{sizeof(keel_param_access), &s, acquire, release};
  });
}

keel_status begin_microbatch(void* handle, int32_t index, int32_t is_last) {
  return with_strategy(handle, [&](DdpStrategy& s) { s.begin_microbatch(index, is_last); });
}

keel_status zero_grads(void* handle) {
  return with_strategy(handle, [&](DdpStrategy& s) { s.zero_grads(); });
}

keel_status grad_sq_norm(void* handle, double* out_sum_squares) {
  return with_strategy(handle, [&](DdpStrategy& s) {
    if (!out_sum_squares) throw StatusError(KEEL_ERR_INVALID_ARGUMENT, "grad_sq_norm: out_sum_squares is NULL");
    *out_sum_squares = s.grad_sq_norm();
  });
}

keel_status step(void* handle, const keel_strategy_step_args* args) {
  return with_strategy(handle, [&](DdpStrategy& s) {
    if (!args || args->struct_size < sizeof(keel_strategy_step_args))
      throw StatusError(KEEL_ERR_INVALID_ARGUMENT, "step: args is NULL or older than this plugin's ABI");
    s.step(*args);
  });
}

keel_status read_param(void* handle, size_t index, int64_t begin, int64_t count, float* dst_host) {
  return with_strategy(handle, [&](DdpStrategy& s) { s.store().read_param(index, begin, count, dst_host); });
}

keel_status write_param(void* handle, size_t index, int64_t begin, int64_t count, const float* src_host) {
  return with_strategy(handle, [&](DdpStrategy& s) { s.store().write_param(index, begin, count, src_host); });
}

keel_status read_grad(void* handle, size_t index, int64_t begin, int64_t count, float* dst_host) {
  return with_strategy(handle, [&](DdpStrategy& s) { s.read_grad(index, begin, count, dst_host); });
}

keel_status read_state(void* handle, int32_t slot, size_t index, int64_t begin, int64_t count, float* dst_host) {
  return with_strategy(handle, [&](DdpStrategy& s) { s.store().read_state(slot, index, begin, count, dst_host); });
}

keel_status write_state(void* handle, int32_t slot, size_t index, int64_t begin, int64_t count, const float* src_host) {
  return with_strategy(handle, [&](DdpStrategy& s) { s.store().write_state(slot, index, begin, count, src_host); });
}

keel_status owned_range(void* handle, int32_t kind, size_t index, int64_t* begin, int64_t* end) {
  return with_strategy(handle, [&](DdpStrategy& s) { s.store().owned_range(kind, index, begin, end); });
}

keel_status describe(void* handle, keel_strategy_info* out) {
  return with_strategy(handle, [&](DdpStrategy& s) {
    keel_support::write_sized_output(out, s.store().describe(1), sizeof(keel_strategy_info), "describe: out");
  });
}

const keel_strategy_api kApi = {
    sizeof(keel_strategy_api), validate_config, create,     destroy,     param_access, begin_microbatch,
    zero_grads,                grad_sq_norm,    step,       read_param,  write_param,  read_grad,
    read_state,                write_state,     owned_range, describe,
};

const keel_plugin_info kInfo = {
    sizeof(keel_plugin_info), KEEL_KIND_STRATEGY, "ddp", "0.2.0", KEEL_ABI_VERSION_MAJOR, KEEL_ABI_VERSION_MINOR,
    &kApi, "Replicated parameters, gradients and optimizer state in flat buffers; gradients averaged over the "
    "data-parallel group by bucketed all-reduce overlapping the backward",
};

const keel_plugin_list kList = {sizeof(keel_plugin_list), KEEL_ABI_VERSION_MAJOR, KEEL_ABI_VERSION_MINOR, 1, &kInfo};

}  // namespace
}  // namespace keel_ddp

extern "C" KEEL_EXPORT const keel_plugin_list* keel_plugin_entry(void) { return &keel_ddp::kList; }
