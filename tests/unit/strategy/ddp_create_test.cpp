// ddp's entry, config checks, and create: what it allocates, how it initialises parameters,
// what it refuses, and that destroy (or a failed create) returns every allocation.
#include "ddp_test_fixture.hpp"

namespace keel_test {
namespace {

TEST_F(DdpTest, EntryIsCompleteAndVersioned) {
  const keel_plugin_info& info = plugin.info();
  EXPECT_EQ(info.struct_size, sizeof(keel_plugin_info));
  EXPECT_EQ(info.abi_major, static_cast<uint32_t>(KEEL_ABI_VERSION_MAJOR));
  EXPECT_EQ(info.abi_minor, static_cast<uint32_t>(KEEL_ABI_VERSION_MINOR));
  EXPECT_STREQ(info.version, "0.2.0");
  EXPECT_EQ(api.struct_size, sizeof(keel_strategy_api));
  const keel_strategy_api* table = &api;
  EXPECT_TRUE(KEEL_HAS_SLOT(table, validate_config) && KEEL_HAS_SLOT(table, create) && KEEL_HAS_SLOT(table, destroy) &&
              KEEL_HAS_SLOT(table, param_access) && KEEL_HAS_SLOT(table, begin_microbatch) &&
              KEEL_HAS_SLOT(table, zero_grads) && KEEL_HAS_SLOT(table, grad_sq_norm) && KEEL_HAS_SLOT(table, step) &&
              KEEL_HAS_SLOT(table, read_param) && KEEL_HAS_SLOT(table, write_param) && KEEL_HAS_SLOT(table, read_grad) &&
              KEEL_HAS_SLOT(table, read_state) && KEEL_HAS_SLOT(table, write_state) &&
              KEEL_HAS_SLOT(table, owned_range) && KEEL_HAS_SLOT(table, describe));
}

TEST_F(DdpTest, InitialisesEveryParameterOnceWithTheSeed) {
  ASSERT_EQ(create(), KEEL_OK) << last_error();
  ASSERT_EQ(init_calls().size(), specs.size());
  for (size_t i = 0; i < specs.size(); ++i) {
    EXPECT_EQ(init_calls()[i].name, specs[i].name);
    EXPECT_EQ(init_calls()[i].seed, kSeed);
    EXPECT_EQ(init_calls()[i].begin, 0);
    EXPECT_EQ(init_calls()[i].count, kToyNumel[i]);
    const std::vector<float> values = read_param(i);
    for (int64_t e = 0; e < kToyNumel[i]; ++e)
      ASSERT_EQ(values[static_cast<size_t>(e)], test_init_value(specs[i], e)) << specs[i].name << "[" << e << "]";
  }
}

TEST_F(DdpTest, OneAllocationEachForParamsGradsAndStateSlotsAllFreedByDestroy) {
  optimizer.info.n_state_slots = 2;
  ASSERT_EQ(create(), KEEL_OK) << last_error();
  EXPECT_EQ(backend.live_allocations, 4);
  api.destroy(strategy);
  strategy = nullptr;
  EXPECT_EQ(backend.live_allocations, 0);

  optimizer.info.n_state_slots = 0;
  ASSERT_EQ(create(), KEEL_OK) << last_error();
  EXPECT_EQ(backend.live_allocations, 2);
}

TEST_F(DdpTest, FailedAllocationKeepsTheBackendsMessageAndLeaksNothing) {
  backend.allocations_before_failure = 2;  // params and grads succeed, the first state slot fails
  EXPECT_EQ(create(), KEEL_ERR_OUT_OF_MEMORY);
  EXPECT_EQ(last_error(), "backend test: out of memory (requested)");
  EXPECT_EQ(strategy, nullptr);
  EXPECT_EQ(backend.live_allocations, 0);
}

TEST_F(DdpTest, ConfigKeysOtherThanPluginAreRejected) {
  EXPECT_EQ(api.validate_config(&host, R"({"plugin": "ddp"})", "parallel.strategy"), KEEL_OK) << last_error();
  EXPECT_EQ(api.validate_config(&host, R"({"plugn": "ddp"})", "parallel.strategy"), KEEL_ERR_INVALID_CONFIG);
  EXPECT_NE(last_error().find("parallel.strategy.plugn: unknown key (did you mean \"plugin\"?)"), std::string::npos)
      << last_error();
  EXPECT_EQ(create(R"({"plugin": "ddp", "stage": 2})"), KEEL_ERR_INVALID_CONFIG);
  EXPECT_NE(last_error().find("strategy ddp: parallel.strategy.stage: unknown key"), std::string::npos)
      << last_error();
  EXPECT_EQ(backend.live_allocations, 0);
}

TEST_F(DdpTest, SpecWithLayerOutOfRangeIsRejectedByName) {
  specs[5].layer = 7;
  EXPECT_EQ(create(), KEEL_ERR_INVALID_ARGUMENT);
  EXPECT_NE(last_error().find("parameter 5 (\"h.0.fc.bias\"): layer 7 is outside [0, 4)"), std::string::npos)
      << last_error();
}

TEST_F(DdpTest, BackendWithoutSumSquaresIsRefused) {
  backend_api.sum_squares = nullptr;
  EXPECT_EQ(create(), KEEL_ERR_UNIMPLEMENTED);
  EXPECT_NE(last_error().find("\"sum_squares\""), std::string::npos) << last_error();
}

TEST_F(DdpTest, OptimizerAskingForTooManyStateSlotsIsRefused) {
  optimizer.info.n_state_slots = KEEL_OPTIMIZER_MAX_STATE_SLOTS + 1;
  EXPECT_EQ(create(), KEEL_ERR_INVALID_ARGUMENT);
  EXPECT_NE(last_error().find("state slots"), std::string::npos) << last_error();
}

}  // namespace
}  // namespace keel_test
