// The optimizer table of a plugin, written once: every slot runs its body under guard (no
// exception crosses the ABI), checks its pointers and the step's arguments, and forwards to the
// optimizer class. An update rule then writes only what is its own: its config section, how
// many state slots it uses, its describe answers and its update on host memory.
//
// OptimizerSlots<Optimizer, parse_config>: parse_config(config_json, json_path) reads the
// "optimizer" section into the optimizer's config (throwing ConfigError), for validate_config
// and create alike, so what validates is what runs. The optimizer class provides:
//   static constexpr const char* kSource;              // "optimizer adamw": the messages' prefix
//   explicit Optimizer(const Config&);                   // Config: what parse_config returns
//   int32_t n_state_slots() const;                       // fp32 arrays per element
//   float base_lr() const;
//   uint32_t decay_flags() const;                        // KEEL_PARAM_* ranges without decay
//   void update_host(const keel_optimizer_step_args&) const;  // the rule, arguments checked; the
//                                                        // strategy may call it from several threads
// An optimizer with packed state (optimizer.h 0.12) also declares
//   static constexpr uint32_t kFlags;                    // KEEL_OPTIMIZER_PACKED_STATE | ...
//   int64_t packed_bytes(const keel_optimizer_range&) const;
//   void pack(const keel_optimizer_range&, const float* const* state, unsigned char* packed) const;
//   void unpack(const keel_optimizer_range&, const unsigned char* packed, float* const* state) const;
// and its update_host reads and writes args.packed_state (state is NULL).
#pragma once

#include <keel/optimizer.h>

#include <cstddef>
#include <memory>
#include <string>
#include <type_traits>

#include "keel_support/common/abi_guard.hpp"
#include "keel_support/common/sized_output.hpp"

namespace keel_support {

template <typename Optimizer, typename = void>
struct optimizer_flags_of {
  static constexpr uint32_t value = 0;
};
template <typename Optimizer>
struct optimizer_flags_of<Optimizer, std::void_t<decltype(Optimizer::kFlags)>> {
  static constexpr uint32_t value = Optimizer::kFlags;
};

template <typename Optimizer, auto parse_config>
struct OptimizerSlots {
  static constexpr uint32_t kFlags = optimizer_flags_of<Optimizer>::value;
  static constexpr bool kPacked = (kFlags & KEEL_OPTIMIZER_PACKED_STATE) != 0;

  // The optimizer and the host its slots report through.
  struct Instance {
    const keel_host* host;
    Optimizer optimizer;
  };

