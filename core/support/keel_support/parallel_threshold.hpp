// Forwarding header: the OpenMP thresholds moved to the cpu kernels (kernels/cpu/parallel_threshold.h,
// keel::cpu::kParallelMinElements), which are not installed; these copies of the two values keep
// plugin source written against the flat layout compiling, and go away after the next release.
// Keel's old-include test checks that they equal the kernels' own.
#pragma once

#include <cstdint>

namespace keel_support {
constexpr int64_t kParallelMinElements = int64_t(1) << 15;
constexpr int64_t kParallelMinElementsHeavy = int64_t(1) << 14;
}  // namespace keel_support
