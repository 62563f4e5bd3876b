// The plan is one counting pass and one prefix sum (cheap: N·K integers, on the calling thread);
// the moves go row by row over the OpenMP threads, each output row written by one thread.
#include "cpu/moe_permute.h"

#include <vector>

#include "cpu/parallel_threshold.h"  // defines: kParallelMinElements

namespace keel::cpu {

void moe_permute_plan(int32_t* positions, int64_t* counts, const int32_t* experts, int64_t N, int32_t E, int32_t K) {
  for (int32_t e = 0; e < E; ++e) counts[e] = 0;
  for (int64_t i = 0; i < N * K; ++i) ++counts[experts[i]];
  std::vector<int64_t> next(E, 0);  // the next free row of each expert's block
  for (int32_t e = 1; e < E; ++e) next[e] = next[e - 1] + counts[e - 1];
  for (int64_t i = 0; i < N * K; ++i) positions[i] = static_cast<int32_t>(next[experts[i]]++);
}

void moe_permute(float* out, const float* inp, const float* scale, const int32_t* positions, int64_t N, int32_t K,
                 int64_t C) {
#pragma omp parallel for if (N * K * C > kParallelMinElements)
  for (int64_t n = 0; n < N; ++n) {
    const float* x = inp + n * C;
    for (int32_t j = 0; j < K; ++j) {
      float* y = out + static_cast<int64_t>(positions[n * K + j]) * C;
      const float s = scale ? scale[n * K + j] : 1.0f;
      for (int64_t c = 0; c < C; ++c) y[c] = s * x[c];
    }
  }
}

void moe_unpermute(float* out, const float* inp, const float* scale, const int32_t* positions, int64_t N, int32_t K,
                   int64_t C) {
#pragma omp parallel for if (N * K * C > kParallelMinElements)
  for (int64_t n = 0; n < N; ++n) {
    float* y = out + n * C;
    for (int64_t c = 0; c < C; ++c) y[c] = 0.0f;
    for (int32_t j = 0; j < K; ++j) {
      const float* x = inp + static_cast<int64_t>(positions[n * K + j]) * C;
      const float s = scale ? scale[n * K + j] : 1.0f;
      for (int64_t c = 0; c < C; ++c) y[c] += s * x[c];
    }
  }
}

void moe_unpermute_scale_backward(float* dscale, const float* dout, const float* inp, const int32_t* positions,
                                  int64_t N, int32_t K, int64_t C) {
#pragma omp parallel for if (N * K * C > kParallelMinElements)
  for (int64_t n = 0; n < N; ++n) {
    const float* g = dout + n * C;
    for (int32_t j = 0; j < K; ++j) {
      const float* x = inp + static_cast<int64_t>(positions[n * K + j]) * C;
      float sum = 0.0f;
      for (int64_t c = 0; c < C; ++c) sum += g[c] * x[c];
      dscale[n * K + j] += sum;
    }
  }
}

}  // namespace keel::cpu
