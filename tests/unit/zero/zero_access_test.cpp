// The acquire/release protocol as the zero strategy serves it: stage 3 hands out the full
// layer and, with prefetch, starts gathering the next layer in the direction of travel at each
// acquire; stages 2/3 hand out zeroed full-size gradient buffers in backward and no gradient
// memory in forward; misuse (releasing what was not acquired, stepping with a layer held, a
// norm with a layer's gradients incomplete) is refused with a message.
#include "zero_rank_driver.hpp"

namespace keel_test {
namespace {

constexpr size_t kLayer1Params = 2;  // h.w (9), h.b (4)

class ZeroAccessTest : public ::testing::Test {
 protected:
  // Runs `body(rank)` on each of `ranks` ranks created with `config`, as threads.
  template <typename Body>
  void on_ranks(int32_t ranks, const std::string& config, Body&& body) {
    ThreadWorld world(ranks);
    world.run([&](int32_t r) {
      auto rank = plugins.make_rank(&world, r);
      if (rank->create(config) != KEEL_OK) throw std::runtime_error("create failed: " + zero_last_error());
      body(*rank, world);
    });
  }

  uint64_t all_gather_calls(ThreadWorld& world, int32_t rank) {
    return ThreadWorld::counters_of(world.comm(rank)).calls[KEEL_COMM_ALL_GATHER];
  }

