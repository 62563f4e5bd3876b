// ddp across data-parallel ranks (thread_comm: P ranks as P threads): after the backward
// protocol every rank holds the mean of all ranks' gradients, only the last micro-batch
// reduces, buckets follow bucket_mb, the traffic is 2 × the gradient bytes per step, and a
// comm failure on the communication thread surfaces from grad_sq_norm with its message.
#include <cmath>

#include "ddp_ranks_fixture.hpp"

namespace keel_test {
namespace {

// One acquire/release of a layer in the backward, as GPT-2 does it: the tied embedding layer 0
// is used first by the head (not final) and last by the embedding (final); layer 3 holds no
// parameters and is never touched.
struct LayerUse {
  int32_t layer;
  size_t first_param, n_params;
  int32_t use;  // how many times the layer was used before in this backward
  int32_t grads_final;
};
const LayerUse kBackwardOrder[] = {{0, 0, 2, 0, 0}, {2, 6, 3, 0, 1}, {1, 2, 4, 0, 1}, {0, 0, 2, 1, 1}};

// What one use adds to element e of parameter `index`: distinct per rank, micro-batch and use.
float contribution(int32_t rank, int32_t microbatch, int32_t use, size_t index, int64_t e) {
  return 0.25f * static_cast<float>((rank + 1) * (use + 1)) + 0.5f * static_cast<float>(index) -
         0.01f * static_cast<float>(e) + 0.125f * static_cast<float>(microbatch);
}

using Grads = std::vector<std::vector<float>>;  // [parameter][element]

Grads zero_grads_like_toy() {
  Grads g;
  for (int64_t n : kToyNumel) g.emplace_back(static_cast<size_t>(n), 0.0f);
  return g;
}

// The gradients rank `rank` accumulates locally, with the same float operations as the test's
// backward below.
Grads local_grads(int32_t rank, int32_t micro_batches) {
  Grads g = zero_grads_like_toy();
  for (int32_t mb = 0; mb < micro_batches; ++mb)
    for (const LayerUse& u : kBackwardOrder)
      for (size_t k = 0; k < u.n_params; ++k)
        for (int64_t e = 0; e < kToyNumel[u.first_param + k]; ++e)
          g[u.first_param + k][size_t(e)] += contribution(rank, mb, u.use, u.first_param + k, e);
  return g;
}

// Σ over ranks in rank order, times 1/P: what every rank must hold after the reduction.
Grads expected_mean(int32_t size, int32_t micro_batches) {
  Grads mean = local_grads(0, micro_batches);
  for (int32_t r = 1; r < size; ++r) {
    const Grads g = local_grads(r, micro_batches);
    for (size_t i = 0; i < mean.size(); ++i)
      for (size_t e = 0; e < mean[i].size(); ++e) mean[i][e] += g[i][e];
  }
  for (auto& tensor : mean)
    for (float& x : tensor) x *= 1.0f / static_cast<float>(size);
  return mean;
}

double sum_of_squares(const Grads& g) {
  double sum = 0;
  for (const auto& tensor : g)
    for (float x : tensor) sum += static_cast<double>(x) * x;
  return sum;
}

class DdpRanksProtocolTest : public DdpRanksTest {
 protected:
  void backward(int32_t r, int32_t mb) {
    DdpRank& rank = *ranks[size_t(r)];
    for (const LayerUse& u : kBackwardOrder) {
      std::vector<keel_tensor> params(u.n_params), grads(u.n_params);
      ASSERT_EQ(rank.access.acquire(rank.access.ctx, u.layer, KEEL_PHASE_BACKWARD, params.data(), grads.data(),
                                    u.n_params), KEEL_OK) << thread_last_error();
      for (size_t k = 0; k < u.n_params; ++k) {
        float* g = static_cast<float*>(grads[k].data);
        for (int64_t e = 0; e < kToyNumel[u.first_param + k]; ++e)
          g[e] += contribution(r, mb, u.use, u.first_param + k, e);
      }
      ASSERT_EQ(rank.access.release(rank.access.ctx, u.layer, KEEL_PHASE_BACKWARD, u.grads_final), KEEL_OK)
          << thread_last_error();
    }
  }

