// The "parallel.strategy" section of the zero plugin: the stage is required and in 1..3,
// prefetch is a boolean, and an unknown key is rejected with a suggestion — through
// validate_config and through create alike. Also the data-parallel arguments create checks.
#include "zero_test_support.hpp"

namespace keel_test {
namespace {

class ZeroConfigTest : public ::testing::Test {
 protected:
  // Runs validate_config, then create on a lone rank; both must fail the same way.
  void expect_config_error(const std::string& config, const std::string& expected_message) {
    SCOPED_TRACE(config);
    const keel_host host = zero_test_host();
    EXPECT_EQ(plugins.zero_api().validate_config(&host, config.c_str(), "parallel.strategy"), KEEL_ERR_INVALID_CONFIG);
    EXPECT_NE(zero_last_error().find(expected_message), std::string::npos) << zero_last_error();
    auto rank = plugins.make_rank(nullptr, 0);
    EXPECT_EQ(rank->create(config), KEEL_ERR_INVALID_CONFIG);
    EXPECT_NE(zero_last_error().find(expected_message), std::string::npos) << zero_last_error();
    EXPECT_EQ(rank->strategy, nullptr);
  }

  ZeroPlugins plugins;
};

TEST_F(ZeroConfigTest, AcceptsEachStageWithAndWithoutPrefetch) {
  const keel_host host = zero_test_host();
  for (int32_t stage = 1; stage <= 3; ++stage)
    for (bool prefetch : {true, false}) {
      EXPECT_EQ(plugins.zero_api().validate_config(&host, stage_config(stage, prefetch).c_str(), "parallel.strategy"),
                KEEL_OK)
          << zero_last_error();
    }
  EXPECT_EQ(plugins.zero_api().validate_config(&host, R"({"plugin": "zero", "stage": 2})", "parallel.strategy"), KEEL_OK)
      << "prefetch is optional";
}

TEST_F(ZeroConfigTest, StageIsRequired) {
  expect_config_error(R"({"plugin": "zero"})", "parallel.strategy.stage: required key is missing");
}

TEST_F(ZeroConfigTest, StageMustBeOneTwoOrThree) {
  expect_config_error(R"({"plugin": "zero", "stage": 4})", "parallel.strategy.stage: expected 1");
  expect_config_error(R"({"plugin": "zero", "stage": 0})", "found 0");
  expect_config_error(R"({"plugin": "zero", "stage": "3"})", "parallel.strategy.stage: expected an integer");
}

TEST_F(ZeroConfigTest, UnknownKeyIsRejectedWithASuggestion) {
  expect_config_error(R"({"plugin": "zero", "stage": 3, "prefech": false})",
                      "parallel.strategy.prefech: unknown key (did you mean \"prefetch\"?)");
}

TEST_F(ZeroConfigTest, PrefetchMustBeABoolean) {
  expect_config_error(R"({"plugin": "zero", "stage": 3, "prefetch": 1})",
                      "parallel.strategy.prefetch: expected a boolean");
}

TEST_F(ZeroConfigTest, SeveralRanksNeedACommunicatorThatAgrees) {
  ZeroRank lonely(plugins.zero_api(), &plugins.sgd_api(), plugins.sgd_obj, nullptr, nullptr, 0, 2);
  EXPECT_EQ(lonely.create(stage_config(1)), KEEL_ERR_INVALID_ARGUMENT);
  EXPECT_NE(zero_last_error().find("dp_comm is NULL"), std::string::npos) << zero_last_error();

  ThreadWorld world(2);
  ZeroRank wrong_rank(plugins.zero_api(), &plugins.sgd_api(), plugins.sgd_obj, world.api(), world.comm(1), 0, 2);
  EXPECT_EQ(wrong_rank.create(stage_config(2)), KEEL_ERR_INVALID_ARGUMENT);
  EXPECT_NE(zero_last_error().find("dp_comm is rank 1 of 2"), std::string::npos) << zero_last_error();
}

}  // namespace
}  // namespace keel_test