  // What every update rule may assume: host memory, sane counts, and as many state arrays as
  // describe announced (zero-filled by the strategy at the first step).
  static void check_step_args(const Optimizer& optimizer, const keel_optimizer_step_args* args) {
    // A strategy built before 0.8 hands the args without the backend fields: fine on host memory.
    if (!args || args->struct_size < offsetof(keel_optimizer_step_args, backend))
      throw StatusError(KEEL_ERR_INVALID_ARGUMENT, "step: args is NULL or shorter than ABI 0.1's");
    // Memory host code cannot read is updated through the backend's fused op (0.8).
    if (args->device.device_type != KEEL_DEVICE_CPU &&
        (args->struct_size < offsetof(keel_optimizer_step_args, backend_obj) + sizeof(void*) || !args->backend ||
         !args->backend_obj))
      throw StatusError(KEEL_ERR_INVALID_ARGUMENT, "step: device type " + std::to_string(args->device.device_type) +
                                                       " is not host memory, and no backend came with the step "
                                                       "(optimizer.h backend, ABI 0.8) to run the update on");
    if (args->n < 0) throw StatusError(KEEL_ERR_INVALID_ARGUMENT, "step: n is negative: " + std::to_string(args->n));
    if (args->step < 1)
      throw StatusError(KEEL_ERR_INVALID_ARGUMENT, "step: step is 1-based, found " + std::to_string(args->step));
    if constexpr (kPacked) {
      if (args->struct_size < offsetof(keel_optimizer_step_args, range) + sizeof(keel_optimizer_range))
        throw StatusError(KEEL_ERR_UNIMPLEMENTED, "step: this optimizer keeps its state packed (ABI 0.12), and the "
                                                  "strategy calling it was built against an older ABI that allocates "
                                                  "fp32 state per element (expected a strategy built against 0.12 or later)");
      if (args->device.device_type != KEEL_DEVICE_CPU)
        throw StatusError(KEEL_ERR_UNIMPLEMENTED, "step: this optimizer updates packed state on the host; the device "
                                                  "memory (type " + std::to_string(args->device.device_type) +
                                                      ") is not (expected the cpu backend)");
      if (args->range.struct_size == 0 || (args->n > 0 && !args->packed_state))
        throw StatusError(KEEL_ERR_UNIMPLEMENTED, "step: this optimizer keeps its state packed (ABI 0.12), and the "
                                                  "strategy passed no packed_state (it does not know "
                                                  "KEEL_OPTIMIZER_PACKED_STATE; expected a strategy on keel_support's "
                                                  "ParamStore, e.g. ddp)");
      check_range(args->range);
      if (args->range.n != args->n)
        throw StatusError(KEEL_ERR_INVALID_ARGUMENT, "step: range.n " + std::to_string(args->range.n) + " differs from n " +
                                                         std::to_string(args->n));
      if (args->n > 0 && (!args->params || !args->grads || !args->packed_state))
        throw StatusError(KEEL_ERR_INVALID_ARGUMENT, "step: params, grads or packed_state is NULL");
      return;
    }
    if (args->n == 0) return;
    if (!args->params || !args->grads) throw StatusError(KEEL_ERR_INVALID_ARGUMENT, "step: params or grads is NULL");
    const int32_t slots = optimizer.n_state_slots();
    for (int32_t slot = 0; slot < slots; ++slot)
      if (!args->state || !args->state[slot])
        throw StatusError(KEEL_ERR_INVALID_ARGUMENT, "step: this optimizer needs " + std::to_string(slots) +
                                                         " state slots; slot " + std::to_string(slot) + " is NULL");
  }

  // A range as packed_state_bytes, pack_state, unpack_state and a packed step see it.
  static void check_range(const keel_optimizer_range& range) {
    if (range.struct_size < sizeof(keel_optimizer_range))
      throw StatusError(KEEL_ERR_INVALID_ARGUMENT, "range: struct_size " + std::to_string(range.struct_size) +
                                                       " is below ABI 0.12's " + std::to_string(sizeof(keel_optimizer_range)));
    if (range.n < 0 || range.offset < 0)
      throw StatusError(KEEL_ERR_INVALID_ARGUMENT, "range: n " + std::to_string(range.n) + " or offset " +
                                                       std::to_string(range.offset) + " is negative");
    if (!(kFlags & KEEL_OPTIMIZER_WHOLE_TENSORS)) return;
    if (!range.spec) throw StatusError(KEEL_ERR_INVALID_ARGUMENT, "range: spec is NULL, and this optimizer updates whole tensors");
    int64_t numel = 1;
    for (int32_t d = 0; d < range.spec->ndim; ++d) numel *= range.spec->local_shape[d];
    if (range.offset != 0 || range.n != numel)
      throw StatusError(KEEL_ERR_INVALID_ARGUMENT, std::string("range: ") + (range.spec->name ? range.spec->name : "?") +
                                                       ": elements [" + std::to_string(range.offset) + ", " +
                                                       std::to_string(range.offset + range.n) + ") of " +
                                                       std::to_string(numel) + ", and this optimizer updates whole tensors");
  }

  // Runs body(instance) under guard; without an instance there is no host to carry a message.
  template <typename Body>
  static keel_status with(void* handle, Body&& body) noexcept {
    auto* instance = static_cast<Instance*>(handle);
    if (!instance) return KEEL_ERR_INVALID_ARGUMENT;
    return guard(instance->host, Optimizer::kSource, [&] { body(*instance); });
  }

