// RMSNorm forward/backward, parallel over rows; the weight gradient sums over all rows, so each
// thread sums its rows into a private copy and the copies are added at the end (layernorm's way).
#include "cpu/rmsnorm.h"

#include "cpu/parallel_threshold.h"

#include <omp.h>

#include <cmath>
#include <vector>

namespace keel::cpu {

void rmsnorm_forward(float* out, float* rstd, const float* inp, const float* weight, int64_t N, int64_t C, float eps) {
#pragma omp parallel for if (N * C > keel::cpu::kParallelMinElementsHeavy)
  for (int64_t n = 0; n < N; ++n) {
    const float* x = inp + n * C;
    float sq = 0.0f;
#pragma omp simd reduction(+ : sq)
    for (int64_t i = 0; i < C; ++i) sq += x[i] * x[i];
    const float s = 1.0f / std::sqrt(sq / C + eps);
    float* y = out + n * C;
#pragma omp simd
    for (int64_t i = 0; i < C; ++i) y[i] = (x[i] * s) * weight[i];
    rstd[n] = s;
  }
}

void rmsnorm_backward(float* dinp, float* dweight, const float* dout, const float* inp, const float* weight,
                      const float* rstd, int64_t N, int64_t C) {
  const bool parallel = N * C > keel::cpu::kParallelMinElementsHeavy;
  const int threads = parallel ? omp_get_max_threads() : 1;
  std::vector<float> partial(static_cast<size_t>(threads) * C, 0.0f);  // per thread: dweight
#pragma omp parallel num_threads(threads)
  {
    float* dw = partial.data() + static_cast<size_t>(omp_get_thread_num()) * C;
#pragma omp for
    for (int64_t n = 0; n < N; ++n) {
      const float* x = inp + n * C;
      const float* g = dout + n * C;
      const float s = rstd[n];
      // y_i = w_i x_i s, s = (mean(x²) + eps)^(-1/2), ∂s/∂x_j = -s³ x_j / C:
      // dx_j = s (w_j g_j - x_j s² mean(w g x))
      float wgx = 0.0f;
#pragma omp simd reduction(+ : wgx)
      for (int64_t i = 0; i < C; ++i) wgx += weight[i] * g[i] * x[i];
      const float coefficient = s * s * wgx / C;
      float* dx = dinp + n * C;
#pragma omp simd
      for (int64_t i = 0; i < C; ++i) {
        dw[i] += g[i] * (x[i] * s);
        dx[i] += s * (weight[i] * g[i] - x[i] * coefficient);
      }
    }
  }
#pragma omp parallel for if (parallel)
  for (int64_t i = 0; i < C; ++i) {
    float w = 0.0f;
    for (int t = 0; t < threads; ++t) w += partial[static_cast<size_t>(t) * C + i];
    dweight[i] += w;
  }
}

}  // namespace keel::cpu
