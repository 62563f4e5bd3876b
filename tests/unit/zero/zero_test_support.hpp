// What every zero test shares: a small model with uneven layers (7, 13, 1 and 29 elements, a
// tied layer 0, an empty layer 4), a thread-safe test host, the host-memory backend with the
// two extra slots the zero strategy needs (scale, accumulate), and ZeroRank: one rank's
// strategy created over a data-parallel communicator (or none).
#pragma once

#include <gtest/gtest.h>
#include <keel/strategy.h>

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <keel_support/common/testing/recording_host.hpp>
#include <keel_support/common/piece_box.hpp>

#include <keel_support/common/testing/host_memory_backend.hpp>  // defines: HostMemoryBackend
#include "plugin_test_support.hpp"   // defines: LoadedPlugin
#include "thread_comm.hpp"           // defines: ThreadWorld

namespace keel_test {

using keel_support::testing::HostMemoryBackend;

// --- the model ---

inline keel_param_spec zero_spec(const char* name, int32_t layer, std::vector<int64_t> shape, uint32_t flags,
                                 int tag) {
  keel_param_spec spec{};
  spec.struct_size = sizeof(spec);
  spec.name = name;
  spec.layer = layer;
  spec.ndim = int32_t(shape.size());
  spec.tp_dim = -1;
  for (size_t d = 0; d < shape.size(); ++d) spec.global_shape[d] = spec.local_shape[d] = shape[d];
  spec.flags = flags;
  spec.init = KEEL_INIT_NORMAL;
  spec.init_std = float(tag);  // the test host's tag for this parameter
  spec.init_rows = -1;
  return spec;
}

// Layer sizes 7, 13, 1, 29, 0. Decay: wte, h.w and head.w decay; the rest do not.
inline std::vector<keel_param_spec> zero_model_specs() {
  const uint32_t no_decay = KEEL_PARAM_NO_WEIGHT_DECAY;
  return {
      zero_spec("wte", 0, {5}, KEEL_PARAM_TIED, 1),       zero_spec("wpe", 0, {2}, no_decay, 2),
      zero_spec("h.w", 1, {3, 3}, 0, 3),                  zero_spec("h.b", 1, {4}, no_decay, 4),
      zero_spec("h.gain", 2, {1}, no_decay, 5),           zero_spec("head.w", 3, {4, 6}, 0, 6),
      zero_spec("head.b", 3, {5}, no_decay, 7),
  };
}
constexpr int32_t kZeroLayers = 5;
const std::vector<int64_t> kLayerElements = {7, 13, 1, 29, 0};
const std::vector<int64_t> kParamNumel = {5, 2, 9, 4, 1, 24, 5};
constexpr uint64_t kZeroSeed = 99;

// Σ over layers of the layer's size rounded up to a multiple of `ranks`: a full buffer's length.
inline int64_t padded_elements(int32_t ranks) {
  int64_t total = 0;
  for (int64_t n : kLayerElements) total += (n + ranks - 1) / ranks * ranks;
  return total;
}

inline float zero_init_value(const keel_param_spec& spec, int64_t element) {
  return 0.1f * spec.init_std - 0.02f * float(element % 7) + 0.001f * float(element);
}

// --- the host: errors per thread, so ranks running as threads keep their own messages ---

inline std::string& zero_last_error() { return keel_support::testing::last_message(); }

inline keel_host zero_test_host() {
  keel_host host = keel_support::testing::recording_host();
  host.init_param = [](const keel_param_spec* spec, uint64_t seed, int64_t begin, int64_t count,
                       float* out) -> keel_status {
    if (seed != kZeroSeed) return KEEL_ERR_INVALID_ARGUMENT;
    for (int64_t i = 0; i < count; ++i) out[i] = zero_init_value(*spec, begin + i);
    return KEEL_OK;
  };
  // A piece's elements are the whole tensor's at their global flat index.
  host.init_piece = [](const keel_param_spec* spec, uint64_t seed, int64_t begin, int64_t count,
                       float* out) -> keel_status {
    if (seed != kZeroSeed) return KEEL_ERR_INVALID_ARGUMENT;
    const keel_support::PieceBox box = keel_support::PieceBox::of_spec(*spec);
    for (int64_t i = 0; i < count; ++i) out[i] = zero_init_value(*spec, box.global_index(begin + i));
    return KEEL_OK;
  };
  return host;
}

inline std::string stage_config(int32_t stage, bool prefetch = true) {
  return R"({"plugin": "zero", "stage": )" + std::to_string(stage) + R"(, "prefetch": )" +
         (prefetch ? "true" : "false") + "}";
}

// One rank's strategy. comm NULL makes a single rank without a communicator.
class ZeroRank {
 public:
  ZeroRank(const keel_strategy_api& api, const keel_optimizer_api* optimizer, void* optimizer_obj,
           const keel_comm_api* comm, void* comm_obj, int32_t rank, int32_t size)
      : api_(api), optimizer_(optimizer), optimizer_obj_(optimizer_obj), comm_(comm), comm_obj_(comm_obj),
        rank_(rank), size_(size) {
    backend_.host = &host_;
  }
  ZeroRank(const ZeroRank&) = delete;
  ZeroRank& operator=(const ZeroRank&) = delete;
  ~ZeroRank() {
    if (strategy) api_.destroy(strategy);
    EXPECT_EQ(backend_.live_allocations, 0) << "rank " << rank_ << ": destroy returned every allocation";
    EXPECT_EQ(backend_.live_host_allocations, 0) << "rank " << rank_ << ": destroy returned every pinned buffer";
  }

