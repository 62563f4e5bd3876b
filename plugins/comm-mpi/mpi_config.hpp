// The "comm" section of an mpi run, parsed once and shared by validate_config and create_world,
// so what validates is exactly what runs.
#pragma once

namespace keel_mpi {

struct MpiCommConfig {
  // How long a blocking call (or wait) may sit in one collective or transfer before this rank
  // decides another rank died or stopped calling it, and ends the world. It must exceed the
  // longest legitimate skew between ranks (a checkpoint written by one rank while the others
  // wait at the next collective).
  double timeout_s = 300.0;
  // Seconds between the heartbeats ranks send each other (peer_liveness.hpp), so a timeout names
  // the peers that went silent; 0 turns them off. At most timeout_s / 4 is used (at least 0.01).
  double heartbeat_s = 1.0;
};

// Throws keel_support::ConfigError naming the JSON path of the offending key.
MpiCommConfig parse_mpi_comm_config(const char* config_json, const char* json_path);

}  // namespace keel_mpi
