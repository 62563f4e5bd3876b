// Parsing of the adafactor section (see adafactor_config.hpp). "eps" is a pair checked by hand;
// "relative_step" and "warmup_init" are accepted only as false, since the core's schedule
// gives the step size.
#include "adafactor_config.hpp"

#include <keel_support/common/json_section.hpp>

#include <limits>
#include <string>

namespace keel_compact {
namespace {

using keel_support::ConfigError;

void read_eps(keel_support::JsonSection& section, AdafactorConfig& config) {
  if (!section.has("eps")) return;
  const nlohmann::json& eps = section.raw("eps");
  const std::string path = section.path_of("eps");
  if (!eps.is_array() || eps.size() != 2 || !eps[0].is_number() || !eps[1].is_number())
    throw ConfigError(path + ": expected an array of two numbers [eps1, eps2], found " +
                      keel_support::json_type_name(eps) + " " + eps.dump());
  config.eps1 = eps[0].get<double>();
  config.eps2 = eps[1].get<double>();
  // eps1 > 0: a row or column of zero gradients would otherwise divide 0 by 0.
  if (!(config.eps1 > 0.0 && config.eps1 <= 1.0) || !(config.eps2 >= 0.0 && config.eps2 <= 1.0))
    throw ConfigError(path + ": expected eps1 in (0, 1] and eps2 in [0, 1], found " + eps.dump());
}

}  // namespace

AdafactorConfig parse_adafactor_config(const char* config_json, const char* json_path) {
  auto section = keel_support::JsonSection::parse(config_json, json_path);
  section.allow("plugin");
  const double inf = std::numeric_limits<double>::infinity();
  AdafactorConfig config;
  config.lr = section.get_in_range<double>("lr", config.lr, 0.0, inf);
  read_eps(section, config);
  config.clip_threshold = section.get_in_range<double>("clip_threshold", config.clip_threshold, 1e-12, inf);
  config.decay_rate = section.get_in_range<double>("decay_rate", config.decay_rate, -1.0, 0.0);
  if (section.has("beta1") && !section.raw("beta1").is_null())
    config.beta1 = section.get_in_range<double>("beta1", 0.0, 0.0, 1.0 - 1e-12);
  else if (section.has("beta1"))
    section.raw("beta1");  // null: no first moment, as the default
  config.weight_decay = section.get_in_range<double>("weight_decay", config.weight_decay, 0.0, inf);
  config.scale_parameter = section.get<bool>("scale_parameter", config.scale_parameter);
  config.decay_all_params = section.get<bool>("decay_all_params", config.decay_all_params);
  for (const char* key : {"relative_step", "warmup_init"})
    if (section.get<bool>(key, false))
      throw ConfigError(section.path_of(key) + ": only false is supported: the step size is lr, scaled by the run's "
                                               "lr_schedule (set the schedule's warmup instead)");
  section.finish();
  return config;
}

}  // namespace keel_compact
