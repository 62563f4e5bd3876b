// The adamw plugin's update on host memory: its configuration and the step's arguments handed to
// the one AdamW rule (kernels/cpu/optimizer_update.h, torch.optim.AdamW's single-tensor path),
// which the cpu backend's fused adamw_update slot runs too.
#pragma once

#include <keel/optimizer.h>

#include "adamw_config.hpp"
#include "cpu/optimizer_update.h"  // defines: keel::cpu::adamw_update

namespace keel_adamw {

inline void adamw_update_host(const AdamwConfig& config, const keel_optimizer_step_args& args) {
  const double weight_decay = args.apply_weight_decay ? config.weight_decay : 0.0;
  keel::cpu::adamw_update(args.params, args.grads, args.state[0], args.state[1], args.n, args.lr, config.beta1,
                          config.beta2, config.eps, weight_decay, args.grad_scale, args.step);
}

}  // namespace keel_adamw
