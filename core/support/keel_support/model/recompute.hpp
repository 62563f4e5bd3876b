// Activation recomputation (Korthikanti et al. 2022, Megatron-LM's --recompute-granularity) as a
// transformer model's config names it: what a training forward keeps for the backward and what
// the backward computes again. Shared by the gpt and llama models; installed for third-party ones.
#pragma once

#include <string>

#include "keel_support/common/json_section.hpp"

namespace keel_support {

enum class Recompute {
  NONE,       // every block's tensors are kept
  SELECTIVE,  // attention's saved state (the (B,NH,T,T) probabilities) is dropped and recomputed
  FULL,       // only each block's input (the residual stream) is kept; the block runs again
};

// As the config writes it.
inline const char* recompute_name(Recompute mode) {
  return mode == Recompute::FULL ? "full" : mode == Recompute::SELECTIVE ? "selective" : "none";
}

// The section's "recompute" key: "none" (the default), "selective" or "full".
inline Recompute parse_recompute(JsonSection& section) {
  const std::string mode = section.get_choice("recompute", "none", {"none", "selective", "full"});
  return mode == "full" ? Recompute::FULL : mode == "selective" ? Recompute::SELECTIVE : Recompute::NONE;
}

}  // namespace keel_support
