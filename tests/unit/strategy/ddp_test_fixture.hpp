// A toy model's parameter list and a fixture that creates the ddp plugin over it with the
// in-test host (deterministic init_param that records its calls), host-memory backend and
// recording optimizer. Tests change the inputs first, then call create().
#pragma once

#include <gtest/gtest.h>
#include <keel/strategy.h>

#include <string>
#include <vector>

#include <keel_support/common/testing/host_memory_backend.hpp>
#include "plugin_test_support.hpp"
#include "recording_optimizer.hpp"

namespace keel_test {

using keel_support::testing::HostMemoryBackend;

// Value of element `element` of a parameter as the test host initialises it: distinct per
// parameter (through init_std, used here as a tag) and per element.
inline float test_init_value(const keel_param_spec& spec, int64_t element) {
  return spec.init_std * 1000.0f + static_cast<float>(spec.layer) + 0.001f * static_cast<float>(element);
}

struct InitCall {
  std::string name;
  uint64_t seed;
  int64_t begin, count;
};

inline std::vector<InitCall>& init_calls() {
  static std::vector<InitCall> calls;
  return calls;
}

inline keel_status pattern_init_param(const keel_param_spec* spec, uint64_t seed, int64_t begin, int64_t count,
                                      float* out_host) {
  init_calls().push_back({spec->name, seed, begin, count});
  for (int64_t i = 0; i < count; ++i) out_host[i] = test_init_value(*spec, begin + i);
  return KEEL_OK;
}

inline keel_param_spec make_spec(const char* name, int32_t layer, std::vector<int64_t> shape, uint32_t flags,
                                 int tag) {
  keel_param_spec spec{};
  spec.struct_size = sizeof(spec);
  spec.name = name;
  spec.layer = layer;
  spec.ndim = static_cast<int32_t>(shape.size());
  spec.tp_dim = -1;
  for (size_t d = 0; d < shape.size(); ++d) spec.global_shape[d] = spec.local_shape[d] = shape[d];
  spec.flags = flags;
  spec.init = KEEL_INIT_NORMAL;
  spec.init_std = 0.01f * static_cast<float>(tag);
  spec.init_rows = -1;
  return spec;
}

// GPT-like: embeddings (layer 0), one block (layer 1), final norm and head (layer 2), and an
// empty layer 3. Flat offsets: 0, 40, 72, 76, 80, 104, 110, 114, 118; 130 elements in all.
inline std::vector<keel_param_spec> toy_model_specs() {
  const uint32_t no_decay = KEEL_PARAM_NO_WEIGHT_DECAY;
  return {
      make_spec("wte", 0, {10, 4}, KEEL_PARAM_TIED, 1),
      make_spec("wpe", 0, {8, 4}, no_decay, 2),
      make_spec("h.0.ln.weight", 1, {4}, no_decay, 3),
      make_spec("h.0.ln.bias", 1, {4}, no_decay, 4),
      make_spec("h.0.fc.weight", 1, {6, 4}, 0, 5),
      make_spec("h.0.fc.bias", 1, {6}, no_decay, 6),
      make_spec("ln_f.weight", 2, {4}, no_decay, 7),
      make_spec("ln_f.bias", 2, {4}, no_decay, 8),
      make_spec("head.weight", 2, {3, 4}, 0, 9),
  };
}
constexpr int32_t kToyLayers = 4;
const std::vector<int64_t> kToyOffsets = {0, 40, 72, 76, 80, 104, 110, 114, 118};
const std::vector<int64_t> kToyNumel = {40, 32, 4, 4, 24, 6, 4, 4, 12};
constexpr int64_t kToyTotal = 130;
constexpr uint64_t kSeed = 1234;

class DdpTest : public ::testing::Test {
 protected:
  DdpTest() {
    init_calls().clear();
    backend.host = &host;
  }
  ~DdpTest() override {
    if (strategy) api.destroy(strategy);
  }

  keel_status create(const char* config_json = R"({"plugin": "ddp"})") {
    keel_strategy_create_args args{};
    args.struct_size = sizeof(args);
    args.config_json = config_json;
    args.json_path = "parallel.strategy";
    args.backend = &backend_api;
    args.backend_obj = &backend;
    args.optimizer = optimizer_api_in_use;
    args.optimizer_obj = optimizer_obj_in_use;
    args.params = specs.data();
    args.n_params = specs.size();
    args.n_layers = n_layers;
    args.seed = kSeed;
    args.dp_rank = 0;  // a single rank: no communicator
    args.dp_size = 1;
    args.tp_rank = tp_rank;
    args.tp_size = tp_size;
    keel_status status = api.create(&host, &args, &strategy);
    if (status == KEEL_OK) {
      EXPECT_EQ(api.param_access(strategy, &access), KEEL_OK) << last_error();
    }
    return status;
  }

  std::vector<float> read_param(size_t index) {
    std::vector<float> values(static_cast<size_t>(kToyNumel.at(index)));
    EXPECT_EQ(api.read_param(strategy, index, 0, kToyNumel[index], values.data()), KEEL_OK) << last_error();
    return values;
  }
  std::vector<float> read_grad(size_t index) {
    std::vector<float> values(static_cast<size_t>(kToyNumel.at(index)));
    EXPECT_EQ(api.read_grad(strategy, index, 0, kToyNumel[index], values.data()), KEEL_OK) << last_error();
    return values;
  }

  // Acquires `layer` for backward and returns its gradient descriptors (host memory here).
  std::vector<keel_tensor> acquire_grads(int32_t layer, size_t n) {
    std::vector<keel_tensor> params(n), grads(n);
    EXPECT_EQ(access.acquire(access.ctx, layer, KEEL_PHASE_BACKWARD, params.data(), grads.data(), n), KEEL_OK)
        << last_error();
    return grads;
  }

  LoadedPlugin plugin{KEEL_DDP_PLUGIN_PATH, KEEL_KIND_STRATEGY, "ddp"};
  const keel_strategy_api& api = plugin.api<keel_strategy_api>();
  keel_host host = make_test_host(pattern_init_param);
  HostMemoryBackend backend;
  keel_backend_api backend_api = HostMemoryBackend::table();
  RecordingOptimizer optimizer;
  keel_optimizer_api optimizer_api = RecordingOptimizer::table();
  const keel_optimizer_api* optimizer_api_in_use = &optimizer_api;
  void* optimizer_obj_in_use = &optimizer;
  std::vector<keel_param_spec> specs = toy_model_specs();
  int32_t n_layers = kToyLayers;
  int32_t tp_rank = 0, tp_size = 1;  // this rank's tensor-parallel position (ABI 0.6)
  void* strategy = nullptr;
  keel_param_access access{};
};

}  // namespace keel_test
