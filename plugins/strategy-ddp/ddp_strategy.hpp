// The ddp strategy: the parameter store (keel_support/strategy/param_store.hpp) with everything whole
// and resident, replicated on every data-parallel rank, plus its one policy: with dp_size > 1
// the step's last backward's release(grads_final) hands each completed bucket of layers to the
// communication thread (keel_support::CommWorker) for an all-reduce, and grad_sq_norm/step
// wait for it, so every rank then holds the same averaged gradients.
// Methods throw (keel_support::StatusError, keel_support::CalleeFailed); ddp_plugin.cpp turns
// that into status codes at the ABI.
#pragma once

#include <keel/strategy.h>

#include <memory>
#include <vector>

#include <keel_support/strategy/comm_worker.hpp>
#include <keel_support/strategy/level_all_reduce.hpp>
#include <keel_support/strategy/param_store.hpp>
#include <keel_support/strategy/sum_squares_batch.hpp>

#include "gradient_buckets.hpp"
#include "gradient_compressor.hpp"

namespace keel_ddp {

// The "parallel.strategy" section, parsed by ddp_plugin.cpp: ddp's, or topk's and powersgd's,
// which reduce the same buckets through a compressor (gradient_compressor.hpp).
struct DdpConfig {
  enum class Compression { none, topk, powersgd };
  uint64_t bucket_bytes = 25ull << 20;  // "bucket_mb", MiB
  Compression compression = Compression::none;
  double topk_ratio = 0.01;             // topk "ratio": the share of each bucket sent, (0, 1]
  int32_t powersgd_rank = 4;            // powersgd "rank": the factors' columns, ≥ 1
  // "hierarchical_min_kb": with the dp group's levels (parallel.dp_groups), bucket regions below
  // this go through the flat all-reduce (keel_support/strategy/level_all_reduce.hpp).
  // 16 KiB: on the two-site testbed the two levels won at every bucket size measured, down to 16
  // KiB (benchmarks/multisite.py --crossover; docs/parallelism.md §8).
  uint64_t hierarchical_min_bytes = 16ull << 10;
};

class DdpStrategy {
 public:
  // Allocates every buffer and initialises each parameter piece through the host.
  DdpStrategy(const keel_host* host, const keel_strategy_create_args& args, const DdpConfig& config);

  static constexpr const char* kSource = "strategy ddp";  // prefixes every message
  const keel_host* host() const { return store_.host(); }
  // The compressor's error-feedback arrays (strategy.h own state); none for plain ddp.
  const std::vector<CompressorArray>& own_arrays() const { return own_arrays_; }
  keel_support::ParamStore& store() { return store_; }
  int32_t params_resident() const { return 1; }
  // Every rank keeps the whole model; the gradient read_grad gives is the dp mean only without a
  // compressor (topk and powersgd keep a compressed one and an error-feedback residual).
  // With the dp group's levels: the two-level all-reduce (every rank whole: the groups are replicas).
  bool dp_levels() const { return levels_ != nullptr; }
  uint32_t holds_whole() const {
    return KEEL_STRATEGY_HOLDS_WHOLE_PARAMS | (compressor_ ? 0u : KEEL_STRATEGY_HOLDS_WHOLE_GRADS);
  }

  // keel_param_access, see params.h.
  void acquire(int32_t layer, int32_t phase, keel_tensor* params, keel_tensor* grads, size_t n) const;
  void release(int32_t layer, int32_t phase, int32_t grads_final);

  void begin_microbatch(int32_t index, int32_t is_last);
  void zero_grads();
  double grad_sq_norm();
  // This rank's Σ g² before the reduction (strategy.h 0.11): summed bucket by bucket just before
  // each is sent, so it costs one read of the gradients and no copy.
  double local_grad_sq_norm();
  void step(const keel_strategy_step_args& args);
  void read_grad(size_t index, int64_t begin, int64_t count, float* dst_host);

 private:
  // Data parallelism (ddp_gradient_sync.cpp; no-ops with one rank).
  void setup_data_parallel(const keel_strategy_create_args& args, const DdpConfig& config);
  void start_accumulation();
  void mark_layer_final(int32_t layer);
  void submit_bucket(size_t bucket);
  void finish_gradient_reduction();
  void add_local_sum_squares(const GradientBucket& bucket);

  keel_support::ParamStore store_;

  // --- data parallelism (buckets and reducer only when dp_size_ > 1) and the pipeline's tied sum ---
  int32_t dp_size_ = 1;
  GradientBuckets buckets_;
  std::vector<char> layer_final_;           // this accumulation's last micro-batch released it final
  std::vector<int32_t> bucket_layers_left_; // layers of each bucket not final yet
  std::vector<char> bucket_submitted_;
  std::vector<char> bucket_waits_for_tied_sum_;  // per bucket: holds a STAGE_TIED gradient (pp)
  bool collecting_ = false;  // inside a layer's last backward of the step: final releases start reductions
  bool reduced_ = false;     // the gradients hold the data-parallel mean of this accumulation
  bool tied_summed_ = false; // the STAGE_TIED gradients were summed over the embedding group (pp)
  std::unique_ptr<keel_support::SumSquaresBatch> local_sum_;  // this accumulation's, before reduction
  DataParallelGroup group_;                         // the training thread's view of the dp group (compressors)
  std::unique_ptr<GradientCompressor> compressor_;  // topk, powersgd: the mean is formed after the backward
  std::vector<CompressorArray> own_arrays_;         // the compressor's, named for the strategy's life
  std::unique_ptr<keel_support::StatusError> reduction_failure_;  // rethrown until the next accumulation
  std::unique_ptr<keel_support::LevelAllReduce> levels_;  // the dp group's two levels (parallel.dp_groups); null: flat
  std::unique_ptr<keel_support::CommWorker> reducer_;  // after store_ and levels_: joined before the memory it reduces is freed
};

}  // namespace keel_ddp
