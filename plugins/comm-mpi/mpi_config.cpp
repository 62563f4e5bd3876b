// Parsing of the mpi comm section (see mpi_config.hpp).
#include "mpi_config.hpp"

#include <keel_support/json_section.hpp>

namespace keel_mpi {

MpiCommConfig parse_mpi_comm_config(const char* config_json, const char* json_path) {
  auto section = keel_support::JsonSection::parse(config_json, json_path);
  section.allow("plugin");
  MpiCommConfig config;
  // A week at most: larger values would overflow the deadline arithmetic for no use.
  config.timeout_s = section.get_in_range<double>("timeout_s", config.timeout_s, 0.001, 7 * 24 * 3600.0);
  config.heartbeat_s = section.get_in_range<double>("heartbeat_s", config.heartbeat_s, 0.0, 60.0);
  section.finish();
  return config;
}

}  // namespace keel_mpi
