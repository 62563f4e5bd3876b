// Config input at its limits: JSON nested past the depth bound (in the text, in a --set value,
// in a --set path), integers past their type's range, and seeds near 2^64. Each refusal must
// name the origin, the JSON path, the allowed range and the value as written.
#include <gtest/gtest.h>

#include <keel_support/common/json_section.hpp>

#include <functional>

#include "config/run_config.h"
#include "host/errors.h"

namespace {

const char* kMinimal = R"({"model": {"plugin": "gpt"}})";

std::string error_of(const std::string& json, const std::vector<std::string>& overrides = {}) {
  try {
    keel::RunConfig::from_json_text(json, "test.json", overrides);
  } catch (const keel::KeelError& e) {
    EXPECT_EQ(e.code, KEEL_ERR_INVALID_CONFIG);
    return e.what();
  }
  return "";
}

std::string nested_arrays(size_t depth) { return std::string(depth, '[') + std::string(depth, ']'); }

std::string section_error(const std::string& json, const std::function<void(keel_support::JsonSection&)>& read) {
  try {
    auto section = keel_support::JsonSection::parse(json.c_str(), "model");
    read(section);
  } catch (const keel_support::ConfigError& e) {
    return e.what();
  }
  return "";
}

TEST(ConfigBounds, DeepJsonIsRefusedNotACrash) {
  // 200000 levels overflow an 8 MiB stack in a recursive copy or destructor.
  const std::string deep = R"({"model": {"plugin": "gpt", "x": )" + nested_arrays(200000) + "}}";
  EXPECT_EQ(error_of(deep), "test.json: JSON nested deeper than 128 levels");
  EXPECT_EQ(error_of(kMinimal, {"model.x=" + nested_arrays(200000)}),
            "test.json: --set model.x: JSON nested deeper than 128 levels");
  std::string long_path = "a";
  for (int i = 0; i < 200000; ++i) long_path += ".a";
  EXPECT_NE(error_of(kMinimal, {long_path + "=1"}).find("a path of 200001 keys is nested deeper than 128 levels"),
            std::string::npos);
  EXPECT_NE(section_error(nested_arrays(200000), [](auto&) {}).find("model: JSON nested deeper than 128 levels"),
            std::string::npos);
}

TEST(ConfigBounds, DepthAtTheBoundIsAccepted) {
  EXPECT_NO_THROW(keel_support::parse_json("test.json", nested_arrays(128)));
  EXPECT_THROW(keel_support::parse_json("test.json", nested_arrays(129)), keel_support::ConfigError);
}

TEST(ConfigBounds, AKeyGivenTwiceIsRefusedNotOverwritten) {
  // nlohmann keeps the last of two equal keys; a config saying "model" twice must not train the second silently.
  EXPECT_EQ(error_of(R"({"model": {"plugin": "gpt"}, "model": {"plugin": "llama"}})"),
            "test.json: key \"model\" appears twice in the object at the top level (JSON keeps one; say each key once)");
  EXPECT_EQ(error_of(R"({"model": {"plugin": "gpt"}, "optimizer": {"lr": 1e-3, "betas": [0.9, 0.95], "lr": 1}})"),
            "test.json: key \"lr\" appears twice in the object at optimizer (JSON keeps one; say each key once)");
  EXPECT_EQ(error_of(kMinimal, {R"(train={"steps": 2, "steps": 3})"}),
            "test.json: --set train: key \"steps\" appears twice in the object at the top level (JSON keeps one; "
            "say each key once)");
  // The same key in two different objects is two keys.
  EXPECT_NO_THROW(keel_support::parse_json("t", std::string(R"({"a": {"x": 1}, "b": {"x": 2}, "c": [{"x": 1}, {"x": 2}]})")));
}

TEST(ConfigBounds, ANulByteIsRefusedNotTheEndOfTheText) {
  // nlohmann stops at a NUL byte and ignores the rest: what follows it would be dropped without a word.
  std::string text = std::string(kMinimal) + std::string(1, '\0') + R"({"train": {"steps": 5}})";
  EXPECT_EQ(error_of(text), "test.json: a NUL byte at offset 28 (JSON text has none)");
  std::vector<unsigned char> bytes(text.begin(), text.end());
  EXPECT_THROW(keel_support::parse_json("bytes", bytes), keel_support::ConfigError);
}

TEST(ConfigBounds, IntegersPastTheirTypeReportTheValueAsWritten) {
  auto read_int32 = [](auto& s) { s.template get<int32_t>("n", 0); };
  EXPECT_EQ(section_error(R"({"n": 2147483648})", read_int32),
            "model.n: expected a value in [-2147483648, 2147483647], found 2147483648");
  EXPECT_EQ(section_error(R"({"n": -2147483649})", read_int32),
            "model.n: expected a value in [-2147483648, 2147483647], found -2147483649");
  auto read_layers = [](auto& s) { s.template get_in_range<int32_t>("n_layer", 1, 1, 4096); };
  EXPECT_EQ(section_error(R"({"n_layer": 2147483648})", read_layers),
            "model.n_layer: expected a value in [1, 4096], found 2147483648");
  EXPECT_EQ(section_error(R"({"n_layer": 4294967297})", read_layers),  // 2^32 + 1 wraps to 1 in an int32
            "model.n_layer: expected a value in [1, 4096], found 4294967297");
  EXPECT_EQ(section_error(R"({"n_layer": 1.5})", read_layers), "model.n_layer: expected an integer, found a number 1.5");
  EXPECT_EQ(section_error(R"({"n_layer": 4096})", read_layers), "");
  EXPECT_EQ(section_error(R"({"n_layer": 4e3})", read_layers), "");  // a whole number with an exponent
}

TEST(ConfigBounds, BoundedIntegersNameRangeAndValue) {
  auto read_threads = [](auto& s) { s.template get_in_range<int>("threads", 0, 0, 1024); };
  EXPECT_EQ(section_error(R"({"threads": 65536})", read_threads), "model.threads: expected a value in [0, 1024], found 65536");
  EXPECT_EQ(section_error(R"({"threads": -1})", read_threads), "model.threads: expected a value in [0, 1024], found -1");
  auto read_ratio = [](auto& s) { s.template get_in_range<double>("ratio", 0.1, 0.0, 1.0); };
  EXPECT_EQ(section_error(R"({"ratio": 2.5})", read_ratio), "model.ratio: expected a value in [0.0, 1.0], found 2.5");
}

TEST(ConfigBounds, SeedsAreExactUint64) {
  keel::RunConfig c = keel::RunConfig::from_json_text(kMinimal, "test.json", {"train.seed=18446744073709551615"});
  EXPECT_EQ(c.train.seed, UINT64_MAX);
  c = keel::RunConfig::from_json_text(kMinimal, "test.json", {"train.seed=9007199254740993"});  // 2^53 + 1
  EXPECT_EQ(c.train.seed, 9007199254740993ull);
  EXPECT_EQ(error_of(kMinimal, {"train.seed=-1"}), "test.json: train.seed: expected a value in [0, 18446744073709551615], found -1");
  EXPECT_EQ(error_of(kMinimal, {"train.seed=0.5"}), "test.json: train.seed: expected an integer, found a number 0.5");
  EXPECT_NE(error_of(kMinimal, {"train.seed=18446744073709551616"}).find("train.seed: expected a value in [0, 18446744073709551615]"),
            std::string::npos);
}

}  // namespace
