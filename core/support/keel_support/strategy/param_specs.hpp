// Checks every strategy makes of the model's parameter specs before laying out memory, with
// messages that name the parameter: one place, so every strategy refuses a bad spec alike.
#pragma once

#include <keel/params.h>

#include <string>

#include "keel_support/common/abi_guard.hpp"

namespace keel_support {

// "parameter 3 ("h.0.attn.qkv.weight")", for messages.
inline std::string spec_label(const keel_param_spec& spec, size_t index) {
  return "parameter " + std::to_string(index) + " (\"" + (spec.name ? spec.name : "<unnamed>") + "\")";
}

// Elements of this rank's piece (local_shape), after checking ndim and every extent.
inline int64_t checked_local_numel(const keel_param_spec& spec, size_t index) {
  if (spec.ndim < 0 || spec.ndim > KEEL_MAX_DIMS)
    throw StatusError(KEEL_ERR_INVALID_ARGUMENT, spec_label(spec, index) + ": ndim " + std::to_string(spec.ndim) +
                                                     " is outside [0, " + std::to_string(KEEL_MAX_DIMS) + "]");
  int64_t numel = 1;
  for (int32_t d = 0; d < spec.ndim; ++d) {
    if (spec.local_shape[d] < 0)
      throw StatusError(KEEL_ERR_INVALID_ARGUMENT, spec_label(spec, index) + ": local_shape[" + std::to_string(d) +
                                                       "] is negative: " + std::to_string(spec.local_shape[d]));
    numel *= spec.local_shape[d];
  }
  return numel;
}

}  // namespace keel_support
