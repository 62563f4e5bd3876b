// The zero strategy: ZeRO stages 1-3 over the data-parallel group, as a sharding policy on the
// parameter store (keel_support/strategy/param_store.hpp) with one shard per dp rank. What each stage
// keeps for the run's whole life:
//   stage 1: full parameters, full gradients, optimizer state for this rank's chunks;
//   stage 2: full parameters, gradient and state chunks (full gradients per layer, transient);
//   stage 3: parameter, gradient and state chunks (full parameters per layer, transient).
// The store lays out, initialises, steps the owned chunks and serves host access; this policy
// reduce_scatters gradients (grad_reduction.hpp), all_gathers parameters after a step (stages
// 1/2) or per layer on acquire (stage 3, param_gather.hpp).
// Methods throw (keel_support::StatusError, keel_support::CalleeFailed); zero_plugin.cpp turns
// that into status codes at the ABI.
#pragma once

#include <keel/strategy.h>

#include <memory>
#include <vector>

#include <keel_support/strategy/param_store.hpp>

#include "dp_group.hpp"
#include "grad_reduction.hpp"
#include "param_gather.hpp"
#include "param_shard.hpp"
#include "zero_config.hpp"

namespace keel_zero {

class ZeroStrategy {
 public:
  // Allocates every persistent buffer and initialises the parameter elements this rank stores
  // through the host, so every layout starts from the single-rank numbers.
  ZeroStrategy(const keel_host* host, const ZeroConfig& config, const keel_strategy_create_args& args);

  static constexpr const char* kSource = "strategy zero";  // prefixes every message
  const keel_host* host() const { return store_.host(); }
  keel_support::ParamStore& store() { return store_; }
  // Below stage 3 the full parameters stay resident; stage 3 gathers them on acquire. (describe
  // counts the store's persistent arrays: gathered layers, per-layer gradients and scratch are transient.)
  int32_t params_resident() const { return config_.stage < 3 ? 1 : 0; }
  // With the dp group's levels: hybrid sharding (shards inside a group, the groups replicas).
  bool dp_levels() const { return levelled_; }

  // keel_param_access, see params.h.
  void acquire(int32_t layer, int32_t phase, keel_tensor* params, keel_tensor* grads, size_t n);
  void release(int32_t layer, int32_t phase, int32_t grads_final);

  void begin_microbatch(int32_t index, int32_t is_last);
  void zero_grads();
  double grad_sq_norm();
  double local_grad_sq_norm();  // strategy.h 0.11: stage 1 (and one rank) only
  void step(const keel_strategy_step_args& args);

  // Host access beyond the store's: reductions settle before a gradient is read, and a
  // written parameter makes a stage 3 prefetched copy stale.
  void write_param(size_t index, int64_t begin, int64_t count, const float* src_host);
  void read_grad(size_t index, int64_t begin, int64_t count, float* dst_host);

 private:
  void* gathered_params(int32_t layer, int32_t phase, bool opens_backward);

  const ZeroConfig config_;
  keel_support::ParamStore store_;
  DataParallelGroup group_;
  GradReduction grads_;
  std::unique_ptr<ParamShard> shard_;    // stage 3 only: where each layer's own chunk comes from
  std::unique_ptr<ParamGather> gather_;  // stage 3 only; after shard_, which it reads
  std::vector<char> counted_in_norm_;    // per parameter: grad_sq_norm counts it on this tp rank
  bool levelled_ = false;                // shards over the inner group, replicated across (hybrid)
};

}  // namespace keel_zero
