// The ddp strategy object: parameters, gradients and optimizer state resident in backend
// memory, one flat allocation each, laid out by param_layout, and replicated on every
// data-parallel rank. With dp_size > 1 the last micro-batch's release(grads_final) hands each
// completed bucket of layers to the communication thread (keel_support::CommWorker), and
// grad_sq_norm/step wait for it, so every rank then holds the same averaged gradients.
// Methods throw (keel_support::StatusError, keel_support::CalleeFailed); ddp_plugin.cpp turns that into
// status codes at the ABI.
#pragma once

#include <keel/backend.h>
#include <keel/host.h>
#include <keel/optimizer.h>
#include <keel/params.h>
#include <keel/strategy.h>

#include <memory>
#include <vector>

#include <keel_support/abi_guard.hpp>
#include <keel_support/backend_buffer.hpp>
#include "gradient_buckets.hpp"
#include <keel_support/comm_worker.hpp>
#include <keel_support/tp_pieces.hpp>
#include "param_layout.hpp"

namespace keel_ddp {

// The "parallel.strategy" section, parsed by ddp_plugin.cpp.
struct DdpConfig {
  uint64_t bucket_bytes = 25ull << 20;  // "bucket_mb", MiB
};

class DdpStrategy {
 public:
  // Allocates every buffer and initialises each parameter through host->init_param.
  DdpStrategy(const keel_host* host, const keel_strategy_create_args& args, const DdpConfig& config);

  const keel_host* host() const { return host_; }

  // keel_param_access, see params.h.
  void acquire(int32_t layer, int32_t phase, keel_tensor* params, keel_tensor* grads, size_t n) const;
  void release(int32_t layer, int32_t phase, int32_t grads_final);

  void begin_microbatch(int32_t index, int32_t is_last);
  void zero_grads();
  double grad_sq_norm();
  void step(const keel_strategy_step_args& args);
  void owned_range(int32_t kind, size_t index, int64_t* begin, int64_t* end) const;
  keel_strategy_info describe() const;

  void read_param(size_t index, int64_t begin, int64_t count, float* dst_host) const;
  void write_param(size_t index, int64_t begin, int64_t count, const float* src_host);
  void read_grad(size_t index, int64_t begin, int64_t count, float* dst_host);
  void read_state(int32_t slot, size_t index, int64_t begin, int64_t count, float* dst_host) const;
  void write_state(int32_t slot, size_t index, int64_t begin, int64_t count, const float* src_host);

 private:
  void initialise_params(uint64_t seed);
  keel_tensor describe_tensor(size_t index, float* base) const;
  bool applies_weight_decay(size_t index) const;
  void run_optimizer(size_t first, size_t end, int32_t apply_weight_decay, const keel_strategy_step_args& args);
  void check_layer(int32_t layer, int32_t phase) const;
  void check_range(const char* what, size_t index, int64_t begin, int64_t count, const void* host_ptr) const;
  void copy_to_host(const float* device_base, size_t index, int64_t begin, int64_t count, float* dst_host) const;
  void copy_from_host(float* device_base, size_t index, int64_t begin, int64_t count, const float* src_host);
  float* state_slot(const char* what, int32_t slot) const;
  // Data parallelism (ddp_gradient_sync.cpp; no-ops with one rank).
  void setup_data_parallel(const keel_strategy_create_args& args, const DdpConfig& config);
  void start_accumulation(bool collecting);
  void mark_layer_final(int32_t layer);
  void submit_bucket(size_t bucket);
  void finish_gradient_reduction();

  const keel_host* host_;
  const keel_backend_api* backend_;
  void* backend_obj_;
  const keel_optimizer_api* optimizer_;
  void* optimizer_obj_;
  const keel_param_spec* specs_;  // the model's; outlives the strategy
  keel_support::TpPosition tp_;   // which replicated gradients grad_sq_norm counts
  keel_device device_{};
  keel_optimizer_info optimizer_info_{};
  ParamLayout layout_;
  keel_support::BackendBuffer params_;
  keel_support::BackendBuffer grads_;
  std::vector<keel_support::BackendBuffer> optimizer_state_;  // one per optimizer state slot

  // --- data parallelism; used only when dp_size_ > 1 ---
  int32_t dp_size_ = 1;
  GradientBuckets buckets_;
  std::vector<char> layer_final_;           // this accumulation's last micro-batch released it final
  std::vector<int32_t> bucket_layers_left_; // layers of each bucket not final yet
  std::vector<char> bucket_submitted_;
  bool collecting_ = false;  // inside the last micro-batch: final releases start reductions
  bool reduced_ = false;     // the gradients hold the data-parallel mean of this accumulation
  std::unique_ptr<keel_support::StatusError> reduction_failure_;  // rethrown until the next accumulation
  std::unique_ptr<keel_support::CommWorker> reducer_;  // after grads_: joined before the memory it reduces is freed
};

}  // namespace keel_ddp
