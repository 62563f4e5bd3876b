// Reproducible random fp32 arrays for optimizer tests (fixed seeds, so a failure reproduces).
#pragma once

#include <cstdint>
#include <random>
#include <vector>

namespace keel_test {

inline std::vector<float> random_normal(size_t n, uint32_t seed, float stddev = 1.0f) {
  std::mt19937 engine(seed);
  std::normal_distribution<float> normal(0.0f, stddev);
  std::vector<float> values(n);
  for (float& v : values) v = normal(engine);
  return values;
}

}  // namespace keel_test
