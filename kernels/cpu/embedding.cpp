// Embedding forward/backward. A token can repeat within a batch, so the dwte scatter is split
// over threads by channel slices (each thread walks every token for its own columns): no two
// threads touch the same float, and the order of additions does not depend on the thread count.
#include "cpu/embedding.h"

#include "cpu/parallel_threshold.h"

#include <omp.h>

#include <algorithm>

namespace keel::cpu {

void embedding_forward(float* out, const int32_t* tokens, const float* wte, const float* wpe, int64_t B,
                       int64_t T, int64_t C) {
#pragma omp parallel for collapse(2) if (B * T * C > keel::cpu::kParallelMinElements)
  for (int64_t b = 0; b < B; ++b) {
    for (int64_t t = 0; t < T; ++t) {
      float* o = out + (b * T + t) * C;
      const float* wt = wte + static_cast<int64_t>(tokens[b * T + t]) * C;
      const float* wp = wpe + t * C;
#pragma omp simd
      for (int64_t i = 0; i < C; ++i) o[i] = wt[i] + wp[i];
    }
  }
}

void embedding_backward(float* dwte, float* dwpe, const float* dout, const int32_t* tokens, int64_t B,
                        int64_t T, int64_t C) {
  const bool parallel = B * T * C > keel::cpu::kParallelMinElements;
  if (dwpe) {
#pragma omp parallel for if (parallel)
    for (int64_t t = 0; t < T; ++t) {
      float* d = dwpe + t * C;
      for (int64_t b = 0; b < B; ++b) {
        const float* g = dout + (b * T + t) * C;
#pragma omp simd
        for (int64_t i = 0; i < C; ++i) d[i] += g[i];
      }
    }
  }
  if (dwte) {
    // Slices of at least 16 floats (one cache line) so threads do not share lines.
    const int64_t slices = std::max<int64_t>(1, std::min<int64_t>(parallel ? omp_get_max_threads() : 1, C / 16));
#pragma omp parallel for num_threads(static_cast<int>(slices)) if (parallel)
    for (int64_t slice = 0; slice < slices; ++slice) {
      const int64_t i0 = C * slice / slices, i1 = C * (slice + 1) / slices;
      for (int64_t bt = 0; bt < B * T; ++bt) {
        float* d = dwte + static_cast<int64_t>(tokens[bt]) * C;
        const float* g = dout + bt * C;
#pragma omp simd
        for (int64_t i = i0; i < i1; ++i) d[i] += g[i];
      }
    }
  }
}

}  // namespace keel::cpu
