// The localsgd example strategy under tensor parallelism (ABI 0.6), single rank: a parameter is
// this rank's piece, initialised through host->init_piece with the whole tensor's numbers, and
// grad_sq_norm counts a tp-replicated parameter only on tp rank 0.
#include <keel_support/common/piece_box.hpp>

#include "ddp_test_fixture.hpp"

namespace keel_test {
namespace {

keel_status piece_init(const keel_param_spec* spec, uint64_t, int64_t begin, int64_t count, float* out) {
  const keel_support::PieceBox box = keel_support::PieceBox::of_spec(*spec);
  for (int64_t i = 0; i < count; ++i) out[i] = test_init_value(*spec, box.global_index(begin + i));
  return KEEL_OK;
}

class LocalSgdTensorParallelTest : public ::testing::Test {
 protected:
  LocalSgdTensorParallelTest() {
    backend.host = &host;
    host.init_piece = piece_init;
    // h.0.fc.weight (6 x 4): this rank holds rows [3, 6).
    specs[4].tp_dim = 0;
    specs[4].local_shape[0] = 3;
    specs[4].local_offset[0] = 3;
  }
  ~LocalSgdTensorParallelTest() override {
    if (strategy) api.destroy(strategy);
  }

  keel_status create(int32_t tp_rank) {
    keel_strategy_create_args args{};
    args.struct_size = sizeof(args);
    args.config_json = R"({"plugin": "localsgd"})";
    args.json_path = "parallel.strategy";
    args.backend = &backend_api;
    args.backend_obj = &backend;
    args.optimizer = &optimizer_api;
    args.optimizer_obj = &optimizer;
    args.params = specs.data();
    args.n_params = specs.size();
    args.n_layers = kToyLayers;
    args.seed = kSeed;
    args.dp_size = 1;
    args.tp_rank = tp_rank;
    args.tp_size = 2;
    const keel_status status = api.create(&host, &args, &strategy);
    if (status == KEEL_OK) EXPECT_EQ(api.param_access(strategy, &access), KEEL_OK) << last_error();
    return status;
  }

  static int64_t numel(const keel_param_spec& spec) {
    int64_t n = 1;
    for (int32_t d = 0; d < spec.ndim; ++d) n *= spec.local_shape[d];
    return n;
  }

  // Every gradient element set to 1 + its parameter index; returns the norm.
  double norm_after_backward() {
    for (int32_t layer = 0; layer < kToyLayers; ++layer) {
      std::vector<size_t> indices;
      for (size_t i = 0; i < specs.size(); ++i)
        if (specs[i].layer == layer) indices.push_back(i);
      std::vector<keel_tensor> params(indices.size()), grads(indices.size());
      EXPECT_EQ(access.acquire(access.ctx, layer, KEEL_PHASE_BACKWARD, params.data(), grads.data(), indices.size()),
                KEEL_OK)
          << last_error();
      for (size_t k = 0; k < indices.size(); ++k)
        for (int64_t e = 0; e < numel(specs[indices[k]]); ++e) static_cast<float*>(grads[k].data)[e] = float(1 + indices[k]);
      EXPECT_EQ(access.release(access.ctx, layer, KEEL_PHASE_BACKWARD, 1), KEEL_OK) << last_error();
    }
    double norm = -1.0;
    EXPECT_EQ(api.grad_sq_norm(strategy, &norm), KEEL_OK) << last_error();
    return norm;
  }

  LoadedPlugin plugin{KEEL_LOCALSGD_PLUGIN_PATH, KEEL_KIND_STRATEGY, "localsgd"};
  const keel_strategy_api& api = plugin.api<keel_strategy_api>();
  keel_host host = make_test_host(pattern_init_param);
  HostMemoryBackend backend;
  keel_backend_api backend_api = HostMemoryBackend::table();
  RecordingOptimizer optimizer;
  keel_optimizer_api optimizer_api = RecordingOptimizer::table();
  std::vector<keel_param_spec> specs = toy_model_specs();
  void* strategy = nullptr;
  keel_param_access access{};
};

TEST_F(LocalSgdTensorParallelTest, GradNormOnTpRankOneCountsOnlyTheSplitParameter) {
  ASSERT_EQ(create(1), KEEL_OK) << last_error();
  EXPECT_EQ(norm_after_backward(), 12.0 * 25.0);  // h.0.fc.weight's 12-element piece, gradient 5
}

TEST_F(LocalSgdTensorParallelTest, GradNormOnTpRankZeroCountsEveryParameter) {
  ASSERT_EQ(create(0), KEEL_OK) << last_error();
  double expected = 0.0;
  for (size_t i = 0; i < specs.size(); ++i) expected += double(numel(specs[i])) * double((1 + i) * (1 + i));
  EXPECT_EQ(norm_after_backward(), expected);
}

TEST_F(LocalSgdTensorParallelTest, PieceHoldsTheWholeTensorsRows) {
  ASSERT_EQ(create(1), KEEL_OK) << last_error();
  std::vector<float> piece(12);
  ASSERT_EQ(api.read_param(strategy, 4, 0, 12, piece.data()), KEEL_OK) << last_error();
  for (int64_t e = 0; e < 12; ++e) EXPECT_EQ(piece[size_t(e)], test_init_value(specs[4], 12 + e)) << "element " << e;
  int64_t begin = -1, end = -1;
  ASSERT_EQ(api.owned_range(strategy, -1, 4, &begin, &end), KEEL_OK) << last_error();
  EXPECT_EQ(end - begin, 12);
}

}  // namespace
}  // namespace keel_test
