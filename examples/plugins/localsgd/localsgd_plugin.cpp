// The localsgd plugin's C ABI face: its config section, the strategy table, the param-access
// table the model receives, and the one exported symbol, keel_plugin_entry. Every slot runs
// its body under keel_support::guard, so no C++ exception crosses the ABI: a thrown error
// becomes a status code with its message set through the host.
#include <keel/plugin.h>
#include <keel/strategy.h>

#include <keel_support/abi_guard.hpp>
#include <keel_support/json_section.hpp>
#include <keel_support/sized_output.hpp>

#include <climits>
#include <memory>

#include "localsgd_strategy.hpp"

namespace localsgd {

constexpr const char* kSource = "strategy localsgd";  // prefixes every error message

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

// Runs body(strategy) under guard. Without a strategy there is no host to carry a message.
template <typename Body>
keel_status with(void* handle, Body&& body) noexcept {
  auto* strategy = static_cast<LocalSgd*>(handle);
  if (!strategy) return KEEL_ERR_INVALID_ARGUMENT;
  return keel_support::guard(strategy->host(), kSource, [&] { body(*strategy); });
}

// --- keel_param_access: the model calls these from the training thread ---

keel_status acquire(void* ctx, int32_t layer, int32_t phase, keel_tensor* params, keel_tensor* grads, size_t n) {
  return with(ctx, [&](LocalSgd& s) { s.acquire(layer, phase, params, grads, n); });
}
keel_status release(void* ctx, int32_t layer, int32_t phase, int32_t /*grads_final*/) {
  return with(ctx, [&](LocalSgd& s) { s.store().check_layer(layer, phase); });
}

// --- keel_strategy_api ---

keel_status validate_config(const keel_host* host, const char* config_json, const char* json_path) {
  return keel_support::guard(host, kSource, [&] { parse_config(config_json, json_path); });
}

keel_status create(const keel_host* host, const keel_strategy_create_args* args, void** out_strategy) {
  return keel_support::guard(host, kSource, [&] {
    if (!host || !args || !out_strategy) throw StatusError(KEEL_ERR_INVALID_ARGUMENT, "create: a NULL argument");
    auto strategy = std::make_unique<LocalSgd>(host, *args, parse_config(args->config_json, args->json_path));
    *out_strategy = strategy.release();  // only on success: outputs are untouched on error
  });
}

void destroy(void* strategy) { delete static_cast<LocalSgd*>(strategy); }

keel_status param_access(void* handle, keel_param_access* out) {
  return with(handle, [&](LocalSgd& s) {
    if (!out) throw StatusError(KEEL_ERR_INVALID_ARGUMENT, "param_access: out is NULL");
    *out = keel_param_access{sizeof(keel_param_access), &s, acquire, release};
  });
}

keel_status begin_microbatch(void* handle, int32_t index, int32_t is_last) {
  return with(handle, [&](LocalSgd&) {
    (void)is_last;  // nothing to prepare: local SGD never reduces gradients
    if (index < 0) throw StatusError(KEEL_ERR_INVALID_ARGUMENT, "begin_microbatch: index is negative");
  });
}

keel_status zero_grads(void* handle) {
  return with(handle, [&](LocalSgd& s) { s.zero_grads(); });
}

keel_status grad_sq_norm(void* handle, double* out) {
  return with(handle, [&](LocalSgd& s) {
    if (!out) throw StatusError(KEEL_ERR_INVALID_ARGUMENT, "grad_sq_norm: out is NULL");
    *out = s.grad_sq_norm();
  });
}

keel_status step(void* handle, const keel_strategy_step_args* args) {
  return with(handle, [&](LocalSgd& s) {
    if (!args || args->struct_size < sizeof(keel_strategy_step_args))
      throw StatusError(KEEL_ERR_INVALID_ARGUMENT, "step: args is NULL or too short");
    s.step(*args);
  });
}

keel_status read_param(void* handle, size_t index, int64_t begin, int64_t count, float* dst) {
  return with(handle, [&](LocalSgd& s) { s.store().read_param(index, begin, count, dst); });
}
keel_status write_param(void* handle, size_t index, int64_t begin, int64_t count, const float* src) {
  return with(handle, [&](LocalSgd& s) { s.store().write_param(index, begin, count, src); });
}
keel_status read_grad(void* handle, size_t index, int64_t begin, int64_t count, float* dst) {
  return with(handle, [&](LocalSgd& s) { s.store().read_grad(index, begin, count, dst); });
}
keel_status read_state(void* handle, int32_t slot, size_t index, int64_t begin, int64_t count, float* dst) {
  return with(handle, [&](LocalSgd& s) { s.store().read_state(slot, index, begin, count, dst); });
}
keel_status write_state(void* handle, int32_t slot, size_t index, int64_t begin, int64_t count, const float* src) {
  return with(handle, [&](LocalSgd& s) { s.store().write_state(slot, index, begin, count, src); });
}
keel_status owned_range(void* handle, int32_t kind, size_t index, int64_t* begin, int64_t* end) {
  return with(handle, [&](LocalSgd& s) { s.store().owned_range(kind, index, begin, end); });
}
keel_status describe(void* handle, keel_strategy_info* out) {
  return with(handle, [&](LocalSgd& s) {
    keel_support::write_sized_output(out, s.store().describe(1), sizeof(keel_strategy_info), "describe: out");
  });
}

keel_status own_state_count(void* handle, int32_t* out) {
  return with(handle, [&](LocalSgd& s) {
    if (!out) throw StatusError(KEEL_ERR_INVALID_ARGUMENT, "own_state_count: out is NULL");
    *out = s.own_state_count();
  });
}
keel_status own_state_info(void* handle, int32_t index, const char** out_name, int64_t* out_count) {
  return with(handle, [&](LocalSgd& s) {
    if (!out_name || !out_count) throw StatusError(KEEL_ERR_INVALID_ARGUMENT, "own_state_info: an output is NULL");
    const std::string& name = s.own_state_name(index);
    *out_name = name.c_str();
    *out_count = s.own_state_elements();
  });
}
keel_status read_own_state(void* handle, int32_t index, float* dst) {
  return with(handle, [&](LocalSgd& s) { s.read_own_state(index, dst); });
}
keel_status write_own_state(void* handle, int32_t index, const float* src) {
  return with(handle, [&](LocalSgd& s) { s.write_own_state(index, src); });
}

// The table's order is strategy.h's; struct_size tells the core how many slots it holds.
const keel_strategy_api kTable = {
    sizeof(keel_strategy_api),
    validate_config, create, destroy, param_access, begin_microbatch, zero_grads, grad_sq_norm, step,
    read_param, write_param, read_grad,
    read_state, write_state,  // 0.2
    owned_range, describe,    // 0.4
    own_state_count, own_state_info, read_own_state, write_own_state,  // 0.5
};

// Built against these headers' ABI version: a 0.x core loads it only if the minor matches.
const keel_plugin_info kInfo = {
    sizeof(keel_plugin_info), KEEL_KIND_STRATEGY, "localsgd", "1.0.0",
    KEEL_ABI_VERSION_MAJOR, KEEL_ABI_VERSION_MINOR, &kTable,
    "local SGD: each rank steps on its own gradients; parameters averaged every sync_every steps",
};

const keel_plugin_list kList = {sizeof(keel_plugin_list), KEEL_ABI_VERSION_MAJOR, KEEL_ABI_VERSION_MINOR, 1, &kInfo};

}  // namespace
}  // namespace localsgd

// The library's one exported symbol (everything else is hidden by keel_add_plugin).
extern "C" KEEL_EXPORT const keel_plugin_list* keel_plugin_entry(void) { return &localsgd::kList; }
