// ddp under pipeline parallelism (ABI 0.7), without a launcher: the create args' pipeline
// fields (read only where struct_size covers them), the refusal of a STAGE_TIED parameter at
// pp > 1 without an embedding group, grad_sq_norm leaving out a STAGE_COPY, and the order an
// interleaved schedule gives begin_microbatch (one chunk's last backward before another chunk's
// earlier one) on two data-parallel ranks. The sum over the stages itself runs under mpirun
// (tests/mpi/pp_strategy_test.cpp).
#include <cstddef>
#include <string>

#include "ddp_ranks_fixture.hpp"
#include "ddp_test_fixture.hpp"

namespace keel_test {
namespace {

class DdpPipelineTest : public DdpTest {
 protected:
  // create() with this rank's pipeline position; struct_size as given (0.7's by default).
  keel_status create_on_stage(int32_t pp_rank, int32_t pp_size, size_t struct_size = sizeof(keel_strategy_create_args)) {
    keel_strategy_create_args args{};
    args.struct_size = struct_size;
    args.config_json = R"({"plugin": "ddp"})";
    args.json_path = "parallel.strategy";
    args.backend = &backend_api;
    args.backend_obj = &backend;
    args.optimizer = &optimizer_api;
    args.optimizer_obj = &optimizer;
    args.params = specs.data();
    args.n_params = specs.size();
    args.n_layers = n_layers;
    args.seed = kSeed;
    args.dp_size = 1;
    args.tp_size = 1;
    args.pp_rank = pp_rank;
    args.pp_size = pp_size;
    const keel_status status = api.create(&host, &args, &strategy);
    if (status == KEEL_OK) EXPECT_EQ(api.param_access(strategy, &access), KEEL_OK) << last_error();
    return status;
  }
};

TEST_F(DdpPipelineTest, StageTiedParameterWithoutEmbeddingGroupIsRefused) {
  specs[0].flags |= KEEL_PARAM_STAGE_TIED;  // wte
  EXPECT_EQ(create_on_stage(0, 2), KEEL_ERR_INVALID_ARGUMENT);
  EXPECT_NE(last_error().find("parameter 0 (\"wte\") is flagged STAGE_TIED on pipeline stage 0 of 2, but "
                              "embedding_comm is NULL"),
            std::string::npos)
      << last_error();
  EXPECT_EQ(strategy, nullptr);
}

TEST_F(DdpPipelineTest, MiddleStageWithoutTiedParametersNeedsNoEmbeddingGroup) {
  ASSERT_EQ(create_on_stage(1, 3), KEEL_OK) << last_error();
}

TEST_F(DdpPipelineTest, PipelinePositionOutsideThePipelineIsRefused) {
  EXPECT_EQ(create_on_stage(2, 2), KEEL_ERR_INVALID_ARGUMENT);
  EXPECT_NE(last_error().find("pp_rank 2 is outside a pipeline of 2 stages (pp_size)"), std::string::npos)
      << last_error();
}

// A 0.6 core's args end before pp_rank: whatever lies beyond is not read, so one stage.
TEST_F(DdpPipelineTest, ArgsFromBeforeAbi07MeanOneStage) {
  specs[0].flags |= KEEL_PARAM_STAGE_TIED;
  ASSERT_EQ(create_on_stage(1, 2, offsetof(keel_strategy_create_args, pp_rank)), KEEL_OK) << last_error();
}

TEST_F(DdpPipelineTest, GradSqNormLeavesOutTheStageCopy) {
  specs[6].flags |= KEEL_PARAM_STAGE_COPY;  // ln_f.weight, in layer 2 between counted ones
  ASSERT_EQ(create_on_stage(0, 1), KEEL_OK) << last_error();
  ASSERT_EQ(api.zero_grads(strategy), KEEL_OK) << last_error();
  ASSERT_EQ(api.begin_microbatch(strategy, 0, 1), KEEL_OK) << last_error();
  double expected = 0.0;
  const size_t first_of_layer[] = {0, 2, 6};
  const size_t count_of_layer[] = {2, 4, 3};
  for (int32_t layer = 2; layer >= 0; --layer) {
    std::vector<keel_tensor> grads = acquire_grads(layer, count_of_layer[layer]);
    for (size_t k = 0; k < grads.size(); ++k) {
      const size_t index = first_of_layer[layer] + k;
      float* g = static_cast<float*>(grads[k].data);
      for (int64_t e = 0; e < kToyNumel[index]; ++e) {
        g[e] = 0.5f + float(index) + 0.25f * float(e);
        if (index != 6) expected += double(g[e]) * g[e];
      }
    }
    ASSERT_EQ(access.release(access.ctx, layer, KEEL_PHASE_BACKWARD, 1), KEEL_OK) << last_error();
  }
  double got = -1.0;
  ASSERT_EQ(api.grad_sq_norm(strategy, &got), KEEL_OK) << last_error();
  EXPECT_DOUBLE_EQ(got, expected) << "ln_f.weight (STAGE_COPY) must not be counted";
}

// Interleaved 1F1B on a rank with two chunks: chunk A (layer 2) has its last backward (is_last)
// before chunk B (layer 1) has its earlier one, then B its last. Each layer's gradients must be
// all-reduced exactly once: a begin_microbatch that reset the step's bookkeeping reduced A's
// bucket a second time at grad_sq_norm (holding the dp sum instead of the mean).
TEST_F(DdpRanksTest, InterleavedChunksReduceEachLayerOnce) {
  ASSERT_EQ(create_ranks(2, R"({"plugin": "ddp", "bucket_mb": 1e-6})"), KEEL_OK) << thread_last_error();
  auto value = [](int32_t rank, int32_t mb, int64_t e) { return 0.75f * float(rank + 1) + 0.125f * float(mb) + 0.01f * float(e); };
  struct Backward {
    int32_t mb, is_last, layer;
  };
  const Backward order[] = {{0, 0, 2}, {0, 0, 1}, {1, 1, 2}, {1, 0, 1}, {2, 1, 1}};
  world->run([&](int32_t r) {
    DdpRank& rank = *ranks[size_t(r)];
    ASSERT_EQ(api.zero_grads(rank.strategy), KEEL_OK) << thread_last_error();
    for (const Backward& b : order) {
      ASSERT_EQ(api.begin_microbatch(rank.strategy, b.mb, b.is_last), KEEL_OK) << thread_last_error();
      const size_t n = b.layer == 2 ? 3 : 4;
      std::vector<keel_tensor> params(n), grads(n);
      ASSERT_EQ(rank.access.acquire(rank.access.ctx, b.layer, KEEL_PHASE_BACKWARD, params.data(), grads.data(), n),
                KEEL_OK) << thread_last_error();
      for (size_t k = 0; k < n; ++k)
        for (int64_t e = 0; e < grads[k].shape[0] * (grads[k].ndim > 1 ? grads[k].shape[1] : 1); ++e)
          static_cast<float*>(grads[k].data)[e] += value(r, b.mb, e);
      ASSERT_EQ(rank.access.release(rank.access.ctx, b.layer, KEEL_PHASE_BACKWARD, 1), KEEL_OK) << thread_last_error();
    }
    double norm = 0.0;
    ASSERT_EQ(api.grad_sq_norm(rank.strategy, &norm), KEEL_OK) << thread_last_error();
  });
  for (size_t index : {size_t(2), size_t(6)}) {  // h.0.ln.weight (layer 1), ln_f.weight (layer 2)
    const int32_t layer = index == 2 ? 1 : 2;
    for (int64_t e = 0; e < kToyNumel[index]; ++e) {
      float local[2] = {0.0f, 0.0f};
      for (int32_t r = 0; r < 2; ++r)
        for (const Backward& b : order)
          if (b.layer == layer) local[r] += value(r, b.mb, e);
      const float mean = (local[0] + local[1]) * 0.5f;
      for (int32_t r = 0; r < 2; ++r)
        EXPECT_EQ(read_grad(r, index)[size_t(e)], mean) << "rank " << r << ", " << specs[index].name << "[" << e << "]";
    }
  }
}

}  // namespace
}  // namespace keel_test
