// SwiGLU forward/backward, parallel over rows; σ from std::exp, in the form that cannot
// overflow for large |g| (exp of a non-positive number only).
#include "cpu/swiglu.h"

#include "cpu/parallel_threshold.h"

#include <cmath>

namespace keel::cpu {
namespace {

float sigmoid(float g) {
  if (g >= 0.0f) return 1.0f / (1.0f + std::exp(-g));
  const float e = std::exp(g);
  return e / (1.0f + e);
}

}  // namespace

void swiglu_forward(float* out, const float* gate_up, int64_t N, int64_t F) {
#pragma omp parallel for if (N * F > keel::cpu::kParallelMinElementsHeavy)
  for (int64_t n = 0; n < N; ++n) {
    const float* gate = gate_up + n * 2 * F;
    const float* up = gate + F;
    float* y = out + n * F;
    for (int64_t i = 0; i < F; ++i) y[i] = gate[i] * sigmoid(gate[i]) * up[i];
  }
}

void swiglu_backward(float* dgate_up, const float* dout, const float* gate_up, int64_t N, int64_t F) {
#pragma omp parallel for if (N * F > keel::cpu::kParallelMinElementsHeavy)
  for (int64_t n = 0; n < N; ++n) {
    const float* gate = gate_up + n * 2 * F;
    const float* up = gate + F;
    const float* g = dout + n * F;
    float* dgate = dgate_up + n * 2 * F;
    float* dup = dgate + F;
    for (int64_t i = 0; i < F; ++i) {
      const float s = sigmoid(gate[i]);
      const float silu = gate[i] * s;
      dup[i] += g[i] * silu;
      // silu'(x) = σ(x) (1 + x (1 − σ(x)))
      dgate[i] += g[i] * up[i] * s * (1.0f + gate[i] * (1.0f - s));
    }
  }
}

}  // namespace keel::cpu
