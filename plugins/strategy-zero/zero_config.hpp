// The "parallel.strategy" section of the zero plugin: which ZeRO stage, whether stage 3
// prefetches the next layer's parameters while the current one computes, and whether stages
// 2/3 reduce gradients on a communication thread while the backward goes on.
#pragma once

#include <cstdint>

namespace keel_zero {

struct ZeroConfig {
  int32_t stage = 0;     // 1: shard optimizer state; 2: and gradients; 3: and parameters
  bool prefetch = true;  // stage 3: start gathering the next layer at each acquire
  bool overlap_comm = true;  // stages 2/3: reduce-scatter finished layers on a thread (false: on
                             // the training thread, blocking; same numbers either way)
};

// Throws keel_support::ConfigError naming the key.
ZeroConfig parse_zero_config(const char* config_json, const char* json_path);

}  // namespace keel_zero
