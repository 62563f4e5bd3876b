// Parsing of the zero section (see zero_config.hpp). The stage is required: ZeRO-1, -2 and -3
// trade memory for communication very differently, so no default would suit most runs.
#include "zero_config.hpp"

#include <keel_support/common/json_section.hpp>

namespace keel_zero {

ZeroConfig parse_zero_config(const char* config_json, const char* json_path) {
  auto section = keel_support::JsonSection::parse(config_json, json_path);
  section.allow("plugin");
  ZeroConfig config;
  config.stage = section.require<int32_t>("stage");
  if (config.stage < 1 || config.stage > 3)
    throw keel_support::ConfigError(section.path_of("stage") + ": expected 1 (optimizer state sharded), 2 (and "
                                    "gradients) or 3 (and parameters), found " + std::to_string(config.stage));
  config.prefetch = section.get<bool>("prefetch", config.prefetch);
  config.overlap_comm = section.get<bool>("overlap_comm", config.overlap_comm);
  section.finish();
  return config;
}

}  // namespace keel_zero
