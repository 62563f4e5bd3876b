// The AdamW update rule on host memory, element for element as torch.optim.AdamW's
// single-tensor path computes it (amsgrad=False, maximize=False):
//   g  = grads * grad_scale
//   p *= 1 - lr * weight_decay            (only ranges that take decay)
//   m  = m + (1 - beta1) * (g - m)        (PyTorch's lerp_, = beta1 m + (1 - beta1) g)
//   v  = beta2 v + (1 - beta2) g²
//   p -= lr / (1 - beta1^t) * m / (sqrt(v) / sqrt(1 - beta2^t) + eps)
// Bias corrections are formed in double once per call, as PyTorch forms them in Python floats.
#pragma once

#include <keel/optimizer.h>
#include <keel_support/parallel_threshold.hpp>

#include <cmath>
#include <cstdint>

#include "adamw_config.hpp"

namespace keel_adamw {

inline void adamw_update_host(const AdamwConfig& config, const keel_optimizer_step_args& args) {
  const double t = static_cast<double>(args.step);
  const double lr = args.lr;
  const double bias_correction1 = 1.0 - std::pow(config.beta1, t);
  const double bias_correction2 = 1.0 - std::pow(config.beta2, t);
  const float step_size = static_cast<float>(lr / bias_correction1);
  const float bias_correction2_sqrt = static_cast<float>(std::sqrt(bias_correction2));
  const float decay_factor = args.apply_weight_decay ? static_cast<float>(1.0 - lr * config.weight_decay) : 1.0f;

  // __restrict: the strategy passes four disjoint arrays; saying so lets the loop vectorise
  // without run-time overlap checks. The loop is the same arithmetic in the same order as the
  // scalar rule above, so vector lanes round exactly as the scalar code did (the plugin is
  // built with -ffp-contract=off so no multiply-add is fused; see CMakeLists.txt).
  float* __restrict params = args.params;
  const float* __restrict grads = args.grads;
  float* __restrict m = args.state[0];
  float* __restrict v = args.state[1];
  const float grad_scale = args.grad_scale;
  const float one_minus_beta1 = static_cast<float>(1.0 - config.beta1);
  const float beta2 = static_cast<float>(config.beta2);
  const float one_minus_beta2 = static_cast<float>(1.0 - config.beta2);
  const float eps = static_cast<float>(config.eps);
  const int64_t n = args.n;
#pragma omp parallel for simd schedule(static) if (parallel : n >= keel_support::kParallelMinElements)  // simd always
  for (int64_t i = 0; i < n; ++i) {
    const float g = grads[i] * grad_scale;
    const float m_i = m[i] + one_minus_beta1 * (g - m[i]);
    const float v_i = beta2 * v[i] + one_minus_beta2 * g * g;
    m[i] = m_i;
    v[i] = v_i;
    const float denom = std::sqrt(v_i) / bias_correction2_sqrt + eps;
    params[i] = params[i] * decay_factor - step_size * m_i / denom;
  }
}

}  // namespace keel_adamw
