// Local SGD (Stich 2019; the family of DiLoCo and EDiT): every data-parallel rank keeps whole
// parameters, gradients and optimizer state, steps on its own data with its own gradients — no
// gradient is communicated — and every `sync_every` optimizer steps the ranks average their
// parameters (all_reduce sum × 1/dp_size). It trades a little convergence per step for
// communication every k steps instead of every step.
// Layout, init, the model's views, the optimizer runs and checkpoint I/O come from Keel's
// parameter store (keel_support/strategy/param_store.hpp); this file is only the algorithm and its own
// per-rank state. Methods throw keel_support errors; localsgd_plugin.cpp turns them into
// status codes at the ABI.
#pragma once

#include <keel/strategy.h>

#include <keel_support/common/backend_buffer.hpp>
#include <keel_support/strategy/param_store.hpp>

#include <cstdint>
#include <string>
#include <vector>

namespace localsgd {

// The "parallel.strategy" section: {"plugin": "localsgd", "sync_every": 4}.
struct Config {
  int64_t sync_every = 4;  // optimizer steps between parameter averages, ≥ 1
};
Config parse_config(const char* config_json, const char* json_path);

class LocalSgd {
 public:
  LocalSgd(const keel_host* host, const keel_strategy_create_args& args, Config config);

  static constexpr const char* kSource = "strategy localsgd";  // prefixes every error message
  const keel_host* host() const { return store_.host(); }
  // What the store serves as is: host access by range, owned ranges, describe.
  keel_support::ParamStore& store() { return store_; }
  int32_t params_resident() const { return 1; }
  // Each replica keeps a whole model and reads its own last gradient (describe, ABI 0.19).
  uint32_t holds_whole() const { return KEEL_STRATEGY_HOLDS_WHOLE_PARAMS | KEEL_STRATEGY_HOLDS_WHOLE_GRADS; }

  // keel_param_access (params.h): views into the store's resident arrays.
  void acquire(int32_t layer, int32_t phase, keel_tensor* params, keel_tensor* grads, size_t n) const;
  void release(int32_t layer, int32_t phase, int32_t grads_final) const;

  void begin_microbatch(int32_t index, int32_t is_last) const;
  void zero_grads();
  double grad_sq_norm();
  void step(const keel_strategy_step_args& args);

  // Own state (strategy.h, 0.5): between syncs every rank's parameters and optimizer state
  // differ, while a checkpoint's replicated tensors are rank 0's. Array 0 is this rank's whole
  // parameter array, array 1 + k its optimizer state slot k, so a resume at the same size
  // continues every rank exactly where it was.
  int32_t own_state_count() const { return 1 + store_.n_state_slots(); }
  const std::string& own_state_name(int32_t index) const;
  int64_t own_state_elements() const { return store_.layout().full_elements; }
  void read_own_state(int32_t index, float* dst_host) const;
  void write_own_state(int32_t index, const float* src_host);

 private:
  void average_params_across_ranks();

  keel_support::ParamStore store_;
  const keel_comm_api* dp_comm_;  // NULL: a single rank, plain local training
  void* dp_comm_obj_;
  int32_t dp_size_;
  Config config_;
  keel_support::BackendBuffer norm_scalar_;   // one double: grad_sq_norm's all_reduce
  std::vector<std::string> own_state_names_;  // "params", "optimizer_state.0", ...
};

}  // namespace localsgd
