// RoPE, parallel over rows. Each row's cos and sin are computed once per frequency from the fp32
// angle position · inv_freq (transformers forms that product in fp32 too) and shared by its
// heads.
#include "cpu/rope.h"

#include "cpu/parallel_threshold.h"

#include <cmath>
#include <vector>

namespace keel::cpu {
namespace {

void turn(float* x, const float* inv_freq, int64_t B, int64_t T, int64_t heads, int64_t head_dim, int64_t stride,
          int64_t first, int64_t position0, const int32_t* positions, float direction) {
  const int64_t half = head_dim / 2;
#pragma omp parallel if (B * T * heads * head_dim > keel::cpu::kParallelMinElementsHeavy)
  {
    std::vector<float> cosines(static_cast<size_t>(half)), sines(static_cast<size_t>(half));
#pragma omp for
    for (int64_t row = 0; row < B * T; ++row) {
      const float position = static_cast<float>(positions ? int64_t(positions[row]) : position0 + row % T);
      for (int64_t i = 0; i < half; ++i) {
        const double angle = static_cast<double>(position * inv_freq[i]);
        cosines[i] = static_cast<float>(std::cos(angle));
        sines[i] = direction * static_cast<float>(std::sin(angle));
      }
      for (int64_t h = 0; h < heads; ++h) {
        float* a = x + row * stride + first + h * head_dim;
        float* b = a + half;
#pragma omp simd
        for (int64_t i = 0; i < half; ++i) {
          const float ai = a[i], bi = b[i];
          a[i] = ai * cosines[i] - bi * sines[i];
          b[i] = bi * cosines[i] + ai * sines[i];
        }
      }
    }
  }
}

}  // namespace

void rope_forward(float* x, const float* inv_freq, int64_t B, int64_t T, int64_t heads, int64_t head_dim,
                  int64_t stride, int64_t first, int64_t position0) {
  turn(x, inv_freq, B, T, heads, head_dim, stride, first, position0, nullptr, 1.0f);
}

void rope_forward_at(float* x, const float* inv_freq, const int32_t* positions, int64_t B, int64_t T, int64_t heads,
                     int64_t head_dim, int64_t stride, int64_t first) {
  turn(x, inv_freq, B, T, heads, head_dim, stride, first, 0, positions, 1.0f);
}

void rope_backward_at(float* dx, const float* inv_freq, const int32_t* positions, int64_t B, int64_t T, int64_t heads,
                      int64_t head_dim, int64_t stride, int64_t first) {
  turn(dx, inv_freq, B, T, heads, head_dim, stride, first, 0, positions, -1.0f);
}

void rope_backward(float* dx, const float* inv_freq, int64_t B, int64_t T, int64_t heads, int64_t head_dim,
                   int64_t stride, int64_t first, int64_t position0) {
  turn(dx, inv_freq, B, T, heads, head_dim, stride, first, position0, nullptr, -1.0f);
}

}  // namespace keel::cpu
