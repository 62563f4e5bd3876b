// The "comm" config section as every comm plugin reads it: "plugin" (the loader's), the deadline
// timeout_s that every one keeps, then the plugin's own keys, and no key besides. One function so
// the mpi and nccl plugins (and a third-party one) bound timeout_s alike.
#pragma once

#include <utility>

#include "keel_support/common/json_section.hpp"

namespace keel_support {

// Config: the plugin's parsed section, with a `double timeout_s` holding its default;
// read_own_keys(JsonSection&, Config&) reads the plugin's other keys. Throws ConfigError.
template <typename Config, typename ReadOwnKeys>
Config parse_comm_section(const char* config_json, const char* json_path, ReadOwnKeys&& read_own_keys) {
  auto section = JsonSection::parse(config_json, json_path);
  section.allow("plugin");
  Config config;
  // A week at most: larger values would overflow the deadline arithmetic for no use.
  config.timeout_s = section.get_in_range<double>("timeout_s", config.timeout_s, 0.001, 7 * 24 * 3600.0);
  std::forward<ReadOwnKeys>(read_own_keys)(section, config);
  section.finish();
  return config;
}

}  // namespace keel_support
