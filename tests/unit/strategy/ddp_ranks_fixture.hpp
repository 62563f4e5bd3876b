// P data-parallel ranks of the ddp plugin in one process: one strategy per rank over the toy
// model, each with its own host-memory backend and recording optimizer, joined by
// thread_comm's ThreadWorld. The host keeps the last error per thread, as the core does, and
// the test binary exports keel_last_error() like the core (ddp_ranks_test.cpp), so a comm
// failure on ddp's communication thread can be read back with its own message.
#pragma once

#include <gtest/gtest.h>
#include <keel/strategy.h>

#include <memory>
#include <string>
#include <vector>

#include "ddp_test_fixture.hpp"
#include "thread_comm.hpp"

namespace keel_test {

inline std::string& thread_last_error() {
  static thread_local std::string message;
  return message;
}

inline keel_status record_thread_error(keel_status code, const char* message) {
  thread_last_error() = message ? message : "";
  return code;
}

// The host's last_error slot: what ddp's communication thread reads after a failed comm call.
inline const char* read_thread_error() { return thread_last_error().c_str(); }

// pattern_init_param without its call log, which is shared and not thread-safe.
inline keel_status pattern_init_quietly(const keel_param_spec* spec, uint64_t, int64_t begin, int64_t count,
                                        float* out_host) {
  for (int64_t i = 0; i < count; ++i) out_host[i] = test_init_value(*spec, begin + i);
  return KEEL_OK;
}

// One rank's strategy and what it owns.
struct DdpRank {
  HostMemoryBackend backend;
  keel_backend_api backend_api = HostMemoryBackend::table();
  RecordingOptimizer optimizer;
  keel_optimizer_api optimizer_api = RecordingOptimizer::table();
  void* strategy = nullptr;
  keel_param_access access{};
};

class DdpRanksTest : public ::testing::Test {
 protected:
  // The ddp library also holds ddp's compressing variants, "topk" and "powersgd".
  explicit DdpRanksTest(const char* plugin_name = "ddp") : plugin(KEEL_DDP_PLUGIN_PATH, KEEL_KIND_STRATEGY, plugin_name) {}
  ~DdpRanksTest() override {
    for (auto& rank : ranks)
      if (rank->strategy) api.destroy(rank->strategy);
  }

  // Makes a world of `size` ranks and one ddp strategy per rank (created on this thread: create
  // only asks the communicator its size). Returns the first failing status.
  keel_status create_ranks(int32_t size, const char* config_json = R"({"plugin": "ddp"})") {
    world = std::make_unique<ThreadWorld>(size, &host);
    for (int32_t r = 0; r < size; ++r) {
      ranks.push_back(std::make_unique<DdpRank>());
      DdpRank& rank = *ranks.back();
      rank.backend.host = &host;
      keel_strategy_create_args args{};
      args.struct_size = sizeof(args);
      args.config_json = config_json;
      args.json_path = "parallel.strategy";
      args.backend = &rank.backend_api;
      args.backend_obj = &rank.backend;
      args.optimizer = &rank.optimizer_api;
      args.optimizer_obj = &rank.optimizer;
      args.params = specs.data();
      args.n_params = specs.size();
      args.n_layers = kToyLayers;
      args.seed = kSeed;
      args.dp_comm = world->api();
      args.dp_comm_obj = world->comm(r);
      args.dp_rank = r;
      args.dp_size = size;
      const keel_status status = api.create(&host, &args, &rank.strategy);
      if (status != KEEL_OK) return status;
      EXPECT_EQ(api.param_access(rank.strategy, &rank.access), KEEL_OK) << thread_last_error();
    }
    return KEEL_OK;
  }

  std::vector<float> read_grad(int32_t rank, size_t index) {
    std::vector<float> values(static_cast<size_t>(kToyNumel.at(index)));
    EXPECT_EQ(api.read_grad(ranks.at(size_t(rank))->strategy, index, 0, kToyNumel[index], values.data()), KEEL_OK)
        << thread_last_error();
    return values;
  }

  keel_comm_counters counters(int32_t rank) { return ThreadWorld::counters_of(world->comm(rank)); }

  LoadedPlugin plugin;
  const keel_strategy_api& api = plugin.api<keel_strategy_api>();
  keel_host host{sizeof(keel_host), KEEL_ABI_VERSION_MAJOR, KEEL_ABI_VERSION_MINOR, record_thread_error, discard_log,
                 pattern_init_quietly, read_thread_error};
  std::vector<keel_param_spec> specs = toy_model_specs();
  std::unique_ptr<ThreadWorld> world;
  std::vector<std::unique_ptr<DdpRank>> ranks;
};

}  // namespace keel_test
