// Parsing and cross-key checks of the sgd section (see sgd_config.hpp).
#include "sgd_config.hpp"

#include <keel_support/common/json_section.hpp>

#include <limits>

namespace keel_sgd {

SgdConfig parse_sgd_config(const char* config_json, const char* json_path) {
  auto section = keel_support::JsonSection::parse(config_json, json_path);
  section.allow("plugin");
  const double inf = std::numeric_limits<double>::infinity();
  SgdConfig config;
  config.lr = section.get_in_range<double>("lr", config.lr, 0.0, inf);
  config.momentum = section.get_in_range<double>("momentum", config.momentum, 0.0, 1.0);
  config.dampening = section.get_in_range<double>("dampening", config.dampening, 0.0, 1.0);
  config.nesterov = section.get<bool>("nesterov", config.nesterov);
  config.weight_decay = section.get_in_range<double>("weight_decay", config.weight_decay, 0.0, inf);
  section.finish();
  if (config.nesterov && (config.momentum <= 0.0 || config.dampening != 0.0))
    throw keel_support::ConfigError(section.path_of("nesterov") +
                                    ": Nesterov momentum requires momentum > 0 and dampening 0, found momentum " +
                                    std::to_string(config.momentum) + " and dampening " +
                                    std::to_string(config.dampening));
  return config;
}

}  // namespace keel_sgd
