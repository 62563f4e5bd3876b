// LayerNorm forward/backward, parallel over rows. The weight and bias gradients sum over all
// rows, so each thread sums its rows into a private copy and the copies are added at the end.
#include "cpu/layernorm.h"

#include "cpu/parallel_threshold.h"

#include <omp.h>

#include <cmath>
#include <vector>

namespace keel::cpu {

void layernorm_forward(float* out, float* mean, float* rstd, const float* inp, const float* weight,
                       const float* bias, int64_t N, int64_t C) {
  constexpr float kEps = 1e-5f;
#pragma omp parallel for if (N * C > keel::cpu::kParallelMinElementsHeavy)
  for (int64_t n = 0; n < N; ++n) {
    const float* x = inp + n * C;
    float sum = 0.0f;
#pragma omp simd reduction(+ : sum)
    for (int64_t i = 0; i < C; ++i) sum += x[i];
    const float m = sum / C;
    float sq = 0.0f;  // two passes: the variance of the centred row does not cancel
#pragma omp simd reduction(+ : sq)
    for (int64_t i = 0; i < C; ++i) sq += (x[i] - m) * (x[i] - m);
    const float s = 1.0f / std::sqrt(sq / C + kEps);
    float* y = out + n * C;
#pragma omp simd
    for (int64_t i = 0; i < C; ++i) y[i] = (x[i] - m) * s * weight[i] + bias[i];
    mean[n] = m;
    rstd[n] = s;
  }
}

void layernorm_backward(float* dinp, float* dweight, float* dbias, const float* dout, const float* inp,
                        const float* weight, const float* mean, const float* rstd, int64_t N, int64_t C) {
  const bool parallel = N * C > keel::cpu::kParallelMinElementsHeavy;
  const int threads = parallel ? omp_get_max_threads() : 1;
  std::vector<float> partial(static_cast<size_t>(threads) * 2 * C, 0.0f);  // per thread: dweight, dbias
#pragma omp parallel num_threads(threads)
  {
    float* dw = partial.data() + static_cast<size_t>(omp_get_thread_num()) * 2 * C;
    float* db = dw + C;
#pragma omp for
    for (int64_t n = 0; n < N; ++n) {
      const float* x = inp + n * C;
      const float* g = dout + n * C;
      const float m = mean[n], s = rstd[n];
      // dnorm = weight * dout; dinp = s * (dnorm - mean(dnorm) - norm * mean(dnorm * norm))
      float dnorm_mean = 0.0f, dnorm_norm_mean = 0.0f;
#pragma omp simd reduction(+ : dnorm_mean, dnorm_norm_mean)
      for (int64_t i = 0; i < C; ++i) {
        const float norm = (x[i] - m) * s;
        const float dnorm = weight[i] * g[i];
        dnorm_mean += dnorm;
        dnorm_norm_mean += dnorm * norm;
      }
      dnorm_mean /= C;
      dnorm_norm_mean /= C;
      float* dx = dinp + n * C;
#pragma omp simd
      for (int64_t i = 0; i < C; ++i) {
        const float norm = (x[i] - m) * s;
        db[i] += g[i];
        dw[i] += norm * g[i];
        dx[i] += s * (weight[i] * g[i] - dnorm_mean - norm * dnorm_norm_mean);
      }
    }
  }
#pragma omp parallel for if (parallel)
  for (int64_t i = 0; i < C; ++i) {
    float w = 0.0f, b = 0.0f;
    for (int t = 0; t < threads; ++t) {
      w += partial[static_cast<size_t>(t) * 2 * C + i];
      b += partial[static_cast<size_t>(t) * 2 * C + C + i];
    }
    dweight[i] += w;
    dbias[i] += b;
  }
}

}  // namespace keel::cpu
