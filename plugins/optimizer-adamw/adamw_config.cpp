// Parsing of the adamw section (see adamw_config.hpp); "betas" is checked here by hand because
// the section reader has no typed getter for fixed-size arrays.
#include "adamw_config.hpp"

#include <keel_support/common/json_section.hpp>

#include <limits>
#include <string>

namespace keel_adamw {
namespace {

using keel_support::ConfigError;

double read_beta(const nlohmann::json& betas, size_t i, const std::string& betas_path) {
  const std::string path = betas_path + "[" + std::to_string(i) + "]";
  const nlohmann::json& value = betas[i];
  if (!value.is_number())
    throw ConfigError(path + ": expected a number, found " + keel_support::json_type_name(value) + " " + value.dump());
  double beta = value.get<double>();
  if (!(beta >= 0.0 && beta < 1.0)) throw ConfigError(path + ": expected a value in [0, 1), found " + value.dump());
  return beta;
}

void read_betas(keel_support::JsonSection& section, AdamwConfig& config) {
  if (!section.has("betas")) return;
  const nlohmann::json& betas = section.raw("betas");
  const std::string path = section.path_of("betas");
  if (!betas.is_array() || betas.size() != 2)
    throw ConfigError(path + ": expected an array of two numbers [beta1, beta2], found " +
                      keel_support::json_type_name(betas) + " " + betas.dump());
  config.beta1 = read_beta(betas, 0, path);
  config.beta2 = read_beta(betas, 1, path);
}

}  // namespace

AdamwConfig parse_adamw_config(const char* config_json, const char* json_path) {
  auto section = keel_support::JsonSection::parse(config_json, json_path);
  section.allow("plugin");
  const double inf = std::numeric_limits<double>::infinity();
  AdamwConfig config;
  config.lr = section.get_in_range<double>("lr", config.lr, 0.0, inf);
  read_betas(section, config);
  config.eps = section.get_in_range<double>("eps", config.eps, 0.0, inf);
  config.weight_decay = section.get_in_range<double>("weight_decay", config.weight_decay, 0.0, inf);
  config.decay_all_params = section.get<bool>("decay_all_params", config.decay_all_params);
  section.finish();
  return config;
}

}  // namespace keel_adamw
