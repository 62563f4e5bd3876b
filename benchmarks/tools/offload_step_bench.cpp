// The optimizer step of the parameter store with its Adam state resident, and in the nvme
// offload tier streamed back to back (read, update, write per window) and pipelined (read k+1
// and write k-1 while k updates), in one process over the same model (Keel issue 11). Run by
// benchmarks/offload_step.py, not by ctest. Prints one JSON object per mode:
//   {"mode": ..., "seconds": best step, "bytes_read": per step, "bytes_written": per step,
//    "busy_seconds": the tier's time with a request in flight during that step}
// Usage: keel-offload-step-bench ADAMW_PLUGIN FOLDER [PARAMS] [REPEATS] [QUEUE_DEPTH] [BLOCK_BYTES] [MODES]
// (MODES: a comma-separated order, default resident,serial,pipelined) [ENGINE: nvme (default)
// or cpu, the host-memory tier with its own ideal request size]
#include <keel/strategy.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include <keel_support/strategy/param_store.hpp>
#include <keel_support/common/testing/host_memory_backend.hpp>

#include "plugin_test_support.hpp"
#include "test_offload_tier.hpp"

namespace {

keel_param_spec flat_spec(const std::string& name, int32_t layer, int64_t numel, uint32_t flags) {
  keel_param_spec spec{};
  spec.struct_size = sizeof(spec);
  spec.name = strdup(name.c_str());  // lives as long as the process
  spec.layer = layer;
  spec.ndim = 1;
  spec.tp_dim = -1;
  spec.global_shape[0] = spec.local_shape[0] = numel;
  spec.flags = flags;
  spec.init = KEEL_INIT_NORMAL;
  spec.init_std = 0.02f;
  spec.init_rows = -1;
  return spec;
}

// A GPT-like list: 12 layers, each a weight (decayed) and a bias (not), ~params in all.
std::vector<keel_param_spec> model_specs(int64_t params) {
  std::vector<keel_param_spec> specs;
  const int32_t layers = 12;
  const int64_t bias = 3072;
  const int64_t weight = params / layers - bias;
  for (int32_t l = 0; l < layers; ++l) {
    specs.push_back(flat_spec("h." + std::to_string(l) + ".w", l, weight, 0));
    specs.push_back(flat_spec("h." + std::to_string(l) + ".b", l, bias, KEEL_PARAM_NO_WEIGHT_DECAY));
  }
  return specs;
}

keel_host bench_host() {
  keel_host host = keel_test::plain_tier_host();
  host.init_param = [](const keel_param_spec*, uint64_t, int64_t begin, int64_t count, float* out) -> keel_status {
    for (int64_t i = 0; i < count; ++i) out[i] = 0.01f * float((begin + i) % 97) - 0.4f;
    return KEEL_OK;
  };
  return host;
}

struct Result {
  double seconds = 1e30;
  uint64_t bytes_read = 0, bytes_written = 0;
  double busy = 0;  // the tier's busy seconds during the best step (at least one request unfinished)
};

Result run_mode(const std::string& mode, const keel_optimizer_api& adamw, void* optimizer,
                const std::vector<keel_param_spec>& specs, const std::string& folder, int repeats, uint32_t depth,
                uint64_t block, const std::string& engine) {
  keel_host host = bench_host();
  keel_support::testing::HostMemoryBackend backend;
  backend.host = &host;
  keel_backend_api backend_api = keel_support::testing::HostMemoryBackend::table();
  std::unique_ptr<keel_test::TestTier> tier;
  keel_strategy_create_args args{};
  args.struct_size = sizeof(args);
  args.backend = &backend_api;
  args.backend_obj = &backend;
  args.optimizer = &adamw;
  args.optimizer_obj = optimizer;
  args.params = specs.data();
  args.n_params = specs.size();
  args.n_layers = 12;
  args.seed = 1;
  args.dp_size = 1;
  args.tp_size = 1;
  if (mode != "resident") {
    if (engine == "cpu") {
      tier = keel_test::TestTier::cpu(uint64_t(8) << 30, host);
      tier->ideal_bytes = 0;  // the engine's own
    } else {
      tier = keel_test::TestTier::nvme(folder, uint64_t(64) << 30, host, depth, block);
    }
    args.offload = &keel_test::test_offload_api();
    args.offload_obj = tier.get();
    args.offload_arrays = KEEL_OFFLOAD_OPTIMIZER_STATE;
  }
  keel_support::StoreOptions options;
  options.offload_supported = KEEL_OFFLOAD_OPTIMIZER_STATE;
  options.stream_serially = mode == "serial";
  keel_support::ParamStore store(&host, args, options);
  float* grads = store.grads();
  for (int64_t i = 0; i < store.grad_elements(); ++i) grads[i] = 0.001f * float(i % 89) - 0.04f;
  Result result;
  keel_offload_counters before{}, after{};
  for (int r = 0; r <= repeats; ++r) {  // step 1 warms up (first touch of every page)
    keel_strategy_step_args step{sizeof(step), 1e-3f, 1.0f, r + 1};
    before.struct_size = after.struct_size = sizeof(before);
    if (tier) keel_test::test_offload_api().counters(tier.get(), &before);
    const auto start = std::chrono::steady_clock::now();
    store.step_owned(step);
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    if (tier) keel_test::test_offload_api().counters(tier.get(), &after);
    if (r == 0) continue;
    if (seconds < result.seconds) result.busy = after.busy_seconds - before.busy_seconds;
    result.seconds = std::min(result.seconds, seconds);
    result.bytes_read = after.bytes_read - before.bytes_read;
    result.bytes_written = after.bytes_written - before.bytes_written;
  }
  return result;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 3) {
    std::cerr << "usage: keel-offload-step-bench ADAMW_PLUGIN FOLDER [PARAMS] [REPEATS] [QUEUE_DEPTH] [BLOCK_BYTES] [MODES]\n";
    return 2;
  }
  const int64_t params = argc > 3 ? std::atoll(argv[3]) : 100000000;
  const int repeats = argc > 4 ? std::atoi(argv[4]) : 3;
  const uint32_t depth = argc > 5 ? uint32_t(std::atoi(argv[5])) : 16;
  const uint64_t block = argc > 6 ? uint64_t(std::atoll(argv[6])) : (uint64_t(1) << 20);
  const std::string engine = argc > 8 ? argv[8] : "nvme";
  if (engine != "nvme" && engine != "cpu") {
    std::cerr << "keel-offload-step-bench: ENGINE is nvme or cpu, not " << engine << "\n";
    return 2;
  }
  std::vector<std::string> modes;
  std::string list = argc > 7 ? argv[7] : "resident,serial,pipelined";
  for (size_t start = 0; start <= list.size();) {
    const size_t comma = std::min(list.find(',', start), list.size());
    modes.push_back(list.substr(start, comma - start));
    start = comma + 1;
  }
  try {
    keel_test::LoadedPlugin plugin(argv[1], KEEL_KIND_OPTIMIZER, "adamw");
    const auto& adamw = plugin.api<keel_optimizer_api>();
    keel_host host = bench_host();
    void* optimizer = nullptr;
    const char* config = R"({"plugin": "adamw", "lr": 1e-3, "betas": [0.9, 0.95], "eps": 1e-8, "weight_decay": 0.1})";
    if (adamw.create(&host, config, "optimizer", &optimizer) != KEEL_OK)
      throw std::runtime_error("adamw create failed: " + keel_test::tier_last_error());
    const std::vector<keel_param_spec> specs = model_specs(params);
    for (const std::string& mode : modes) {
      if (mode != "resident" && mode != "serial" && mode != "pipelined") throw std::runtime_error("unknown mode " + mode);
      const Result r = run_mode(mode, adamw, optimizer, specs, argv[2], repeats, depth, block, engine);
      std::cout << "{\"mode\": \"" << mode << "\", \"params\": " << params << ", \"seconds\": " << r.seconds
                << ", \"bytes_read\": " << r.bytes_read << ", \"bytes_written\": " << r.bytes_written << ", \"busy_seconds\": " << r.busy << "}"
                << std::endl;
    }
    adamw.destroy(optimizer);
  } catch (const std::exception& e) {
    std::cerr << "keel-offload-step-bench: " << e.what() << " " << keel_test::tier_last_error() << "\n";
    return 1;
  }
  return 0;
}
