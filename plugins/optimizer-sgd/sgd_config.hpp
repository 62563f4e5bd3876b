// The "optimizer" section of an sgd run, parsed once and shared by validate_config and create,
// so what validates is exactly what runs.
#pragma once

namespace keel_sgd {

// Hyperparameters are doubles, as PyTorch holds them in Python floats; the update casts them
// to fp32 once per call.
struct SgdConfig {
  double lr = 1e-2;          // peak learning rate; the core's schedule scales it per step
  double momentum = 0.0;     // 0 disables the momentum buffer (and its state slot)
  double dampening = 0.0;    // scales the new gradient's share of the buffer: (1 - dampening)
  bool nesterov = false;      // requires momentum > 0 and dampening == 0, as PyTorch does
  double weight_decay = 0.0; // coupled L2: g += weight_decay * p
};

// Throws keel_support::ConfigError naming the JSON path of the offending key.
SgdConfig parse_sgd_config(const char* config_json, const char* json_path);

}  // namespace keel_sgd
