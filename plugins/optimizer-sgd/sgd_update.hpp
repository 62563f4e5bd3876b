// The sgd plugin's update on host memory: its configuration and the step's arguments handed to
// the one SGD rule (kernels/cpu/optimizer_update.h, torch.optim.SGD's single-tensor path), which
// the cpu backend's fused sgd_update slot runs too.
#pragma once

#include <keel/optimizer.h>

#include "cpu/optimizer_update.h"  // defines: keel::cpu::sgd_update
#include "sgd_config.hpp"

namespace keel_sgd {

inline void sgd_update_host(const SgdConfig& config, const keel_optimizer_step_args& args) {
  const double weight_decay = args.apply_weight_decay ? config.weight_decay : 0.0;
  keel::cpu::sgd_update(args.params, args.grads, config.momentum > 0.0 ? args.state[0] : nullptr, args.n, args.lr,
                        config.momentum, config.dampening, config.nesterov, weight_decay, args.grad_scale,
                        args.step);
}

}  // namespace keel_sgd