  // One optimizer step's gradient work on rank r; returns grad_sq_norm's status and value.
  keel_status accumulate_and_norm(int32_t r, int32_t micro_batches, double* sum_squares) {
    void* s = ranks[size_t(r)]->strategy;
    EXPECT_EQ(api.zero_grads(s), KEEL_OK) << thread_last_error();
    for (int32_t mb = 0; mb < micro_batches; ++mb) {
      EXPECT_EQ(api.begin_microbatch(s, mb, mb == micro_batches - 1), KEEL_OK) << thread_last_error();
      backward(r, mb);
      if (mb < micro_batches - 1)  // no reduction started: nothing else touches the counters yet
        EXPECT_EQ(counters(r).calls[KEEL_COMM_ALL_REDUCE], 0u) << "micro-batch " << mb << " is not the last";
    }
    return api.grad_sq_norm(s, sum_squares);
  }

  // Runs `steps` steps on every rank; records each rank's last grad_sq_norm.
  void run_steps(int32_t micro_batches, int32_t steps = 1) {
    norms.assign(ranks.size(), -1.0);
    world->run([&](int32_t r) {
      for (int32_t step = 1; step <= steps; ++step) {
        ASSERT_EQ(accumulate_and_norm(r, micro_batches, &norms[size_t(r)]), KEEL_OK) << thread_last_error();
        keel_strategy_step_args args{sizeof(args), 0.1f, 1.0f, step};
        ASSERT_EQ(api.step(ranks[size_t(r)]->strategy, &args), KEEL_OK) << thread_last_error();
      }
    });
  }

  void expect_every_rank_holds(const Grads& expected) {
    for (int32_t r = 0; r < world->size(); ++r)
      for (size_t i = 0; i < specs.size(); ++i) {
        const std::vector<float> got = read_grad(r, i);
        for (size_t e = 0; e < got.size(); ++e)
          ASSERT_FLOAT_EQ(got[e], expected[i][e]) << "rank " << r << ", " << specs[i].name << "[" << e << "]";
        ASSERT_EQ(got, read_grad(0, i)) << "rank " << r << " differs from rank 0 in " << specs[i].name;
      }
  }

