// The zero strategy's create under pipeline parallelism (ABI 0.7), one rank per stage and no
// launcher: a STAGE_TIED parameter at pp > 1 without an embedding group is refused with the
// parameter's name at every ZeRO stage, and a stage holding none needs no group. The sum over
// the stages itself runs under mpirun (tests/mpi/pp_strategy_test.cpp).
#include <string>

#include "zero_test_support.hpp"

namespace keel_test {
namespace {

class ZeroPipelineTest : public ::testing::TestWithParam<int32_t> {
 protected:
  ~ZeroPipelineTest() override {
    if (strategy) plugins.zero_api().destroy(strategy);
  }

  keel_status create_on_stage(int32_t pp_rank, int32_t pp_size) {
    const std::string config = R"({"plugin": "zero", "stage": )" + std::to_string(GetParam()) + "}";
    keel_strategy_create_args args{};
    args.struct_size = sizeof(args);
    args.config_json = config.c_str();
    args.json_path = "parallel.strategy";
    args.backend = &backend_api;
    args.backend_obj = &backend;
    args.optimizer = &plugins.sgd_api();
    args.optimizer_obj = plugins.sgd_obj;
    args.params = specs.data();
    args.n_params = specs.size();
    args.n_layers = kZeroLayers;
    args.seed = kZeroSeed;
    args.dp_size = 1;
    args.tp_size = 1;
    args.pp_rank = pp_rank;
    args.pp_size = pp_size;
    return plugins.zero_api().create(&host, &args, &strategy);
  }

  ZeroPlugins plugins;
  keel_host host = zero_test_host();
  HostMemoryBackend backend;
  keel_backend_api backend_api = HostMemoryBackend::table();
  std::vector<keel_param_spec> specs = zero_model_specs();
  void* strategy = nullptr;
};

TEST_P(ZeroPipelineTest, StageTiedParameterWithoutEmbeddingGroupIsRefused) {
  backend.host = &host;
  specs[0].flags |= KEEL_PARAM_STAGE_TIED | KEEL_PARAM_STAGE_COPY;  // wte, as the last stage holds it
  EXPECT_EQ(create_on_stage(1, 2), KEEL_ERR_INVALID_ARGUMENT);
  EXPECT_NE(zero_last_error().find("strategy zero: create: parameter 0 (\"wte\") is flagged STAGE_TIED on pipeline "
                                   "stage 1 of 2, but embedding_comm is NULL"),
            std::string::npos)
      << zero_last_error();
  EXPECT_EQ(strategy, nullptr);
}

TEST_P(ZeroPipelineTest, StageWithoutTiedParametersNeedsNoEmbeddingGroup) {
  backend.host = &host;
  ASSERT_EQ(create_on_stage(1, 4), KEEL_OK) << zero_last_error();
}

INSTANTIATE_TEST_SUITE_P(Stages, ZeroPipelineTest, ::testing::Values(1, 2, 3),
                         [](const ::testing::TestParamInfo<int32_t>& info) { return "Stage" + std::to_string(info.param); });

}  // namespace
}  // namespace keel_test
