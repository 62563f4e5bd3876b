// The localsgd example strategy refuses pipeline parallelism (pp > 1) at create, naming the
// strategies that support it; args from before ABI 0.7 mean one stage.
#include <cstddef>
#include <string>

#include "ddp_test_fixture.hpp"

namespace keel_test {
namespace {

class LocalSgdPipelineTest : public ::testing::Test {
 protected:
  LocalSgdPipelineTest() { backend.host = &host; }
  ~LocalSgdPipelineTest() override {
    if (strategy) api.destroy(strategy);
  }

  keel_status create_on_stage(int32_t pp_rank, int32_t pp_size, size_t struct_size = sizeof(keel_strategy_create_args)) {
    keel_strategy_create_args args{};
    args.struct_size = struct_size;
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
    args.tp_size = 1;
    args.pp_rank = pp_rank;
    args.pp_size = pp_size;
    return api.create(&host, &args, &strategy);
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
};

TEST_F(LocalSgdPipelineTest, PipelineParallelismIsRefused) {
  EXPECT_EQ(create_on_stage(0, 2), KEEL_ERR_UNIMPLEMENTED);
  EXPECT_NE(last_error().find("parallel.pp is 2, but the localsgd strategy supports no pipeline parallelism (pp 1 "
                              "only); use the ddp or zero strategy"),
            std::string::npos)
      << last_error();
  EXPECT_EQ(strategy, nullptr);
}

TEST_F(LocalSgdPipelineTest, OneStageAndArgsFromBeforeAbi07AreAccepted) {
  ASSERT_EQ(create_on_stage(0, 1), KEEL_OK) << last_error();
  api.destroy(strategy);
  strategy = nullptr;
  ASSERT_EQ(create_on_stage(1, 2, offsetof(keel_strategy_create_args, pp_rank)), KEEL_OK) << last_error();
}

}  // namespace
}  // namespace keel_test
