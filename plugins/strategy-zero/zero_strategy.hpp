// The zero strategy object: ZeRO stages 1-3 over the data-parallel group, on the per-layer
// chunk layout of shard_layout.hpp. What each stage keeps for the run's whole life:
//   stage 1: full parameters, full gradients, optimizer state for this rank's chunks;
//   stage 2: full parameters, gradient and state chunks (full gradients per layer, transient);
//   stage 3: parameter, gradient and state chunks (full parameters per layer, transient).
// Methods throw (keel_support::StatusError, keel_support::CalleeFailed); zero_plugin.cpp turns
// that into status codes at the ABI. Host access by flat range lives in zero_param_io.cpp.
#pragma once

#include <keel/backend.h>
#include <keel/host.h>
#include <keel/optimizer.h>
#include <keel/params.h>
#include <keel/strategy.h>

#include <memory>
#include <vector>

#include "backend_calls.hpp"
#include "dp_group.hpp"
#include "grad_reduction.hpp"
#include "param_gather.hpp"
#include "shard_layout.hpp"
#include "zero_config.hpp"

namespace keel_zero {

class ZeroStrategy {
 public:
  // Allocates every persistent buffer and initialises the parameter elements this rank stores
  // through host->init_param, so every layout starts from the single-rank numbers.
  ZeroStrategy(const keel_host* host, const ZeroConfig& config, const keel_strategy_create_args& args);

  const keel_host* host() const { return host_; }

  // keel_param_access, see params.h.
  void acquire(int32_t layer, int32_t phase, keel_tensor* params, keel_tensor* grads, size_t n);
  void release(int32_t layer, int32_t phase, int32_t grads_final);

  void begin_microbatch(int32_t index, int32_t is_last);
  void zero_grads();
  double grad_sq_norm();
  void step(const keel_strategy_step_args& args);
  void describe(keel_strategy_info* out) const;

  // zero_param_io.cpp
  void owned_range(int32_t kind, size_t index, int64_t* begin, int64_t* end) const;
  void read_param(size_t index, int64_t begin, int64_t count, float* dst_host) const;
  void write_param(size_t index, int64_t begin, int64_t count, const float* src_host);
  void read_grad(size_t index, int64_t begin, int64_t count, float* dst_host);  // settles reductions first
  void read_state(int32_t slot, size_t index, int64_t begin, int64_t count, float* dst_host) const;
  void write_state(int32_t slot, size_t index, int64_t begin, int64_t count, const float* src_host);

 private:
  void initialise_params(uint64_t seed);
  void check_layer(int32_t layer, int32_t phase) const;
  float* acquire_params(int32_t layer, int32_t phase, bool opens_backward);
  keel_tensor describe_tensor(size_t index, float* layer_base) const;
  bool applies_weight_decay(size_t index) const;
  // This rank's chunk of the layer's parameters (inside the full buffer below stage 3).
  float* owned_param_chunk(int32_t layer) const;
  void step_owned_chunk(int32_t layer, const keel_strategy_step_args& args);
  void run_optimizer(int32_t layer, ElementRange run, int32_t apply_weight_decay, const keel_strategy_step_args& args);
  // Where element `begin` of parameter `index` lives in the parameter buffer.
  float* param_element(size_t index, int64_t begin) const;
  // zero_param_io.cpp's range checks.
  void check_range(const char* what, size_t index, int64_t begin, int64_t count, const void* host_ptr) const;
  void check_owned(const char* what, const char* kind, size_t index, int64_t begin, int64_t count) const;
  float* state_slot(const char* what, int32_t slot) const;

  const keel_host* host_;
  const ZeroConfig config_;
  BackendCalls backend_;
  const keel_optimizer_api* optimizer_;
  void* optimizer_obj_;
  const keel_param_spec* specs_;  // the model's; outlives the strategy
  keel_device device_{};
  keel_optimizer_info optimizer_info_{};
  ShardLayout layout_;
  DataParallelGroup group_;
  keel_support::BackendBuffer params_;  // full layout below stage 3, shard layout in stage 3
  GradReduction grads_;
  std::vector<keel_support::BackendBuffer> optimizer_state_;  // one shard buffer per state slot
  std::unique_ptr<ParamGather> gather_;                       // stage 3 only
  std::vector<char> counted_in_norm_;  // per parameter: grad_sq_norm counts it on this tp rank
};

}  // namespace keel_zero
