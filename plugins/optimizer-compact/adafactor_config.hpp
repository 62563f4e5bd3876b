// The "optimizer" section of an adafactor run (Shazeer & Stern, 2018, as transformers'
// Adafactor with relative_step off: the step size is lr, scheduled by the core).
#pragma once

#include <optional>

namespace keel_compact {

struct AdafactorConfig {
  double lr = 1e-3;                 // peak learning rate (× the parameter's RMS when scale_parameter)
  double eps1 = 1e-30;              // "eps": [eps1, eps2]: added to g², and the floor of the parameter RMS
  double eps2 = 1e-3;
  double clip_threshold = 1.0;      // the update's RMS is clipped to this
  double decay_rate = -0.8;         // second-moment decay: beta2_t = 1 - t^decay_rate
  std::optional<double> beta1;      // first moment (one more fp32 per element) when set
  double weight_decay = 0.0;        // decoupled, × the scaled step size
  bool scale_parameter = true;      // step size × max(eps2, RMS(parameter))
  bool decay_all_params = false;    // false: parameters flagged KEEL_PARAM_NO_WEIGHT_DECAY are not decayed
};

// Throws keel_support::ConfigError naming the JSON path of the offending key.
AdafactorConfig parse_adafactor_config(const char* config_json, const char* json_path);

}  // namespace keel_compact
