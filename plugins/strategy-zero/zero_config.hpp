// The "parallel.strategy" section of the zero plugin: which ZeRO stage, and whether stage 3
// prefetches the next layer's parameters while the current one computes.
#pragma once

#include <cstdint>

namespace keel_zero {

struct ZeroConfig {
  int32_t stage = 0;     // 1: shard optimizer state; 2: and gradients; 3: and parameters
  bool prefetch = true;  // stage 3: start gathering the next layer at each acquire
};

// Throws keel_support::ConfigError naming the key.
ZeroConfig parse_zero_config(const char* config_json, const char* json_path);

}  // namespace keel_zero
