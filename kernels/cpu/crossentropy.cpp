// Cross-entropy forward/backward, parallel over rows. The loss is computed as
// logsumexp - logit[target] in double from the logits themselves, which is exact where
// -log(prob) of a rounded probability would lose digits (and works when probs alias logits).
#include "cpu/crossentropy.h"

#include "cpu/parallel_threshold.h"

#include <algorithm>
#include <cmath>

#include "cpu/vecmath.h"

namespace keel::cpu {

void crossentropy_forward(float* losses, float* probs, const float* logits, const int32_t* targets, int64_t N,
                          int64_t V, int64_t Vp) {
#pragma omp parallel for if (N * V > keel::cpu::kParallelMinElements)
  for (int64_t n = 0; n < N; ++n) {
    const float* x = logits + n * Vp;
    float* p = probs + n * Vp;
    const int32_t target = targets[n];
    const float target_logit = target >= 0 ? x[target] : 0.0f;  // read before p overwrites x
    float max = -INFINITY;
#pragma omp simd reduction(max : max)
    for (int64_t i = 0; i < V; ++i) max = std::max(max, x[i]);
    const float sum = exp_shifted_sum(p, x, max, V);
    const float inv = 1.0f / sum;
#pragma omp simd
    for (int64_t i = 0; i < V; ++i) p[i] *= inv;
    std::fill(p + V, p + Vp, 0.0f);
    losses[n] = target >= 0 ? static_cast<float>(std::log(static_cast<double>(sum)) + max - target_logit) : 0.0f;
  }
}

void crossentropy_backward(float* dlogits, const float* probs, const int32_t* targets, float dloss, int64_t N,
                           int64_t V, int64_t Vp) {
#pragma omp parallel for if (N * V > keel::cpu::kParallelMinElements)
  for (int64_t n = 0; n < N; ++n) {
    const int32_t target = targets[n];
    if (target < 0) continue;
    float* d = dlogits + n * Vp;
    const float* p = probs + n * Vp;
#pragma omp simd
    for (int64_t i = 0; i < V; ++i) d[i] += p[i] * dloss;
    d[target] -= dloss;
  }
}

}  // namespace keel::cpu
