// The "comm" section of an nccl run, parsed once and shared by validate_config and
// create_world_on, so what validates is exactly what runs.
#pragma once

namespace keel_nccl {

struct NcclCommConfig {
  // How long an operation may stay unfinished on the GPU, or NCCL's set-up (init, split) may take,
  // before this rank decides another rank died or stopped calling it and ends the world. Counted
  // from when the operation was queued, so it must also cover the compute queued before it and
  // the longest legitimate skew between ranks (a checkpoint written while the others wait).
  double timeout_s = 300.0;
};

// Throws keel_support::ConfigError naming the JSON path of the offending key.
NcclCommConfig parse_nccl_comm_config(const char* config_json, const char* json_path);

}  // namespace keel_nccl