  static keel_status validate_config(const keel_host* host, const char* config_json, const char* json_path) {
    return guard(host, Optimizer::kSource, [&] { parse_config(config_json, json_path); });
  }
  static keel_status create(const keel_host* host, const char* config_json, const char* json_path,
                            void** out_optimizer) {
    return guard(host, Optimizer::kSource, [&] {
      if (!out_optimizer) throw StatusError(KEEL_ERR_INVALID_ARGUMENT, "create: out_optimizer is NULL");
      auto instance =
          std::make_unique<Instance>(Instance{host, Optimizer(parse_config(config_json, json_path))});
      *out_optimizer = instance.release();
    });
  }
  static void destroy(void* handle) { delete static_cast<Instance*>(handle); }
  static keel_status describe(void* handle, keel_optimizer_info* out_info) {
    return with(handle, [&](Instance& instance) {
      keel_optimizer_info info{};
      info.struct_size = sizeof(info);
      info.n_state_slots = instance.optimizer.n_state_slots();
      info.base_lr = instance.optimizer.base_lr();
      info.decay_flags = instance.optimizer.decay_flags();
      info.flags = kFlags;
      write_sized_output(out_info, info, sizeof info, "describe: out_info");
    });
  }
  static keel_status step(void* handle, const keel_optimizer_step_args* args) {
    return with(handle, [&](Instance& instance) {
      check_step_args(instance.optimizer, args);
      if (args->n == 0) return;
      if constexpr (kPacked) instance.optimizer.update_host(*args);  // host memory, checked above
      else if (args->device.device_type == KEEL_DEVICE_CPU) instance.optimizer.update_host(*args);
      else instance.optimizer.update_on_backend(*args);
    });
  }

  static keel_status packed_state_bytes(void* handle, const keel_optimizer_range* range, int64_t* out_bytes) {
    return with(handle, [&](Instance& instance) {
      if (!range || !out_bytes) throw StatusError(KEEL_ERR_INVALID_ARGUMENT, "packed_state_bytes: range or out_bytes is NULL");
      check_range(*range);
      if constexpr (kPacked) *out_bytes = instance.optimizer.packed_bytes(*range);
    });
  }
  static keel_status pack_state(void* handle, const keel_optimizer_range* range, const float* const* state, void* packed) {
    return with(handle, [&](Instance& instance) {
      check_conversion("pack_state", instance.optimizer, range, state, packed);
      if constexpr (kPacked) instance.optimizer.pack(*range, state, static_cast<unsigned char*>(packed));
    });
  }
  static keel_status unpack_state(void* handle, const keel_optimizer_range* range, const void* packed, float* const* state) {
    return with(handle, [&](Instance& instance) {
      check_conversion("unpack_state", instance.optimizer, range, state, packed);
      if constexpr (kPacked) instance.optimizer.unpack(*range, static_cast<const unsigned char*>(packed), state);
    });
  }
  template <typename State>
  static void check_conversion(const char* what, const Optimizer& optimizer, const keel_optimizer_range* range,
                               State state, const void* packed) {
    if (!range) throw StatusError(KEEL_ERR_INVALID_ARGUMENT, std::string(what) + ": range is NULL");
    check_range(*range);
    if (range->n == 0) return;
    if (!packed || !state) throw StatusError(KEEL_ERR_INVALID_ARGUMENT, std::string(what) + ": packed or state is NULL");
    for (int32_t slot = 0; slot < optimizer.n_state_slots(); ++slot)
      if (!state[slot]) throw StatusError(KEEL_ERR_INVALID_ARGUMENT, std::string(what) + ": state slot " + std::to_string(slot) + " is NULL");
  }

  static constexpr keel_optimizer_api table() {
    if constexpr (kPacked)
      return keel_optimizer_api{sizeof(keel_optimizer_api), validate_config, create,     destroy,     describe,
                                step,                       packed_state_bytes, pack_state, unpack_state};
    else
      return keel_optimizer_api{sizeof(keel_optimizer_api), validate_config, create, destroy, describe, step};
  }
};

}  // namespace keel_support
