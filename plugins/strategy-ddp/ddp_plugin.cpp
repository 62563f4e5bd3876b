// The ddp plugin's entry: its config section, the strategy table (keel_support's
// StrategySlots, with ddp's own read_grad) and the entry symbol.
#include <keel/plugin.h>
#include <keel/strategy.h>
#include <keel_support/common/abi_guard.hpp>
#include <keel_support/common/json_section.hpp>
#include <keel_support/common/plugin_entry.hpp>
#include <keel_support/strategy/strategy_slots.hpp>

#include <algorithm>
#include <cstddef>
#include <string>
#include <memory>

#include "ddp_strategy.hpp"

namespace keel_ddp {
namespace {

using keel_support::StatusError;

// The "parallel.strategy" section of ddp, topk or powersgd. "bucket_mb" is the size (MiB) at which
// consecutive layers' gradients stop coalescing into one all-reduce (PyTorch DDP's
// bucket_cap_mb); top-k chooses within each bucket. PowerSGD works per matrix, without buckets.
DdpConfig parse_config(const char* config_json, const char* json_path, DdpConfig::Compression compression) {
  auto section = keel_support::JsonSection::parse(config_json, json_path);
  section.allow("plugin");
  DdpConfig config;
  config.compression = compression;
  if (compression != DdpConfig::Compression::powersgd) {
    const double bucket_mb = section.get<double>("bucket_mb", 25.0);
    if (!(bucket_mb > 0.0) || bucket_mb > 1e6)
      throw keel_support::ConfigError(section.path_of("bucket_mb") + ": expected a number of MiB in (0, 1e6], found " +
                                      nlohmann::json(bucket_mb).dump());
    config.bucket_bytes = static_cast<uint64_t>(bucket_mb * 1024.0 * 1024.0);
  }
  if (compression == DdpConfig::Compression::topk) {
    config.topk_ratio = section.get<double>("ratio", config.topk_ratio);
    if (!(config.topk_ratio > 0.0 && config.topk_ratio <= 1.0))
      throw keel_support::ConfigError(section.path_of("ratio") + ": expected the share of each bucket sent, in (0, 1], "
                                      "found " + nlohmann::json(config.topk_ratio).dump());
  }
  if (compression == DdpConfig::Compression::powersgd)
    config.powersgd_rank = section.get_in_range<int32_t>("rank", config.powersgd_rank, 1, 1024);
  if (compression == DdpConfig::Compression::none)
    config.hierarchical_min_bytes =
        uint64_t(section.get_in_range<int64_t>("hierarchical_min_kb", int64_t(config.hierarchical_min_bytes >> 10), 0,
                                               int64_t(1) << 30))
        << 10;
  section.finish();
  return config;
}

using Slots = keel_support::StrategySlots<DdpStrategy>;

template <DdpConfig::Compression kCompression>
keel_status validate_config(const keel_host* host, const char* config_json, const char* json_path) {
  return keel_support::guard(host, DdpStrategy::kSource, [&] { parse_config(config_json, json_path, kCompression); });
}

template <DdpConfig::Compression kCompression>
keel_status create(const keel_host* host, const keel_strategy_create_args* args, void** out_strategy) {
  return keel_support::guard(host, DdpStrategy::kSource, [&] {
    if (!host || !args || !out_strategy)
      throw StatusError(KEEL_ERR_INVALID_ARGUMENT, "create: host, args or out_strategy is NULL");
    const DdpConfig config = parse_config(args->config_json, args->json_path, kCompression);
    auto strategy = std::make_unique<DdpStrategy>(host, *args, config);
    *out_strategy = strategy.release();
  });
}

// Waits for the reduction in flight before reading (ddp_strategy.hpp).
keel_status read_grad(void* handle, size_t index, int64_t begin, int64_t count, float* dst_host) {
  return Slots::with(handle, [&](DdpStrategy& s) { s.read_grad(index, begin, count, dst_host); });
}

// --- own state (0.5): a compressor's error-feedback memory, one host array each ---

const CompressorArray& own_array(DdpStrategy& s, int32_t index) {
  const std::vector<CompressorArray>& arrays = s.own_arrays();
  if (index < 0 || size_t(index) >= arrays.size())
    throw StatusError(KEEL_ERR_INVALID_ARGUMENT, "own state index " + std::to_string(index) + " is outside [0, " +
                                                     std::to_string(arrays.size()) + ")");
  return arrays[size_t(index)];
}
keel_status own_state_count(void* handle, int32_t* out) {
  return Slots::with(handle, [&](DdpStrategy& s) {
    if (!out) throw StatusError(KEEL_ERR_INVALID_ARGUMENT, "own_state_count: out is NULL");
    *out = int32_t(s.own_arrays().size());
  });
}
keel_status own_state_info(void* handle, int32_t index, const char** out_name, int64_t* out_count) {
  return Slots::with(handle, [&](DdpStrategy& s) {
    if (!out_name || !out_count) throw StatusError(KEEL_ERR_INVALID_ARGUMENT, "own_state_info: an output is NULL");
    const CompressorArray& array = own_array(s, index);  // named for the strategy's life
    *out_name = array.name.c_str();
    *out_count = int64_t(array.values->size());
  });
}
keel_status read_own_state(void* handle, int32_t index, float* dst) {
  return Slots::with(handle, [&](DdpStrategy& s) {
    const CompressorArray& array = own_array(s, index);
    if (!dst && !array.values->empty()) throw StatusError(KEEL_ERR_INVALID_ARGUMENT, "read_own_state: dst is NULL");
    std::copy(array.values->begin(), array.values->end(), dst);
  });
}
keel_status write_own_state(void* handle, int32_t index, const float* src) {
  return Slots::with(handle, [&](DdpStrategy& s) {
    const CompressorArray& array = own_array(s, index);
    if (!src && !array.values->empty()) throw StatusError(KEEL_ERR_INVALID_ARGUMENT, "write_own_state: src is NULL");
    std::copy(src, src + array.values->size(), array.values->begin());
  });
}

keel_status local_grad_sq_norm(void* handle, double* out) {
  return Slots::with(handle, [&](DdpStrategy& s) {
    if (!out) throw StatusError(KEEL_ERR_INVALID_ARGUMENT, "local_grad_sq_norm: out is NULL");
    *out = s.local_grad_sq_norm();
  });
}

template <DdpConfig::Compression kCompression>
keel_strategy_api make_table() {
  keel_strategy_api api = Slots::table(validate_config<kCompression>, create<kCompression>);
  api.read_grad = read_grad;
  api.local_grad_sq_norm = local_grad_sq_norm;
  if (kCompression != DdpConfig::Compression::none) {
    api.own_state_count = own_state_count;
    api.own_state_info = own_state_info;
    api.read_own_state = read_own_state;
    api.write_own_state = write_own_state;
  }
  return api;
}

const keel_strategy_api kDdp = make_table<DdpConfig::Compression::none>();
const keel_strategy_api kTopk = make_table<DdpConfig::Compression::topk>();
const keel_strategy_api kPowerSgd = make_table<DdpConfig::Compression::powersgd>();

const keel_plugin_info kInfos[] = {
    keel_support::plugin_info(KEEL_KIND_STRATEGY, "ddp", "0.2.0", &kDdp,
                              "Replicated parameters, gradients and optimizer state in flat buffers; gradients averaged "
                              "over the data-parallel group by bucketed all-reduce overlapping the backward"),
    keel_support::plugin_info(KEEL_KIND_STRATEGY, "topk", "0.1.0", &kTopk,
                              "ddp sending only the largest `ratio` of each bucket's gradients as (index, value) "
                              "pairs, with error feedback of the rest"),
    keel_support::plugin_info(KEEL_KIND_STRATEGY, "powersgd", "0.1.0", &kPowerSgd,
                              "ddp sending each gradient matrix as rank-`rank` PowerSGD factors (warm-started Q, "
                              "error feedback); vectors whole")};

const keel_plugin_list kList = keel_support::plugin_list(kInfos);

}  // namespace
}  // namespace keel_ddp

extern "C" KEEL_EXPORT const keel_plugin_list* keel_plugin_entry(void) { return &keel_ddp::kList; }
