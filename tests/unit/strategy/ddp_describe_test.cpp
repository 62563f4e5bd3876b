// ddp's 0.4 slots and its config: owned_range reports whole tensors (every rank holds a
// replica), describe reports the persistent buffers, and "bucket_mb" is checked by path.
#include "ddp_test_fixture.hpp"

namespace keel_test {
namespace {

TEST_F(DdpTest, OwnedRangeIsTheWholeTensorForParamsAndEveryStateSlot) {
  optimizer.info.n_state_slots = 2;
  ASSERT_EQ(create(), KEEL_OK) << last_error();
  for (size_t i = 0; i < specs.size(); ++i)
    for (int32_t kind : {-1, 0, 1}) {
      int64_t begin = -7, end = -7;
      ASSERT_EQ(api.owned_range(strategy, kind, i, &begin, &end), KEEL_OK) << last_error();
      EXPECT_EQ(begin, 0) << specs[i].name << " kind " << kind;
      EXPECT_EQ(end, kToyNumel[i]) << specs[i].name << " kind " << kind;
    }
}

TEST_F(DdpTest, OwnedRangeRefusesUnknownSlotsAndIndices) {
  optimizer.info.n_state_slots = 2;
  ASSERT_EQ(create(), KEEL_OK) << last_error();
  int64_t begin = -7, end = -7;
  EXPECT_EQ(api.owned_range(strategy, 2, 0, &begin, &end), KEEL_ERR_INVALID_ARGUMENT);
  EXPECT_NE(last_error().find("state slot 2 is outside [0, 2)"), std::string::npos) << last_error();
  EXPECT_EQ(api.owned_range(strategy, -2, 0, &begin, &end), KEEL_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(api.owned_range(strategy, -1, specs.size(), &begin, &end), KEEL_ERR_INVALID_ARGUMENT);
  EXPECT_NE(last_error().find("parameter index 9 is outside [0, 9)"), std::string::npos) << last_error();
  EXPECT_EQ(begin, -7);  // untouched on error
  EXPECT_EQ(end, -7);
}

TEST_F(DdpTest, DescribeReportsResidentParamsAndPersistentBytes) {
  optimizer.info.n_state_slots = 2;
  ASSERT_EQ(create(), KEEL_OK) << last_error();
  keel_strategy_info info{};
  info.struct_size = sizeof(info);
  ASSERT_EQ(api.describe(strategy, &info), KEEL_OK) << last_error();
  EXPECT_EQ(info.struct_size, sizeof(info));
  EXPECT_EQ(info.params_resident, 1);
  EXPECT_EQ(info.reserved, 0);
  EXPECT_EQ(info.param_bytes, kToyTotal * sizeof(float));
  EXPECT_EQ(info.grad_bytes, kToyTotal * sizeof(float));
  EXPECT_EQ(info.state_bytes, 2 * kToyTotal * sizeof(float));

  info.struct_size = 8;  // older than every field
  EXPECT_EQ(api.describe(strategy, &info), KEEL_ERR_INVALID_ARGUMENT);
}

TEST_F(DdpTest, DescribeCountsNoStateForAStatelessOptimizer) {
  optimizer.info.n_state_slots = 0;
  ASSERT_EQ(create(), KEEL_OK) << last_error();
  keel_strategy_info info{};
  info.struct_size = sizeof(info);
  ASSERT_EQ(api.describe(strategy, &info), KEEL_OK) << last_error();
  EXPECT_EQ(info.state_bytes, 0u);
}

TEST_F(DdpTest, BucketMbMustBeAPositiveNumber) {
  EXPECT_EQ(api.validate_config(&host, R"({"plugin": "ddp", "bucket_mb": 0.5})", "parallel.strategy"), KEEL_OK)
      << last_error();
  EXPECT_EQ(api.validate_config(&host, R"({"plugin": "ddp", "bucket_mb": 0})", "parallel.strategy"),
            KEEL_ERR_INVALID_CONFIG);
  EXPECT_NE(last_error().find("parallel.strategy.bucket_mb: expected a number of MiB in (0, 1e6], found 0"),
            std::string::npos) << last_error();
  EXPECT_EQ(api.validate_config(&host, R"({"plugin": "ddp", "bucket_mb": "25"})", "parallel.strategy"),
            KEEL_ERR_INVALID_CONFIG);
  EXPECT_NE(last_error().find("parallel.strategy.bucket_mb: expected a number"), std::string::npos) << last_error();
  EXPECT_EQ(api.validate_config(&host, R"({"plugin": "ddp", "bucket_md": 1})", "parallel.strategy"),
            KEEL_ERR_INVALID_CONFIG);
  EXPECT_NE(last_error().find("did you mean \"bucket_mb\""), std::string::npos) << last_error();
}

}  // namespace
}  // namespace keel_test
