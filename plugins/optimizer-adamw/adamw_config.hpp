// The "optimizer" section of an adamw run, parsed once and shared by validate_config and create,
// so what validates is exactly what runs.
#pragma once

namespace keel_adamw {

// Hyperparameters are doubles, as PyTorch holds them in Python floats; the update casts the
// derived per-call scalars to fp32 once.
struct AdamwConfig {
  double lr = 6e-4;            // peak learning rate; the core's schedule scales it per step
  double beta1 = 0.9;           // "betas": [beta1, beta2], each in [0, 1)
  double beta2 = 0.95;
  double eps = 1e-8;
  double weight_decay = 0.1;    // decoupled: p *= 1 - lr * weight_decay
  bool decay_all_params = false;  // false: parameters flagged KEEL_PARAM_NO_WEIGHT_DECAY are not decayed
};

// Throws keel_support::ConfigError naming the JSON path of the offending key.
AdamwConfig parse_adamw_config(const char* config_json, const char* json_path);

}  // namespace keel_adamw
