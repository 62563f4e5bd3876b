// Config overrides and the core's own section checks, with the messages users see.
#include <gtest/gtest.h>

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

TEST(RunConfig, DefaultsFillEverySection) {
  keel::RunConfig c = keel::RunConfig::from_json_text(kMinimal);
  EXPECT_EQ(c.optimizer.plugin, "adamw");
  EXPECT_EQ(c.backend.plugin, "cpu");
  EXPECT_EQ(c.strategy.plugin, "ddp");
  EXPECT_EQ(c.strategy.json_path, "parallel.strategy");
  EXPECT_EQ(c.data.global_batch, c.data.micro_batch);
}

TEST(RunConfig, OverridesParseJsonAndBareWords) {
  keel::RunConfig c = keel::RunConfig::from_json_text(
      kMinimal, "<json>", {"train.steps=20", "optimizer.lr=1e-3", "backend.plugin=cpu2", "data.micro_batch=8",
                           "data.global_batch=32"});
  EXPECT_EQ(c.train.steps, 20);
  EXPECT_DOUBLE_EQ(c.optimizer.json["lr"].get<double>(), 1e-3);
  EXPECT_EQ(c.backend.plugin, "cpu2");
  EXPECT_EQ(c.data.global_batch / c.data.micro_batch, 4);
}

TEST(RunConfig, ErrorsNameFilePathExpectedAndFound) {
  EXPECT_EQ(error_of(R"({"model": {}})"), "test.json: model.plugin: required key is missing (which model plugin to load)");
  EXPECT_EQ(error_of(kMinimal, {"train.steps=\"ten\""}), "test.json: train.steps: expected an integer, found a string \"ten\"");
  EXPECT_NE(error_of(kMinimal, {"trian.steps=1"}).find("trian: unknown key (did you mean \"train\"?)"), std::string::npos);
  EXPECT_NE(error_of(kMinimal, {"lr_schedule.decay=\"cosin\""}).find("(did you mean \"cosine\"?)"), std::string::npos);
  EXPECT_NE(error_of(kMinimal, {"parallel.tp=0"}).find("parallel.tp"), std::string::npos);
  EXPECT_NE(error_of(kMinimal, {"parallel.sequence_parallel=true"})
                .find("parallel.sequence_parallel: splits the sequence over tensor-parallel ranks, so it needs "
                      "parallel.tp > 1 (found tp 1)"),
            std::string::npos);
  EXPECT_NE(error_of(kMinimal, {"parallel.virtual_stages=2"})
                .find("parallel.virtual_stages: 2 chunks per rank interleave a pipeline, so it needs parallel.pp > 1 "
                      "(found pp 1)"),
            std::string::npos);
  EXPECT_NE(error_of(kMinimal, {"parallel.pp=2", "parallel.layers_per_stage=[2]"})
                .find("parallel.layers_per_stage: expected a list of 2 block counts (pp 2 × virtual_stages 1), found [2]"),
            std::string::npos);
  EXPECT_NE(error_of(kMinimal, {"parallel.pp=2", "parallel.layers_per_stage=[2, 0]"})
                .find("parallel.layers_per_stage[1]: expected a block count of at least 1, found 0"),
            std::string::npos);
  EXPECT_NE(error_of(kMinimal, {"parallel.schedule=\"1f1b\""}).find("parallel.schedule: expected an object"),
            std::string::npos);
  EXPECT_NE(error_of("[1, 2]").find("expected an object"), std::string::npos);
  EXPECT_NE(error_of("{not json").find("not valid JSON"), std::string::npos);
}

}  // namespace
