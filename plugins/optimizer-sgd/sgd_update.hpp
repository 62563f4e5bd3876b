// The SGD update rule on host memory, element for element as torch.optim.SGD computes it
// (single-tensor path, maximize=False):
//   g  = grads * grad_scale (+ weight_decay * p when the range takes decay)
//   buf = g at the first step, else momentum * buf + (1 - dampening) * g
//   d  = g + momentum * buf (Nesterov) or buf (momentum) or g (plain)
//   p -= lr * d
#pragma once

#include <keel/optimizer.h>
#include <keel_support/parallel_threshold.hpp>

#include <cstdint>

#include "sgd_config.hpp"

namespace keel_sgd {

inline void sgd_update_host(const SgdConfig& config, const keel_optimizer_step_args& args) {
  float* params = args.params;
  const float* grads = args.grads;
  float* momentum_buffer = config.momentum > 0.0 ? args.state[0] : nullptr;
  const float grad_scale = args.grad_scale;
  const float lr = args.lr;
  const float weight_decay = args.apply_weight_decay ? static_cast<float>(config.weight_decay) : 0.0f;
  const float momentum = static_cast<float>(config.momentum);
  const float new_grad_share = static_cast<float>(1.0 - config.dampening);
  const bool first_step = args.step == 1;
  const bool nesterov = config.nesterov;
  const int64_t n = args.n;
#pragma omp parallel for schedule(static) if (n >= keel_support::kParallelMinElements)
  for (int64_t i = 0; i < n; ++i) {
    float g = grads[i] * grad_scale;
    if (weight_decay != 0.0f) g += weight_decay * params[i];
    float direction = g;
    if (momentum_buffer) {
      float buf = first_step ? g : momentum * momentum_buffer[i] + new_grad_share * g;
      momentum_buffer[i] = buf;
      direction = nesterov ? g + momentum * buf : buf;
    }
    params[i] -= lr * direction;
  }
}

}  // namespace keel_sgd
