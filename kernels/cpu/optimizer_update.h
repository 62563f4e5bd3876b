// The AdamW and SGD update rules on fp32 arrays, written once for the adamw and sgd optimizer
// plugins and the cpu backend's fused adamw_update / sgd_update slots, so that both paths give
// the same bits. Header-only because the optimizer plugins do not link the kernels.
//
// Bit-exactness needs every file that includes this one compiled with -ffp-contract=off: a
// multiply and an add fused into one FMA round differently from the rule written here.
#pragma once

#include "cpu/parallel_threshold.h"

#include <cmath>
#include <cstdint>

namespace keel::cpu {

// torch.optim.AdamW's single-tensor path (amsgrad=False, maximize=False):
//   g  = grads * grad_scale
//   p *= 1 - lr * weight_decay            (weight_decay 0 for ranges that take no decay)
//   m  = m + (1 - beta1) * (g - m)        (PyTorch's lerp_, = beta1 m + (1 - beta1) g)
//   v  = beta2 v + (1 - beta2) g²
//   p -= lr / (1 - beta1^t) * m / (sqrt(v) / sqrt(1 - beta2^t) + eps)
// The hyperparameters are doubles, as PyTorch holds them in Python floats: the per-call scalars
// (bias corrections, 1 - beta) are formed in double once and cast to fp32. step is 1-based.
inline void adamw_update(float* __restrict params,       // (n) updated in place
                         const float* __restrict grads,  // (n)
                         float* __restrict m,            // (n) first moment
                         float* __restrict v,            // (n) second moment
                         int64_t n, double lr, double beta1, double beta2, double eps, double weight_decay,
                         float grad_scale, int64_t step) {
  const double t = static_cast<double>(step);
  const double bias_correction1 = 1.0 - std::pow(beta1, t);
  const double bias_correction2 = 1.0 - std::pow(beta2, t);
  const float step_size = static_cast<float>(lr / bias_correction1);
  const float bias_correction2_sqrt = static_cast<float>(std::sqrt(bias_correction2));
  const float decay_factor = static_cast<float>(1.0 - lr * weight_decay);
  const float one_minus_beta1 = static_cast<float>(1.0 - beta1);
  const float beta2_f = static_cast<float>(beta2);
  const float one_minus_beta2 = static_cast<float>(1.0 - beta2);
  const float eps_f = static_cast<float>(eps);
  // __restrict: four disjoint arrays, so the loop vectorises without run-time overlap checks;
  // vector lanes round exactly as the scalar rule above.
#pragma omp parallel for simd schedule(static) if (parallel : n >= keel::cpu::kParallelMinElements)  // simd always
  for (int64_t i = 0; i < n; ++i) {
    const float g = grads[i] * grad_scale;
    const float m_i = m[i] + one_minus_beta1 * (g - m[i]);
    const float v_i = beta2_f * v[i] + one_minus_beta2 * g * g;
    m[i] = m_i;
    v[i] = v_i;
    const float denom = std::sqrt(v_i) / bias_correction2_sqrt + eps_f;
    params[i] = params[i] * decay_factor - step_size * m_i / denom;
  }
}

// torch.optim.SGD's single-tensor path (maximize=False):
//   g  = grads * grad_scale (+ weight_decay * p; weight_decay 0 for ranges that take no decay)
//   buf = g at the first step, else momentum * buf + (1 - dampening) * g
//   d  = g + momentum * buf (Nesterov) or buf (momentum) or g (plain)
//   p -= lr * d
// momentum_buffer is not touched (and may be NULL) when momentum is 0. step is 1-based.
inline void sgd_update(float* params,            // (n) updated in place
                       const float* grads,       // (n)
                       float* momentum_buffer,   // (n), or NULL when momentum == 0
                       int64_t n, float lr, double momentum, double dampening, bool nesterov, double weight_decay,
                       float grad_scale, int64_t step) {
  float* buffer = momentum > 0.0 ? momentum_buffer : nullptr;
  const float weight_decay_f = static_cast<float>(weight_decay);
  const float momentum_f = static_cast<float>(momentum);
  const float new_grad_share = static_cast<float>(1.0 - dampening);
  const bool first_step = step == 1;
#pragma omp parallel for schedule(static) if (n >= keel::cpu::kParallelMinElements)
  for (int64_t i = 0; i < n; ++i) {
    float g = grads[i] * grad_scale;
    if (weight_decay_f != 0.0f) g += weight_decay_f * params[i];
    float direction = g;
    if (buffer) {
      const float buf = first_step ? g : momentum_f * buffer[i] + new_grad_share * g;
      buffer[i] = buf;
      direction = nesterov ? g + momentum_f * buf : buf;
    }
    params[i] -= lr * direction;
  }
}

}  // namespace keel::cpu
