// Parsing of the mpi comm section (see mpi_config.hpp): the keys every comm plugin shares, and
// heartbeat_s.
#include "mpi_config.hpp"

#include <keel_support/comm/comm_section.hpp>

namespace keel_mpi {

MpiCommConfig parse_mpi_comm_config(const char* config_json, const char* json_path) {
  return keel_support::parse_comm_section<MpiCommConfig>(
      config_json, json_path, [](keel_support::JsonSection& section, MpiCommConfig& config) {
        config.heartbeat_s = section.get_in_range<double>("heartbeat_s", config.heartbeat_s, 0.0, 60.0);
      });
}

}  // namespace keel_mpi
