// keel_support/model/chunk_plan.hpp: where a model's blocks sit under pipeline parallelism, and the
// plan of a model without pipelines (ChunkPlan::whole). A default-constructed plan is not a plan:
// it once answered "-1 chunks" and let a forward refuse chunk 0 for no reason a model author
// could act on.
#include <keel_support/model/chunk_plan.hpp>

#include <gtest/gtest.h>

#include <string>

namespace {

using keel_support::ChunkPlan;

keel_model_create_args pipeline_args(int32_t pp_rank, int32_t pp_size, int32_t virtual_stages) {
  keel_model_create_args args{};
  args.struct_size = sizeof(args);
  args.pp_rank = pp_rank;
  args.pp_size = pp_size;
  args.virtual_stages = virtual_stages;
  return args;
}

TEST(ChunkPlan, WholeIsOneChunkHoldingEveryBlock) {
  const ChunkPlan plan = ChunkPlan::whole(6);
  EXPECT_EQ(plan.chunks(), 1);
  EXPECT_EQ(plan.first_block(0), 0);
  EXPECT_EQ(plan.block_count(0), 6);
  EXPECT_TRUE(plan.holds_embedding());
  EXPECT_TRUE(plan.holds_head());
  EXPECT_FALSE(plan.holds_wte_copy());
  for (int32_t block = 0; block < 6; ++block) EXPECT_TRUE(plan.holds_block(block)) << "block " << block;
  EXPECT_FALSE(plan.holds_block(6));
  EXPECT_NO_THROW(plan.require_mine(0, "forward"));
}

TEST(ChunkPlan, WholeEqualsThePlanOfPpOne) {
  const ChunkPlan from_args(pipeline_args(0, 1, 1), 6);
  const ChunkPlan whole = ChunkPlan::whole(6);
  ASSERT_EQ(from_args.chunks(), whole.chunks());
  EXPECT_EQ(from_args.block_count(0), whole.block_count(0));
}

TEST(ChunkPlan, DefaultConstructedRefusesWithTheReason) {
  const ChunkPlan unmade;
  try {
    (void)unmade.chunks();
    FAIL() << "a default-constructed plan answered chunks()";
  } catch (const keel_support::StatusError& e) {
    const std::string message = e.what();
    EXPECT_NE(message.find("default-constructed"), std::string::npos) << message;
    EXPECT_NE(message.find("ChunkPlan::whole(n_layer)"), std::string::npos) << message;
  }
  EXPECT_THROW(unmade.require_mine(0, "forward"), keel_support::StatusError);
  EXPECT_THROW((void)unmade.first_block(0), keel_support::StatusError);
}

// pp 2 x virtual_stages 2 over 8 blocks: chunk c holds blocks [2c, 2c + 2) on rank c % 2.
TEST(ChunkPlan, InterleavedPlacementOnRankOne) {
  const ChunkPlan plan(pipeline_args(1, 2, 2), 8);
  EXPECT_EQ(plan.chunks(), 4);
  EXPECT_FALSE(plan.holds_embedding());
  EXPECT_TRUE(plan.holds_head());
  EXPECT_TRUE(plan.holds_wte_copy());
  const bool expected[8] = {false, false, true, true, false, false, true, true};
  for (int32_t block = 0; block < 8; ++block) EXPECT_EQ(plan.holds_block(block), expected[block]) << "block " << block;
  EXPECT_THROW(plan.require_mine(0, "forward"), keel_support::StatusError);
  EXPECT_THROW((void)plan.first_block(5), keel_support::StatusError);
}

TEST(ChunkPlan, UnevenCutIsAConfigError) {
  EXPECT_THROW(ChunkPlan(pipeline_args(0, 3, 1), 8), keel_support::ConfigError);
  EXPECT_THROW(ChunkPlan::whole(-1), keel_support::ConfigError);
}

}  // namespace
