// Required slots per kind. Slots appended by later minors (model external_name, strategy
// read_state) are optional and are checked with KEEL_HAS_SLOT where they are called. A backend's
// fp32-only compute ops (0.1) are required of a backend built before 0.8 alone: from 0.8 the
// *_dt ops compute at any type, and a consumer that calls an fp32 op itself asks for it at create
// (KEEL_REQUIRE_BACKEND_OP, check_strategy_tables) and refuses the backend by the op's name.
#include "loader/table_check.h"

#include <keel/keel.h>

#include <algorithm>
#include <utility>
#include <vector>

namespace keel {
namespace {

template <typename Table>
std::string missing_slots(const void* api, const std::vector<std::pair<const char*, size_t>>& slots) {
  const auto* table = static_cast<const Table*>(api);
  size_t required_bytes = 0;
  for (const auto& slot : slots) required_bytes = std::max(required_bytes, slot.second + sizeof(void*));
  if (table->struct_size < required_bytes)
    return "its table is " + std::to_string(table->struct_size) + " bytes, too short to hold the " +
           std::to_string(slots.size()) + " required slots (" + std::to_string(required_bytes) + " bytes)";
  std::string missing;
  for (const auto& [name, offset] : slots) {
    const void* slot = *reinterpret_cast<const void* const*>(reinterpret_cast<const char*>(table) + offset);
    if (!slot) missing += (missing.empty() ? "" : ", ") + std::string(name);
  }
  return missing.empty() ? "" : "required slot(s) not implemented: " + missing;
}

#define SLOT(T, s) std::pair<const char*, size_t>{#s, offsetof(T, s)}

std::string check_backend_table(const keel_plugin_info& info) {
  using T = keel_backend_api;
  std::vector<std::pair<const char*, size_t>> slots = {
      SLOT(T, validate_config), SLOT(T, create),      SLOT(T, destroy),   SLOT(T, device),
      SLOT(T, peak_flops),      SLOT(T, alloc),       SLOT(T, free_memory), SLOT(T, copy),
      SLOT(T, fill_zero),       SLOT(T, synchronize)};
  const std::vector<std::pair<const char*, size_t>> fp32_only = {
      SLOT(T, matmul_forward),     SLOT(T, matmul_backward),    SLOT(T, layernorm_forward),
      SLOT(T, layernorm_backward), SLOT(T, attention_saved_floats), SLOT(T, attention_forward),
      SLOT(T, attention_backward), SLOT(T, gelu_forward),       SLOT(T, gelu_backward),
      SLOT(T, add),                SLOT(T, accumulate),         SLOT(T, scale),
      SLOT(T, embedding_forward),  SLOT(T, embedding_backward), SLOT(T, crossentropy_forward),
      SLOT(T, crossentropy_backward), SLOT(T, sum_squares)};
  if (info.abi_minor >= 8) return missing_slots<T>(info.api, slots);
  slots.insert(slots.end(), fp32_only.begin(), fp32_only.end());
  std::string why = missing_slots<T>(info.api, slots);
  if (!why.empty()) why += " (a backend built against ABI 0." + std::to_string(info.abi_minor) +
                           " must fill its fp32 ops; from 0.8 the *_dt ops may stand in for them)";
  return why;
}

}  // namespace

std::string check_kind_table(const keel_plugin_info& info) {
  if (!info.api) return "its entry has no function table (api is NULL)";
  switch (info.kind) {
    case KEEL_KIND_BACKEND:
      return check_backend_table(info);
    case KEEL_KIND_MODEL: {
      using T = keel_model_api;
      return missing_slots<T>(info.api, {SLOT(T, validate_config), SLOT(T, create), SLOT(T, destroy), SLOT(T, describe),
                                         SLOT(T, flops_per_token), SLOT(T, forward), SLOT(T, backward)});
    }
    case KEEL_KIND_OPTIMIZER: {
      using T = keel_optimizer_api;
      return missing_slots<T>(info.api, {SLOT(T, validate_config), SLOT(T, create), SLOT(T, destroy),
                                         SLOT(T, describe), SLOT(T, step)});
    }
    case KEEL_KIND_STRATEGY: {
      using T = keel_strategy_api;
      return missing_slots<T>(info.api, {SLOT(T, validate_config), SLOT(T, create), SLOT(T, destroy),
                                         SLOT(T, param_access), SLOT(T, begin_microbatch), SLOT(T, zero_grads),
                                         SLOT(T, grad_sq_norm), SLOT(T, step), SLOT(T, read_param), SLOT(T, write_param),
                                         SLOT(T, read_grad)});
    }
    case KEEL_KIND_DATA: {
      using T = keel_data_api;
      return missing_slots<T>(info.api, {SLOT(T, validate_config), SLOT(T, create), SLOT(T, destroy), SLOT(T, next_batch)});
    }
    case KEEL_KIND_COMM: {
      using T = keel_comm_api;
      return missing_slots<T>(info.api, {SLOT(T, validate_config), SLOT(T, create_world), SLOT(T, destroy), SLOT(T, rank),
                                         SLOT(T, size), SLOT(T, split), SLOT(T, all_reduce), SLOT(T, reduce_scatter),
                                         SLOT(T, all_gather), SLOT(T, broadcast), SLOT(T, send), SLOT(T, recv),
                                         SLOT(T, barrier), SLOT(T, wait), SLOT(T, counters), SLOT(T, abort_world)});
    }
    case KEEL_KIND_SCHEDULE: {
      using T = keel_schedule_api;
      // The kind's first table (0.7) ends with splits_backward, a flag the core reads, not a slot.
      const auto* table = static_cast<const T*>(info.api);
      const size_t first_table_bytes = offsetof(T, splits_backward) + sizeof(table->splits_backward);
      if (table->struct_size < first_table_bytes)
        return "its table is " + std::to_string(table->struct_size) + " bytes, smaller than ABI 0.7's keel_schedule_api (" +
               std::to_string(first_table_bytes) + " bytes, through splits_backward)";
      if (table->splits_backward != 0 && table->splits_backward != 1)
        return "its splits_backward is " + std::to_string(table->splits_backward) + ", expected 0 or 1";
      return missing_slots<T>(info.api, {SLOT(T, validate_config), SLOT(T, check_shape), SLOT(T, build)});
    }
    case KEEL_KIND_OFFLOAD: {
      // Every slot of the kind's first table (0.7) is required: the strategy calls them all.
      using T = keel_offload_api;
      return missing_slots<T>(info.api, {SLOT(T, validate_config), SLOT(T, create), SLOT(T, destroy), SLOT(T, describe),
                                         SLOT(T, add_extent), SLOT(T, submit_write), SLOT(T, submit_read), SLOT(T, wait),
                                         SLOT(T, wait_all), SLOT(T, counters), SLOT(T, alloc_buffer),
                                         SLOT(T, free_buffer)});
    }
    default:
      return "unknown plugin kind " + std::to_string(info.kind) +
             " (this core knows backend, model, optimizer, strategy, data, comm, schedule, offload)";
  }
}

}  // namespace keel
