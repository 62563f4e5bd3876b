// The checks every strategy makes of its create args before laying out memory: the backend and
// optimizer tables have the slots a parameter store calls (plus any the strategy's own policy
// adds), so a short table fails at create with a message rather than at the first step with a
// crash; and host ranges stay inside a parameter's piece.
#pragma once

#include <keel/plugin.h>
#include <keel/strategy.h>

#include <cstddef>
#include <initializer_list>
#include <string>
#include <utility>

#include "keel_support/common/abi_guard.hpp"
#include "keel_support/strategy/param_specs.hpp"

namespace keel_support {

// A backend slot a strategy's policy needs beyond the store's own: its name, and whether the table has it.
using BackendSlotNeed = std::pair<const char*, bool>;

inline void check_strategy_tables(const keel_strategy_create_args& args,
                                  std::initializer_list<BackendSlotNeed> policy_slots = {}) {
  if (args.struct_size < offsetof(keel_strategy_create_args, dp_comm))
    throw StatusError(KEEL_ERR_INVALID_ARGUMENT, "create: args is older than this plugin's ABI");
  const keel_backend_api* backend = args.backend;
  if (!backend) throw StatusError(KEEL_ERR_INVALID_ARGUMENT, "create: backend is NULL");
  const char* missing = !KEEL_HAS_SLOT(backend, device)        ? "device"
                        : !KEEL_HAS_SLOT(backend, alloc)       ? "alloc"
                        : !KEEL_HAS_SLOT(backend, free_memory) ? "free_memory"
                        : !KEEL_HAS_SLOT(backend, copy)        ? "copy"
                        : !KEEL_HAS_SLOT(backend, fill_zero)   ? "fill_zero"
                        : !KEEL_HAS_SLOT(backend, sum_squares) ? "sum_squares"
                                                               : nullptr;
  for (const BackendSlotNeed& need : policy_slots)
    if (!missing && !need.second) missing = need.first;
  if (missing)
    throw StatusError(KEEL_ERR_UNIMPLEMENTED, std::string("the backend lacks the \"") + missing +
                                                  "\" slot this strategy needs");
  if (!args.optimizer) throw StatusError(KEEL_ERR_INVALID_ARGUMENT, "create: optimizer is NULL");
  if (!KEEL_HAS_SLOT(args.optimizer, describe) || !KEEL_HAS_SLOT(args.optimizer, step))
    throw StatusError(KEEL_ERR_UNIMPLEMENTED, "the optimizer lacks the \"describe\" or \"step\" slot");
}

// [begin, begin+count) inside a piece of `numel` elements, and a host pointer where there is
// something to copy. `what` names the slot ("read_param").
inline void check_piece_range(const char* what, const keel_param_spec& spec, size_t index, int64_t numel,
                              int64_t begin, int64_t count, const void* host_ptr) {
  if (begin < 0 || count < 0 || begin > numel || count > numel - begin)
    throw StatusError(KEEL_ERR_INVALID_ARGUMENT, std::string(what) + ": " + spec_label(spec, index) + " has " +
                                                     std::to_string(numel) + " elements; " + std::to_string(count) +
                                                     " elements from element " + std::to_string(begin) +
                                                     " do not fit");
  if (count > 0 && !host_ptr) throw StatusError(KEEL_ERR_INVALID_ARGUMENT, std::string(what) + ": the host buffer is NULL");
}

}  // namespace keel_support