  std::vector<double> norms;
};

class DdpRanksSizeTest : public DdpRanksProtocolTest, public ::testing::WithParamInterface<int32_t> {};

TEST_P(DdpRanksSizeTest, EveryRankHoldsTheMeanOfAllRanksGradients) {
  const int32_t P = GetParam();
  ASSERT_EQ(create_ranks(P, R"({"plugin": "ddp", "bucket_mb": 0.0002})"), KEEL_OK) << thread_last_error();
  run_steps(1);
  const Grads mean = expected_mean(P, 1);
  expect_every_rank_holds(mean);
  for (int32_t r = 0; r < P; ++r) {
    EXPECT_NEAR(norms[size_t(r)], sum_of_squares(mean), 1e-9 * sum_of_squares(mean)) << "rank " << r;
    EXPECT_EQ(norms[size_t(r)], norms[0]) << "every rank clips by the same norm";
  }
  if (P > 1) EXPECT_NE(local_grads(0, 1)[0][0], local_grads(1, 1)[0][0]);  // the ranks really differ
}

// strategy.h 0.11: each rank's own Σ g² from before the reduction, taken bucket by bucket as
// each is sent (two buckets here), while grad_sq_norm is the mean's.
TEST_P(DdpRanksSizeTest, LocalGradNormIsEachRanksOwnBeforeTheReduction) {
  const int32_t P = GetParam();
  ASSERT_EQ(create_ranks(P, R"({"plugin": "ddp", "bucket_mb": 0.0002})"), KEEL_OK) << thread_last_error();
  run_steps(2);
  for (int32_t r = 0; r < P; ++r) {
    double local = -1;
    ASSERT_EQ(api.local_grad_sq_norm(ranks[size_t(r)]->strategy, &local), KEEL_OK) << thread_last_error();
    const double expected = sum_of_squares(local_grads(r, 2));
    EXPECT_NEAR(local, expected, 1e-6 * expected) << "rank " << r;
    if (P > 1) EXPECT_NE(local, norms[size_t(r)]) << "rank " << r << " reported the reduced norm";
  }
}

TEST_P(DdpRanksSizeTest, TwoMicroBatchesReduceOnlyInTheLast) {
  const int32_t P = GetParam();
  ASSERT_EQ(create_ranks(P), KEEL_OK) << thread_last_error();  // default 25 MiB: one bucket
  run_steps(2);
  expect_every_rank_holds(expected_mean(P, 2));
  for (int32_t r = 0; r < P; ++r)
    EXPECT_EQ(counters(r).calls[KEEL_COMM_ALL_REDUCE], P > 1 ? 1u : 0u) << "rank " << r;
}

TEST_P(DdpRanksSizeTest, AllReduceMovesTwiceTheGradientBytesPerStep) {
  const int32_t P = GetParam();
  ASSERT_EQ(create_ranks(P, R"({"plugin": "ddp", "bucket_mb": 0.0002})"), KEEL_OK) << thread_last_error();
  run_steps(1, 3);
  const uint64_t per_step = P > 1 ? 2 * sizeof(float) * kToyTotal : 0;  // a group of one moves nothing
  for (int32_t r = 0; r < P; ++r) EXPECT_EQ(counters(r).bytes[KEEL_COMM_ALL_REDUCE], 3 * per_step) << "rank " << r;
}

INSTANTIATE_TEST_SUITE_P(Ranks, DdpRanksSizeTest, ::testing::Values(1, 2, 4),
                         [](const ::testing::TestParamInfo<int32_t>& info) { return "P" + std::to_string(info.param); });

// Layers 2, 1 and 0 hold 80, 152 and 288 bytes of gradients; buckets fill from the last layer.
struct BucketCase {
  const char* config;
  uint64_t all_reduces_per_step;
};

class DdpBucketTest : public DdpRanksProtocolTest, public ::testing::WithParamInterface<BucketCase> {};

TEST_P(DdpBucketTest, BucketMbSetsHowManyAllReducesAStepTakes) {
  ASSERT_EQ(create_ranks(2, GetParam().config), KEEL_OK) << thread_last_error();
  run_steps(1, 2);
  expect_every_rank_holds(expected_mean(2, 1));
  for (int32_t r = 0; r < 2; ++r) {
    EXPECT_EQ(counters(r).calls[KEEL_COMM_ALL_REDUCE], 2 * GetParam().all_reduces_per_step) << GetParam().config;
    EXPECT_EQ(counters(r).bytes[KEEL_COMM_ALL_REDUCE], 2 * 2 * sizeof(float) * kToyTotal) << GetParam().config;
  }
}

INSTANTIATE_TEST_SUITE_P(
    Buckets, DdpBucketTest,
    ::testing::Values(BucketCase{R"({"plugin": "ddp", "bucket_mb": 1e-9})", 3},        // one per layer
                      BucketCase{R"({"plugin": "ddp", "bucket_mb": 0.0002})", 2},      // {2, 1} then {0}
                      BucketCase{R"({"plugin": "ddp", "bucket_mb": 0.0001})", 2},      // {2, 1} reaches 104 B
                      BucketCase{R"({"plugin": "ddp", "bucket_mb": 1000})", 1}),       // the whole model
    [](const ::testing::TestParamInfo<BucketCase>& info) { return "case" + std::to_string(info.index); });

TEST_F(DdpRanksProtocolTest, CommFailureOnTheReductionThreadSurfacesFromGradSqNorm) {
  ASSERT_EQ(create_ranks(2, R"({"plugin": "ddp", "bucket_mb": 1e-9})"), KEEL_OK) << thread_last_error();
  world->fail_calls(KEEL_COMM_ALL_REDUCE, "thread_comm: the link to rank 1 went down");
  world->run([&](int32_t r) {
    double sum_squares = -1;
    EXPECT_EQ(accumulate_and_norm(r, 1, &sum_squares), KEEL_ERR_IO);
    EXPECT_EQ(sum_squares, -1) << "outputs are untouched on error";
    const std::string message = thread_last_error();
    EXPECT_NE(message.find("strategy ddp: data-parallel all_reduce of gradient bucket 0 (layers 2..2, 20 elements)"),
              std::string::npos) << message;
    EXPECT_NE(message.find("thread_comm: the link to rank 1 went down"), std::string::npos) << message;
    // The gradients are torn: step refuses too, with the same message.
    keel_strategy_step_args args{sizeof(args), 0.1f, 1.0f, 1};
    EXPECT_EQ(api.step(ranks[size_t(r)]->strategy, &args), KEEL_ERR_IO);
    EXPECT_NE(thread_last_error().find("the link to rank 1 went down"), std::string::npos) << thread_last_error();
  });
  for (const auto& rank : ranks) EXPECT_TRUE(rank->optimizer.steps.empty());
  // A new accumulation starts clean once the communicator works again.
  world->fail_calls(KEEL_COMM_ALL_REDUCE, "");
  run_steps(1);
  expect_every_rank_holds(expected_mean(2, 1));
}

TEST_F(DdpRanksTest, DataParallelGroupWithoutCommunicatorIsRefused) {
  world = std::make_unique<ThreadWorld>(2, &host);
  DdpRank rank;
  keel_strategy_create_args args{};
  args.struct_size = sizeof(args);
  args.config_json = R"({"plugin": "ddp"})";
  args.json_path = "parallel.strategy";
  args.backend = &rank.backend_api;
  args.backend_obj = &rank.backend;
  args.optimizer = &rank.optimizer_api;
  args.optimizer_obj = &rank.optimizer;
  args.params = specs.data();
  args.n_params = specs.size();
  args.n_layers = kToyLayers;
  args.dp_rank = 1;
  args.dp_size = 2;
  EXPECT_EQ(api.create(&host, &args, &rank.strategy), KEEL_ERR_INVALID_ARGUMENT);
  EXPECT_NE(thread_last_error().find("dp_size is 2 but no data-parallel communicator was given"), std::string::npos)
      << thread_last_error();

  args.dp_comm = world->api();
  args.dp_comm_obj = world->comm(1);
  args.dp_size = 3;  // the communicator has 2
  EXPECT_EQ(api.create(&host, &args, &rank.strategy), KEEL_ERR_INVALID_ARGUMENT);
  EXPECT_NE(thread_last_error().find("the data-parallel communicator has 2 ranks"), std::string::npos)
      << thread_last_error();

  args.dp_size = 2;
  args.dp_rank = 2;
  EXPECT_EQ(api.create(&host, &args, &rank.strategy), KEEL_ERR_INVALID_ARGUMENT);
  EXPECT_NE(thread_last_error().find("dp_rank 2 is outside a data-parallel group of 2"), std::string::npos)
      << thread_last_error();

  args.dp_rank = 1;
  rank.backend_api.scale = nullptr;
  EXPECT_EQ(api.create(&host, &args, &rank.strategy), KEEL_ERR_UNIMPLEMENTED);
  EXPECT_NE(thread_last_error().find("\"scale\""), std::string::npos) << thread_last_error();
  EXPECT_EQ(rank.strategy, nullptr);
  EXPECT_EQ(rank.backend.live_allocations, 0);
}

}  // namespace
}  // namespace keel_test
