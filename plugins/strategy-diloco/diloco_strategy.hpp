// The local-SGD family. DiLoCo (Douillard et al., 2023): every data-parallel rank takes
// `sync_every` inner optimizer steps (the run's optimizer, AdamW in the paper) on its own data
// with no communication; then the ranks average their parameters, and the difference between the
// parameters the interval started from and that average, the pseudo-gradient, goes through an
// outer optimizer (SGD or Nesterov momentum) whose result every rank starts the next interval
// from. One all-reduce of the parameters per interval replaces one of the gradients per step.
// EDiT (Cheng et al., 2024) syncs the same way but layer by layer, each layer when the next
// forward first acquires it (so one layer's buffers at a time, and the exchange of one layer can
// meet the compute of the previous), and damps replicas through its pseudo-gradient penalty
// (pseudo_gradient_penalty.hpp, then a clip of the averaged pseudo-gradient's norm).
// Layout, init, the model's views, the inner optimizer and checkpoint I/O are the parameter
// store's (keel_support/strategy/param_store.hpp); this is the algorithm and its per-rank own state.
#pragma once

#include <keel/strategy.h>

#include <keel_support/common/backend_buffer.hpp>
#include <keel_support/strategy/level_all_reduce.hpp>
#include <keel_support/strategy/param_store.hpp>

#include "pseudo_gradient_penalty.hpp"

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace keel_diloco {

// The "parallel.strategy" section (diloco_plugin.cpp parses it).
struct Config {
  int64_t sync_every = 50;        // inner steps per interval, ≥ 1 (the paper: 500)
  bool nesterov = true;           // "outer_optimizer": "nesterov" (the paper's) or "sgd"
  double outer_lr = 0.7;          // the paper's
  double outer_momentum = 0.9;    // in [0, 1); 0 with "sgd" is plain averaging at outer_lr 1
  bool edit = false;              // the "edit" plugin: layer-wise syncs with the penalty below
  PenaltyOptions penalty;         // edit: "anomaly_z" (3; 0 off), "weighted_average" (true)
  double clip_norm = 0;           // edit: "clip_norm", the averaged pseudo-gradient's per-layer norm bound (0 off)
  // edit: "sync_seconds" > 0 is A-EDiT: an interval ends once a replica has trained that long
  // (each after its own number of steps; strategy.h independent_replicas). Its training time
  // is the clock's, from zero_grads to the end of step less the layer syncs, or with
  // "simulated_step_seconds" a fixed time a step per dp rank.
  double sync_seconds = 0;
  std::vector<double> simulated_step_seconds;
};
Config parse_config(const char* config_json, const char* json_path, bool edit);

class Diloco {
 public:
  Diloco(const keel_host* host, const keel_strategy_create_args& args, Config config);

  static constexpr const char* kSource = "strategy diloco";  // also edit's (the same class)
  const keel_host* host() const { return store_.host(); }
  keel_support::ParamStore& store() { return store_; }
  int32_t params_resident() const { return 1; }
  // Each replica keeps a whole model and reads its own last gradient (describe, ABI 0.19; with the
  // dp group's levels, after a step its group's mean).
  uint32_t holds_whole() const { return KEEL_STRATEGY_HOLDS_WHOLE_PARAMS | KEEL_STRATEGY_HOLDS_WHOLE_GRADS; }
  // With the dp group's levels: each group one worker, averaging inside every step (describe, 0.19).
  bool dp_levels() const { return levels_ != nullptr; }

  void acquire(int32_t layer, int32_t phase, keel_tensor* params, keel_tensor* grads, size_t n);
  void release(int32_t layer, int32_t phase, int32_t grads_final) const;
  void begin_microbatch(int32_t index, int32_t is_last) const;
  void zero_grads();
  double grad_sq_norm();
  void step(const keel_strategy_step_args& args);
  // A-EDiT (strategy.h 0.14): replicas step on their own between syncs; sync_reached, asked
  // after every step (a skipped one too), counts the step's time and closes the interval.
  bool independent_replicas() const { return config_.sync_seconds > 0; }
  bool sync_reached();

  // Own state: between syncs every rank's parameters and inner state differ, and the interval's
  // starting point and the outer momentum are the algorithm's own, so a checkpoint keeps them
  // all per rank and a resume at the same size continues mid-interval exactly. Arrays:
  // "params", "optimizer_state.<k>", "diloco.start", "diloco.outer_momentum"; edit adds
  // "edit.pending" (per layer: 1 while its sync waits for the next forward) and
  // "edit.norm_statistics" (per layer: mean, variance, syncs).
  int32_t own_state_count() const { return int32_t(own_state_names_.size()); }
  const std::string& own_state_name(int32_t index) const;
  int64_t own_state_elements(int32_t index) const;
  void read_own_state(int32_t index, float* dst_host);
  void write_own_state(int32_t index, const float* src_host);

 private:
  void remember_start();
  void outer_step();
  void average_gradients_in_group();
  // edit (edit_sync.cpp): the penalised, weighted pseudo-gradient of one layer, its outer step.
  void sync_layer(int32_t layer);
  void sync_pending_layers();
  // The outer optimizer on elements [begin, end) with the pseudo-gradient `delta` (begin-based).
  void outer_update(int64_t begin, int64_t end, const float* delta);

  keel_support::ParamStore store_;
  const keel_comm_api* dp_comm_;
  void* dp_comm_obj_;
  int32_t dp_size_;
  int32_t dp_rank_;
  Config config_;
  keel_support::BackendBuffer norm_scalar_;  // one double: grad_sq_norm's all_reduce
  std::unique_ptr<keel_support::LevelAllReduce> levels_;  // parallel.dp_groups: each group one worker
  bool grads_averaged_ = false;                           // this step's gradients are the group's mean
  bool started_ = false;                     // start_ holds the interval's starting parameters
  std::vector<float> start_;                 // the parameters every rank began the interval from
  std::vector<float> momentum_;              // the outer optimizer's buffer
  std::vector<std::string> own_state_names_;
  std::vector<char> pending_;                // edit: per layer
  std::vector<NormStatistics> statistics_;   // edit: per layer
  // A-EDiT: this replica's training time in the open interval, and the current step's clocks.
  double interval_seconds_ = 0;
  std::chrono::steady_clock::time_point step_started_;
  double sync_seconds_in_step_ = 0;
  void close_interval();  // the outer step, or (edit) every layer's sync marked for the next forward
};

}  // namespace keel_diloco
