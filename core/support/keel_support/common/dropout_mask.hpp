// Dropout masks drawn from a counter-based hash (backend.h dropout_dt), so the same mask comes back
// in a recomputation, a later backward, on another tensor-parallel rank and in a reference written
// in Python: the one definition of the rule on the host, shared by the cpu backend, the models'
// site seeds and the core's per-micro-batch seeds. The cuda kernel states it again on the device.
#pragma once

#include <cstdint>

namespace keel_support {

// Steele, Lea and Flood's SplitMix64 finalizer: a bijection of 64-bit words that mixes every bit.
constexpr uint64_t splitmix64(uint64_t z) {
  z += 0x9E3779B97F4A7C15ull;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

// Whether element (row, col) of a mask with `seed` is kept at drop probability p.
inline bool dropout_keeps(uint64_t seed, uint64_t row, uint64_t col, float p) {
  const uint64_t h = splitmix64(seed ^ splitmix64((row << 32) | col));
  return float(h >> 40) * (1.0f / 16777216.0f) >= p;
}

// The seed of one site's mask in a micro-batch: `layer` the model's block index (0 first, the
// same on every pipeline stage), `site` which input of the block (a model's own numbering).
constexpr uint64_t dropout_site_seed(uint64_t microbatch_seed, int64_t layer, int32_t site) {
  return splitmix64(microbatch_seed ^ (uint64_t(layer) << 8 | uint64_t(uint32_t(site) & 0xFFu)));
}

}  // namespace keel_support
