// The strategy table of a plugin built on the parameter store, written once: every slot runs
// its body under guard (no exception crosses the ABI, a callee's own message is kept), checks
// its output pointers, and forwards to the strategy class — or, for what the store serves as
// is (host access by range, owned ranges, describe), to its store(). A plugin then writes only
// validate_config and create (they parse its config section) and replaces the slots its
// policy changes.
//
// The strategy class provides: static constexpr const char* kSource ("strategy ddp", the
// messages' prefix); host(); store(); params_resident(); acquire, release, begin_microbatch,
// zero_grads, grad_sq_norm and step as in param_access/strategy.h, throwing keel_support errors.
// Optionally holds_whole(): the KEEL_STRATEGY_HOLDS_* bits describe reports (0.19; 0 without it),
// and dp_levels(): whether it works in the data-parallel group's levels (0.19; false without it).
#pragma once

#include <keel/strategy.h>

#include <type_traits>

#include "keel_support/common/abi_guard.hpp"
#include "keel_support/strategy/param_store.hpp"
#include "keel_support/common/sized_output.hpp"

namespace keel_support {

// Whether a strategy class says what it holds whole (an older one says nothing: 0).
template <typename Strategy, typename = void>
struct SaysWhatItHoldsWhole : std::false_type {};
template <typename Strategy>
struct SaysWhatItHoldsWhole<Strategy, std::void_t<decltype(std::declval<const Strategy&>().holds_whole())>>
    : std::true_type {};

// Whether a strategy class says it works in the data-parallel group's levels (0 without it).
template <typename Strategy, typename = void>
struct SaysItUsesDpLevels : std::false_type {};
template <typename Strategy>
struct SaysItUsesDpLevels<Strategy, std::void_t<decltype(std::declval<const Strategy&>().dp_levels())>>
    : std::true_type {};

template <typename Strategy>
struct StrategySlots {
  // Runs body(strategy) under guard; without a strategy there is no host to carry a message.
  template <typename Body>
  static keel_status with(void* handle, Body&& body) noexcept {
    auto* strategy = static_cast<Strategy*>(handle);
    if (!strategy) return KEEL_ERR_INVALID_ARGUMENT;
    return guard(strategy->host(), Strategy::kSource, [&] { body(*strategy); });
  }

  // --- keel_param_access ---
  static keel_status acquire(void* ctx, int32_t layer, int32_t phase, keel_tensor* params, keel_tensor* grads,
                             size_t n) {
    return with(ctx, [&](Strategy& s) { s.acquire(layer, phase, params, grads, n); });
  }
  static keel_status release(void* ctx, int32_t layer, int32_t phase, int32_t grads_final) {
    return with(ctx, [&](Strategy& s) { s.release(layer, phase, grads_final); });
  }

  // --- keel_strategy_api: the strategy's own ---
  static void destroy(void* strategy) { delete static_cast<Strategy*>(strategy); }
  static keel_status param_access(void* handle, keel_param_access* out_access) {
    return with(handle, [&](Strategy& s) {
      if (!out_access) throw StatusError(KEEL_ERR_INVALID_ARGUMENT, "param_access: out_access is NULL");
      *out_access = keel_param_access{sizeof(keel_param_access), &s, acquire, release};
    });
  }
  static keel_status begin_microbatch(void* handle, int32_t index, int32_t is_last) {
    return with(handle, [&](Strategy& s) { s.begin_microbatch(index, is_last); });
  }
  static keel_status zero_grads(void* handle) {
    return with(handle, [&](Strategy& s) { s.zero_grads(); });
  }
  static keel_status grad_sq_norm(void* handle, double* out_sum_squares) {
    return with(handle, [&](Strategy& s) {
      if (!out_sum_squares) throw StatusError(KEEL_ERR_INVALID_ARGUMENT, "grad_sq_norm: out_sum_squares is NULL");
      *out_sum_squares = s.grad_sq_norm();
    });
  }
  static keel_status step(void* handle, const keel_strategy_step_args* args) {
    return with(handle, [&](Strategy& s) {
      if (!args || args->struct_size < sizeof(keel_strategy_step_args))
        throw StatusError(KEEL_ERR_INVALID_ARGUMENT, "step: args is NULL or older than this plugin's ABI");
      s.step(*args);
    });
  }

  // --- keel_strategy_api: the store's ---
  static keel_status read_param(void* handle, size_t index, int64_t begin, int64_t count, float* dst_host) {
    return with(handle, [&](Strategy& s) { s.store().read_param(index, begin, count, dst_host); });
  }
  static keel_status write_param(void* handle, size_t index, int64_t begin, int64_t count, const float* src_host) {
    return with(handle, [&](Strategy& s) { s.store().write_param(index, begin, count, src_host); });
  }
  static keel_status read_grad(void* handle, size_t index, int64_t begin, int64_t count, float* dst_host) {
    return with(handle, [&](Strategy& s) { s.store().read_grad(index, begin, count, dst_host); });
  }
  static keel_status read_state(void* handle, int32_t slot, size_t index, int64_t begin, int64_t count,
                                float* dst_host) {
    return with(handle, [&](Strategy& s) { s.store().read_state(slot, index, begin, count, dst_host); });
  }
  static keel_status write_state(void* handle, int32_t slot, size_t index, int64_t begin, int64_t count,
                                 const float* src_host) {
    return with(handle, [&](Strategy& s) { s.store().write_state(slot, index, begin, count, src_host); });
  }
  static keel_status owned_range(void* handle, int32_t kind, size_t index, int64_t* begin, int64_t* end) {
    return with(handle, [&](Strategy& s) { s.store().owned_range(kind, index, begin, end); });
  }
  static keel_status describe(void* handle, keel_strategy_info* out) {
    return with(handle, [&](Strategy& s) {
      keel_strategy_info info = s.store().describe(s.params_resident());
      if constexpr (SaysWhatItHoldsWhole<Strategy>::value) info.holds_whole = s.holds_whole();
      if constexpr (SaysItUsesDpLevels<Strategy>::value) info.dp_levels = s.dp_levels() ? 1u : 0u;
      write_sized_output(out, info, sizeof(keel_strategy_info), "describe: out");
    });
  }

  // The whole 0.4 table (own-state slots NULL: none) around the plugin's validate_config and create.
  static keel_strategy_api table(decltype(keel_strategy_api::validate_config) validate_config,
                                 decltype(keel_strategy_api::create) create) {
    keel_strategy_api api{};
    api.struct_size = sizeof(api);
    api.validate_config = validate_config;
    api.create = create;
    api.destroy = destroy;
    api.param_access = param_access;
    api.begin_microbatch = begin_microbatch;
    api.zero_grads = zero_grads;
    api.grad_sq_norm = grad_sq_norm;
    api.step = step;
    api.read_param = read_param;
    api.write_param = write_param;
    api.read_grad = read_grad;
    api.read_state = read_state;
    api.write_state = write_state;
    api.owned_range = owned_range;
    api.describe = describe;
    return api;
  }
};

}  // namespace keel_support
