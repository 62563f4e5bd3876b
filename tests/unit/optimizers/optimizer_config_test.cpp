// Config errors of the sgd and adamw sections: each returns KEEL_ERR_INVALID_CONFIG from both
// validate_config and create, with a message that names the plugin, the JSON path and the fix.
#include <gtest/gtest.h>
#include <keel/optimizer.h>

#include <string>
#include <vector>

#include "plugin_test_support.hpp"

namespace keel_test {
namespace {

struct ConfigCase {
  const char* config_json;
  std::vector<std::string> message_parts;  // each must appear in the error message
};

// Checks validate_config and create agree: same status, same message, nothing created.
void expect_config_error(const char* library, const char* name, const ConfigCase& c) {
  LoadedPlugin plugin(library, KEEL_KIND_OPTIMIZER, name);
  const auto& api = plugin.api<keel_optimizer_api>();
  keel_host host = make_test_host();
  last_error().clear();
  EXPECT_EQ(api.validate_config(&host, c.config_json, "optimizer"), KEEL_ERR_INVALID_CONFIG) << c.config_json;
  const std::string validate_message = last_error();
  for (const auto& part : c.message_parts)
    EXPECT_NE(validate_message.find(part), std::string::npos)
        << "config " << c.config_json << ": message \"" << validate_message << "\" lacks \"" << part << "\"";
  void* optimizer = nullptr;
  EXPECT_EQ(api.create(&host, c.config_json, "optimizer", &optimizer), KEEL_ERR_INVALID_CONFIG) << c.config_json;
  EXPECT_EQ(optimizer, nullptr);
  EXPECT_EQ(last_error(), validate_message);
}

void expect_config_ok(const char* library, const char* name, const char* config_json) {
  LoadedPlugin plugin(library, KEEL_KIND_OPTIMIZER, name);
  keel_host host = make_test_host();
  EXPECT_EQ(plugin.api<keel_optimizer_api>().validate_config(&host, config_json, "optimizer"), KEEL_OK)
      << config_json << ": " << last_error();
}

TEST(SgdConfig, AcceptsEveryDocumentedKey) {
  expect_config_ok(KEEL_SGD_PLUGIN_PATH, "sgd",
                   R"({"plugin": "sgd", "lr": 0.1, "momentum": 0.9, "nesterov": true, "dampening": 0,
                       "weight_decay": 1e-4})");
  expect_config_ok(KEEL_SGD_PLUGIN_PATH, "sgd", "{}");
}

TEST(SgdConfig, UnknownKeySuggestsTheNearestKnownOne) {
  expect_config_error(KEEL_SGD_PLUGIN_PATH, "sgd",
                      {R"({"plugin": "sgd", "momentun": 0.9})",
                       {"optimizer sgd: ", "optimizer.momentun", "unknown key", "did you mean \"momentum\""}});
}

TEST(SgdConfig, NesterovNeedsMomentumAndNoDampening) {
  expect_config_error(KEEL_SGD_PLUGIN_PATH, "sgd",
                      {R"({"nesterov": true})", {"optimizer.nesterov", "momentum > 0"}});
  expect_config_error(KEEL_SGD_PLUGIN_PATH, "sgd",
                      {R"({"nesterov": true, "momentum": 0.9, "dampening": 0.1})", {"optimizer.nesterov", "dampening"}});
}

TEST(SgdConfig, WrongTypesAndRangesNameThePath) {
  expect_config_error(KEEL_SGD_PLUGIN_PATH, "sgd", {R"({"lr": "fast"})", {"optimizer.lr", "expected a number"}});
  expect_config_error(KEEL_SGD_PLUGIN_PATH, "sgd", {R"({"nesterov": 1})", {"optimizer.nesterov", "a boolean"}});
  expect_config_error(KEEL_SGD_PLUGIN_PATH, "sgd", {R"({"momentum": 1.5})", {"optimizer.momentum", "[0"}});
  expect_config_error(KEEL_SGD_PLUGIN_PATH, "sgd", {R"({"lr": -0.1})", {"optimizer.lr"}});
  expect_config_error(KEEL_SGD_PLUGIN_PATH, "sgd", {"[1, 2]", {"optimizer", "expected an object"}});
  expect_config_error(KEEL_SGD_PLUGIN_PATH, "sgd", {"{not json", {"optimizer", "not valid JSON"}});
}

TEST(AdamwConfig, AcceptsEveryDocumentedKey) {
  expect_config_ok(KEEL_ADAMW_PLUGIN_PATH, "adamw",
                   R"({"plugin": "adamw", "lr": 6e-4, "betas": [0.9, 0.95], "eps": 1e-8, "weight_decay": 0.1,
                       "decay_all_params": true})");
  expect_config_ok(KEEL_ADAMW_PLUGIN_PATH, "adamw", R"({"betas": [0, 0.999]})");
}

TEST(AdamwConfig, UnknownKeySuggestsTheNearestKnownOne) {
  expect_config_error(KEEL_ADAMW_PLUGIN_PATH, "adamw",
                      {R"({"weight_decy": 0.1})",
                       {"optimizer adamw: ", "optimizer.weight_decy", "did you mean \"weight_decay\""}});
}

TEST(AdamwConfig, BetasMustBeTwoNumbersInZeroToOne) {
  expect_config_error(KEEL_ADAMW_PLUGIN_PATH, "adamw",
                      {R"({"betas": [0.9, 1.0]})", {"optimizer.betas[1]", "[0, 1)", "1.0"}});
  expect_config_error(KEEL_ADAMW_PLUGIN_PATH, "adamw", {R"({"betas": [-0.1, 0.95]})", {"optimizer.betas[0]"}});
  expect_config_error(KEEL_ADAMW_PLUGIN_PATH, "adamw",
                      {R"({"betas": [0.9, "0.95"]})", {"optimizer.betas[1]", "expected a number", "a string"}});
  expect_config_error(KEEL_ADAMW_PLUGIN_PATH, "adamw",
                      {R"({"betas": [0.9]})", {"optimizer.betas", "an array of two numbers"}});
  expect_config_error(KEEL_ADAMW_PLUGIN_PATH, "adamw", {R"({"betas": 0.9})", {"optimizer.betas", "a number"}});
}

TEST(AdamwConfig, WrongTypesAndRangesNameThePath) {
  expect_config_error(KEEL_ADAMW_PLUGIN_PATH, "adamw", {R"({"eps": null})", {"optimizer.eps", "expected a number"}});
  expect_config_error(KEEL_ADAMW_PLUGIN_PATH, "adamw", {R"({"weight_decay": -1})", {"optimizer.weight_decay"}});
  expect_config_error(KEEL_ADAMW_PLUGIN_PATH, "adamw",
                      {R"({"decay_all_params": "yes"})", {"optimizer.decay_all_params", "a boolean"}});
}

}  // namespace
}  // namespace keel_test
