// Elementwise ops: memory-bound loops, split over threads only when large enough to pay off.
#include "cpu/elementwise.h"

#include "cpu/parallel_threshold.h"

#include <algorithm>
#include <cstring>

namespace keel::cpu {

void add(float* out, const float* a, const float* b, int64_t n) {
#pragma omp parallel for simd if (n > keel::cpu::kParallelMinElements)
  for (int64_t i = 0; i < n; ++i) out[i] = a[i] + b[i];
}

void accumulate(float* dst, const float* src, int64_t n) {
#pragma omp parallel for simd if (n > keel::cpu::kParallelMinElements)
  for (int64_t i = 0; i < n; ++i) dst[i] += src[i];
}

void scale(float* x, float alpha, int64_t n) {
#pragma omp parallel for simd if (n > keel::cpu::kParallelMinElements)
  for (int64_t i = 0; i < n; ++i) x[i] *= alpha;
}

void zero_fill(void* ptr, size_t bytes) {
  constexpr size_t kChunk = size_t{1} << 20;
  const int64_t chunks = static_cast<int64_t>((bytes + kChunk - 1) / kChunk);
#pragma omp parallel for if (chunks > 1)
  for (int64_t c = 0; c < chunks; ++c) {
    const size_t begin = static_cast<size_t>(c) * kChunk;
    std::memset(static_cast<char*>(ptr) + begin, 0, std::min(kChunk, bytes - begin));
  }
}

}  // namespace keel::cpu
