// Widening and rounding loops for bf16 storage: memory-bound, split over threads when large.
#include "cpu/bf16.h"

#include "cpu/parallel_threshold.h"

namespace keel::cpu {

void widen_bf16(float* dst, const bf16* src, int64_t n) {
#pragma omp parallel for simd if (n > keel::cpu::kParallelMinElements)
  for (int64_t i = 0; i < n; ++i) dst[i] = bf16_to_float(src[i]);
}

void round_to_bf16(bf16* dst, const float* src, int64_t n) {
#pragma omp parallel for simd if (n > keel::cpu::kParallelMinElements)
  for (int64_t i = 0; i < n; ++i) dst[i] = float_to_bf16(src[i]);
}

}  // namespace keel::cpu