  keel_status create(const std::string& config) {
    keel_strategy_create_args args{};
    args.struct_size = sizeof(args);
    args.config_json = config.c_str();
    args.json_path = "parallel.strategy";
    args.backend = &backend_api_;
    args.backend_obj = &backend_;
    args.optimizer = optimizer_;
    args.optimizer_obj = optimizer_obj_;
    args.params = specs.data();
    args.n_params = specs.size();
    args.n_layers = kZeroLayers;
    args.seed = kZeroSeed;
    args.dp_comm = comm_;
    args.dp_comm_obj = comm_obj_;
    args.dp_rank = rank_;
    args.dp_size = size_;
    args.tp_rank = tp_rank;
    args.tp_size = tp_size;
    args.offload = offload;
    args.offload_obj = offload_obj;
    args.offload_arrays = offload_arrays;
    const keel_status status = api_.create(&host_, &args, &strategy);
    if (status == KEEL_OK) EXPECT_EQ(api_.param_access(strategy, &access), KEEL_OK) << zero_last_error();
    return status;
  }

  std::pair<int64_t, int64_t> owned(int32_t kind, size_t index) const {
    int64_t begin = -1, end = -1;
    EXPECT_EQ(api_.owned_range(strategy, kind, index, &begin, &end), KEEL_OK) << zero_last_error();
    return {begin, end};
  }

  keel_strategy_info describe() const {
    keel_strategy_info info{};
    info.struct_size = sizeof(info);
    EXPECT_EQ(api_.describe(strategy, &info), KEEL_OK) << zero_last_error();
    return info;
  }

  const keel_strategy_api& api() const { return api_; }
  // The backend says its memory is a device's (KEEL_DEVICE_CUDA) though it is host memory, so
  // a strategy takes its device paths (staging copies); call before create.
  void pretend_device_memory() {
    backend_api_.device = [](void*, keel_device* out) -> keel_status {
      *out = keel_device{KEEL_DEVICE_CUDA, 0};
      return KEEL_OK;
    };
  }
  int32_t rank() const { return rank_; }
  int32_t size() const { return size_; }
  const HostMemoryBackend& backend() const { return backend_; }

  std::vector<keel_param_spec> specs = zero_model_specs();  // a test may cut pieces before create
  int32_t tp_rank = 0, tp_size = 1;                          // this rank's tensor-parallel position
  const keel_offload_api* offload = nullptr;                 // the tier (test_offload_tier.hpp), or none
  void* offload_obj = nullptr;
  uint32_t offload_arrays = 0;                               // KEEL_OFFLOAD_*
  void* strategy = nullptr;
  keel_param_access access{};

 private:
  const keel_strategy_api& api_;
  const keel_optimizer_api* optimizer_;
  void* optimizer_obj_;
  const keel_comm_api* comm_;
  void* comm_obj_;
  int32_t rank_, size_;
  keel_host host_ = zero_test_host();
  HostMemoryBackend backend_;
  keel_backend_api backend_api_ = HostMemoryBackend::table();
};

// The zero and sgd plugins, loaded once per test, and an sgd optimizer (momentum: one state
// slot; weight decay: decay and no-decay runs differ) shared by every rank: sgd's step may run
// concurrently on disjoint ranges.
class ZeroPlugins {
 public:
  explicit ZeroPlugins(const char* sgd_config = R"({"lr": 0.1, "momentum": 0.9, "weight_decay": 0.5})") {
    EXPECT_EQ(sgd_api().create(&host_, sgd_config, "optimizer", &sgd_obj), KEEL_OK) << zero_last_error();
  }
  ~ZeroPlugins() {
    if (sgd_obj) sgd_api().destroy(sgd_obj);
  }
  const keel_strategy_api& zero_api() const { return zero_.api<keel_strategy_api>(); }
  const keel_optimizer_api& sgd_api() const { return sgd_.api<keel_optimizer_api>(); }

  // Rank `rank` of `world`, or a lone rank without a communicator when world is NULL.
  std::unique_ptr<ZeroRank> make_rank(ThreadWorld* world, int32_t rank) {
    if (!world) return std::make_unique<ZeroRank>(zero_api(), &sgd_api(), sgd_obj, nullptr, nullptr, 0, 1);
    return std::make_unique<ZeroRank>(zero_api(), &sgd_api(), sgd_obj, world->api(), world->comm(rank), rank,
                                      world->size());
  }

  void* sgd_obj = nullptr;

 private:
  keel_host host_ = zero_test_host();
  LoadedPlugin zero_{KEEL_ZERO_PLUGIN_PATH, KEEL_KIND_STRATEGY, "zero"};
  LoadedPlugin sgd_{KEEL_SGD_PLUGIN_PATH, KEEL_KIND_OPTIMIZER, "sgd"};
};

}  // namespace keel_test
