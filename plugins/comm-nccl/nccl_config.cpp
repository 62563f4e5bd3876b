// Parsing of the nccl comm section (see nccl_config.hpp): the same keys as the mpi plugin's.
#include "nccl_config.hpp"

#include <keel_support/json_section.hpp>

namespace keel_nccl {

NcclCommConfig parse_nccl_comm_config(const char* config_json, const char* json_path) {
  auto section = keel_support::JsonSection::parse(config_json, json_path);
  section.allow("plugin");
  NcclCommConfig config;
  // A week at most: larger values would overflow the deadline arithmetic for no use.
  config.timeout_s = section.get_in_range<double>("timeout_s", config.timeout_s, 0.001, 7 * 24 * 3600.0);
  section.finish();
  return config;
}

}  // namespace keel_nccl