  ZeroPlugins plugins;
};

TEST_F(ZeroAccessTest, Stage3PrefetchesTheNextLayerInTheDirectionOfTravel) {
  for (bool prefetch : {true, false}) {
    SCOPED_TRACE(prefetch ? "prefetch" : "no prefetch");
    on_ranks(2, stage_config(3, prefetch), [&](ZeroRank& rank, ThreadWorld& world) {
      const keel_param_access& a = rank.access;
      std::vector<keel_tensor> params(2), grads(2);
      ASSERT_EQ(a.acquire(a.ctx, 0, KEEL_PHASE_FORWARD, params.data(), nullptr, 2), KEEL_OK) << zero_last_error();
      EXPECT_EQ(all_gather_calls(world, rank.rank()), prefetch ? 2u : 1u) << "layer 0, and layer 1 ahead";
      ASSERT_EQ(a.release(a.ctx, 0, KEEL_PHASE_FORWARD, 0), KEEL_OK);
      ASSERT_EQ(a.acquire(a.ctx, 1, KEEL_PHASE_FORWARD, params.data(), nullptr, 2), KEEL_OK) << zero_last_error();
      EXPECT_EQ(all_gather_calls(world, rank.rank()), prefetch ? 3u : 2u) << "layer 1 was in flight; layer 2 ahead";
      ASSERT_EQ(a.release(a.ctx, 1, KEEL_PHASE_FORWARD, 0), KEEL_OK);
      // Backward travels down: acquiring layer 3 prefetches layer 2.
      std::vector<keel_tensor> p3(2), g3(2);
      const uint64_t before = all_gather_calls(world, rank.rank());
      ASSERT_EQ(a.acquire(a.ctx, 3, KEEL_PHASE_BACKWARD, p3.data(), g3.data(), 2), KEEL_OK) << zero_last_error();
      // (with prefetch, layer 2 is still gathered ahead from the forward: nothing new for it)
      EXPECT_EQ(all_gather_calls(world, rank.rank()) - before, 1u);
      ASSERT_EQ(a.release(a.ctx, 3, KEEL_PHASE_BACKWARD, 1), KEEL_OK) << zero_last_error();
      std::vector<keel_tensor> p2(1), g2(1);
      const uint64_t before2 = all_gather_calls(world, rank.rank());
      ASSERT_EQ(a.acquire(a.ctx, 2, KEEL_PHASE_BACKWARD, p2.data(), g2.data(), 1), KEEL_OK) << zero_last_error();
      // One gather either way: with prefetch it is layer 1 ahead (layer 2 is already whole),
      // without it layer 2 itself.
      EXPECT_EQ(all_gather_calls(world, rank.rank()) - before2, 1u);
      ASSERT_EQ(a.release(a.ctx, 2, KEEL_PHASE_BACKWARD, 1), KEEL_OK) << zero_last_error();
    });
  }
}

TEST_F(ZeroAccessTest, Stage3AcquireHandsOutTheWholeLayerWhileEachRankStoresAChunk) {
  on_ranks(3, stage_config(3), [&](ZeroRank& rank, ThreadWorld&) {
    const keel_param_access& a = rank.access;
    std::vector<keel_tensor> params(kLayer1Params);
    ASSERT_EQ(a.acquire(a.ctx, 1, KEEL_PHASE_FORWARD, params.data(), nullptr, kLayer1Params), KEEL_OK);
    EXPECT_EQ(params[0].shape[0], 3);
    EXPECT_EQ(params[0].shape[1], 3);
    EXPECT_EQ(params[1].shape[0], 4);
    for (size_t k = 0; k < kLayer1Params; ++k)
      for (int64_t e = 0; e < kParamNumel[2 + k]; ++e)
        ASSERT_EQ(static_cast<const float*>(params[k].data)[e], zero_init_value(rank.specs[2 + k], e));
    ASSERT_EQ(a.release(a.ctx, 1, KEEL_PHASE_FORWARD, 0), KEEL_OK);
    // 13 elements over 3 ranks: chunks of 5; h.w is [0, 9), so rank 0 owns [0, 5), rank 1 [5, 9).
    const std::pair<int64_t, int64_t> expected[] = {{0, 5}, {5, 9}, {0, 0}};
    EXPECT_EQ(rank.owned(-1, 2), expected[rank.rank()]);
  });
}

TEST_F(ZeroAccessTest, Stage3WriteParamReachesTheNextAcquireEvenWhenPrefetched) {
  on_ranks(2, stage_config(3), [&](ZeroRank& rank, ThreadWorld&) {
    const keel_param_access& a = rank.access;
    std::vector<keel_tensor> params(2);
    ASSERT_EQ(a.acquire(a.ctx, 0, KEEL_PHASE_FORWARD, params.data(), nullptr, 2), KEEL_OK);  // prefetches layer 1
    ASSERT_EQ(a.release(a.ctx, 0, KEEL_PHASE_FORWARD, 0), KEEL_OK);
    // Each rank writes 100 + element into its part of h.w (layer 1), as a checkpoint load would.
    const auto [begin, end] = rank.owned(-1, 2);
    std::vector<float> values;
    for (int64_t e = begin; e < end; ++e) values.push_back(100.0f + float(e));
    ASSERT_EQ(plugins.zero_api().write_param(rank.strategy, 2, begin, end - begin, values.data()), KEEL_OK)
        << zero_last_error();
    ASSERT_EQ(a.acquire(a.ctx, 1, KEEL_PHASE_FORWARD, params.data(), nullptr, 2), KEEL_OK) << zero_last_error();
    for (int64_t e = 0; e < 9; ++e) EXPECT_EQ(static_cast<const float*>(params[0].data)[e], 100.0f + float(e));
    ASSERT_EQ(a.release(a.ctx, 1, KEEL_PHASE_FORWARD, 0), KEEL_OK);
  });
}

TEST_F(ZeroAccessTest, GradientBuffersPerStage) {
  for (int32_t stage = 1; stage <= 3; ++stage) {
    SCOPED_TRACE("stage " + std::to_string(stage));
    on_ranks(2, stage_config(stage), [&](ZeroRank& rank, ThreadWorld&) {
      const keel_param_access& a = rank.access;
      std::vector<keel_tensor> params(kLayer1Params), grads(kLayer1Params);
      // Forward: stage 1 hands out its resident gradients, stages 2/3 have none to hand out.
      ASSERT_EQ(a.acquire(a.ctx, 1, KEEL_PHASE_FORWARD, params.data(), grads.data(), kLayer1Params), KEEL_OK);
      EXPECT_EQ(grads[0].data == nullptr, stage >= 2);
      EXPECT_EQ(grads[0].shape[0], 3) << "shapes are described either way";
      ASSERT_EQ(a.release(a.ctx, 1, KEEL_PHASE_FORWARD, 0), KEEL_OK);
      // Backward: full-size and zeroed (stages 2/3: fresh for each backward pass).
      for (int pass = 0; pass < 2; ++pass) {
        ASSERT_EQ(a.acquire(a.ctx, 1, KEEL_PHASE_BACKWARD, params.data(), grads.data(), kLayer1Params), KEEL_OK);
        for (int64_t e = 0; e < 9; ++e) {
          float* g = static_cast<float*>(grads[0].data);
          if (stage >= 2 || pass == 0) ASSERT_EQ(g[e], 0.0f) << "pass " << pass << " element " << e;
          g[e] += 1.0f;
        }
        ASSERT_EQ(a.release(a.ctx, 1, KEEL_PHASE_BACKWARD, 1), KEEL_OK) << zero_last_error();
      }
    });
  }
}

TEST_F(ZeroAccessTest, MisuseIsRefusedWithAMessage) {
  for (int32_t stage = 1; stage <= 3; ++stage) {
    SCOPED_TRACE("stage " + std::to_string(stage));
    on_ranks(2, stage_config(stage), [&](ZeroRank& rank, ThreadWorld&) {
      const auto& api = plugins.zero_api();
      const keel_param_access& a = rank.access;
      EXPECT_EQ(a.release(a.ctx, 2, KEEL_PHASE_BACKWARD, 1), KEEL_ERR_INVALID_ARGUMENT);
      EXPECT_NE(zero_last_error().find("not acquired for backward"), std::string::npos) << zero_last_error();
      std::vector<keel_tensor> params(kLayer1Params), grads(kLayer1Params);
      EXPECT_EQ(a.acquire(a.ctx, 1, KEEL_PHASE_FORWARD, params.data(), nullptr, 1), KEEL_ERR_INVALID_ARGUMENT);
      EXPECT_EQ(a.acquire(a.ctx, 5, KEEL_PHASE_FORWARD, params.data(), nullptr, 0), KEEL_ERR_INVALID_ARGUMENT);
      // A backward left open: the norm refuses incomplete gradients.
      ASSERT_EQ(a.acquire(a.ctx, 1, KEEL_PHASE_BACKWARD, params.data(), grads.data(), kLayer1Params), KEEL_OK);
      ASSERT_EQ(a.release(a.ctx, 1, KEEL_PHASE_BACKWARD, 0), KEEL_OK);
      double norm = 0;
      EXPECT_EQ(api.grad_sq_norm(rank.strategy, &norm), KEEL_ERR_INVALID_ARGUMENT);
      EXPECT_NE(zero_last_error().find("never released with grads_final = 1"), std::string::npos) << zero_last_error();
      ASSERT_EQ(a.acquire(a.ctx, 1, KEEL_PHASE_BACKWARD, params.data(), grads.data(), kLayer1Params), KEEL_OK);
      ASSERT_EQ(a.release(a.ctx, 1, KEEL_PHASE_BACKWARD, 1), KEEL_OK) << zero_last_error();
      ASSERT_EQ(api.grad_sq_norm(rank.strategy, &norm), KEEL_OK) << zero_last_error();
      // After the reduction, more backward needs zero_grads first.
      EXPECT_EQ(a.acquire(a.ctx, 1, KEEL_PHASE_BACKWARD, params.data(), grads.data(), kLayer1Params),
                KEEL_ERR_INVALID_ARGUMENT);
      EXPECT_NE(zero_last_error().find("call zero_grads first"), std::string::npos) << zero_last_error();
      if (stage == 3) {  // a step with a layer still in the model's hands
        ASSERT_EQ(a.acquire(a.ctx, 1, KEEL_PHASE_FORWARD, params.data(), nullptr, kLayer1Params), KEEL_OK);
        keel_strategy_step_args args{sizeof(args), 0.1f, 1.0f, 1};
        EXPECT_EQ(api.step(rank.strategy, &args), KEEL_ERR_INVALID_ARGUMENT);
        EXPECT_NE(zero_last_error().find("still acquired"), std::string::npos) << zero_last_error();
        ASSERT_EQ(a.release(a.ctx, 1, KEEL_PHASE_FORWARD, 0), KEEL_OK);
        EXPECT_EQ(a.release(a.ctx, 1, KEEL_PHASE_FORWARD, 0), KEEL_ERR_INVALID_ARGUMENT) << "released twice";
      }
      if (stage >= 2) {
        float value = 0;
        const auto [begin, end] = rank.owned(0, 2);
        const int64_t outside = begin > 0 ? 0 : end;  // h.w has 9 elements; each rank owns part of it
        EXPECT_EQ(api.read_grad(rank.strategy, 2, outside, 1, &value), KEEL_ERR_INVALID_ARGUMENT);
        EXPECT_NE(zero_last_error().find("gradient is sharded"), std::string::npos) << zero_last_error();
      }
    });
  }
}

}  // namespace
}  // namespace keel_test
