// Local SGD (Stich 2019; the family of DiLoCo and EDiT): every data-parallel rank keeps whole
// parameters, gradients and optimizer state, steps on its own data with its own gradients — no
// gradient is communicated — and every `sync_every` optimizer steps the ranks average their
// parameters (all_reduce sum × 1/dp_size). It trades a little convergence per step for
// communication every k steps instead of every step. Methods throw keel_support errors;
// localsgd_plugin.cpp turns them into status codes at the ABI.
#pragma once

#include <keel/strategy.h>

#include <keel_support/backend_buffer.hpp>
#include <keel_support/tp_pieces.hpp>

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
  // Allocates one flat buffer per kind (parameters, gradients, each optimizer state slot) and
  // fills the parameters with host->init_param.
  LocalSgd(const keel_host* host, const keel_strategy_create_args& args, Config config);

  const keel_host* host() const { return host_; }

  // keel_param_access (params.h): views into the resident flat buffers.
  void acquire(int32_t layer, int32_t phase, keel_tensor* params, keel_tensor* grads, size_t n) const;
  void release(int32_t layer, int32_t phase, int32_t grads_final) const;

  void begin_microbatch(int32_t index, int32_t is_last) const;
  void zero_grads();
  double grad_sq_norm();
  void step(const keel_strategy_step_args& args);

  // kind -1: parameters, kind k ≥ 0: optimizer state slot k (strategy.h's owned_range).
  void read(int32_t kind, size_t index, int64_t begin, int64_t count, float* dst_host) const;
  void write(int32_t kind, size_t index, int64_t begin, int64_t count, const float* src_host);
  void read_grad(size_t index, int64_t begin, int64_t count, float* dst_host) const;
  void owned_range(int32_t kind, size_t index, int64_t* begin, int64_t* end) const;
  void describe(keel_strategy_info* out) const;

  // Own state (strategy.h, 0.5): between syncs every rank's parameters and optimizer state
  // differ, while a checkpoint's replicated tensors are rank 0's. Array 0 is this rank's whole
  // parameter buffer, array 1 + k its optimizer state slot k, so a resume at the same size
  // continues every rank exactly where it was.
  int32_t own_state_count() const { return int32_t(1 + state_.size()); }
  const std::string& own_state_name(int32_t index) const;
  int64_t own_state_elements() const { return total_; }
  void read_own_state(int32_t index, float* dst_host) const;
  void write_own_state(int32_t index, const float* src_host);

 private:
  void check_layer(int32_t layer, int32_t phase) const;
  void average_params_across_ranks();
  void run_optimizer(size_t first, size_t end, bool weight_decay, const keel_strategy_step_args& args);
  float* buffer_of(int32_t kind) const;
  void check_range(size_t index, int64_t begin, int64_t count, const void* host_ptr) const;
  keel_tensor view(float* base, size_t index) const;

  const keel_host* host_;
  const keel_backend_api* backend_;
  void* backend_obj_;
  const keel_optimizer_api* optimizer_;
  void* optimizer_obj_;
  const keel_comm_api* dp_comm_;  // NULL: a single rank, plain local training
  void* dp_comm_obj_;
  int32_t dp_size_;
  Config config_;
  const keel_param_spec* specs_;  // the model's; outlives the strategy
  keel_support::TpPosition tp_;   // which replicated gradients grad_sq_norm counts
  keel_device device_{};
  keel_optimizer_info optimizer_info_{};

  // Layout: parameter i occupies [offset_[i], offset_[i] + numel_[i]) of every flat buffer.
  std::vector<int64_t> offset_, numel_;
  std::vector<std::vector<size_t>> layer_params_;  // per layer, its parameter indices in spec order
  int64_t total_ = 0;

  keel_support::BackendBuffer params_, grads_;
  std::vector<keel_support::BackendBuffer> state_;  // one per optimizer state slot
  keel_support::BackendBuffer norm_scalar_;         // one double: grad_sq_norm's all_reduce
  std::vector<std::string> own_state_names_;        // "params", "optimizer_state.0", ...
};

}  // namespace localsgd
