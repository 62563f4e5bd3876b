// ddp across data-parallel ranks: which releases start a bucket's all-reduce, and the wait
// that turns the summed gradients into the mean before anyone reads them (docs/architecture.md §3,
// step 4). Only a step's last backward of a layer (begin_microbatch's is_last) reduces it;
// earlier ones just accumulate. Under pipeline parallelism a STAGE_TIED parameter's gradient is
// first summed over the embedding group (keel_support/strategy/stage_tied_grads.hpp): the buckets that
// hold one wait for that sum, at the first grad_sq_norm or step.
#include <keel/plugin.h>
#include <keel_support/common/abi_guard.hpp>

#include <algorithm>
#include <string>

#include "ddp_strategy.hpp"
#include "powersgd_compressor.hpp"
#include "topk_compressor.hpp"

namespace keel_ddp {

using keel_support::StatusError;

void DdpStrategy::setup_data_parallel(const keel_strategy_create_args& args, const DdpConfig& config) {
  if (args.dp_size < 1 || args.dp_rank < 0 || args.dp_rank >= args.dp_size)
    throw StatusError(KEEL_ERR_INVALID_ARGUMENT, "create: dp_rank " + std::to_string(args.dp_rank) +
                                                     " is outside a data-parallel group of " +
                                                     std::to_string(args.dp_size));
  dp_size_ = args.dp_size;
  if (dp_size_ == 1) {  // one rank: nothing to reduce, no thread
    if (config.compression != DdpConfig::Compression::none)
      store_.host()->log(KEEL_LOG_INFO, "strategy ddp", "one rank: no gradient is sent, so none is compressed");
    return;
  }
  if (!args.dp_comm || !args.dp_comm_obj)
    throw StatusError(KEEL_ERR_INVALID_ARGUMENT, "create: dp_size is " + std::to_string(dp_size_) +
                                                     " but no data-parallel communicator was given");
  if (!KEEL_HAS_SLOT(args.dp_comm, all_reduce) || !KEEL_HAS_SLOT(args.dp_comm, size))
    throw StatusError(KEEL_ERR_UNIMPLEMENTED, "the comm plugin lacks the \"all_reduce\" or \"size\" slot ddp needs");
  int32_t comm_size = 0;
  keel_support::check_callee(args.dp_comm->size(args.dp_comm_obj, &comm_size), "comm size");
  if (comm_size != dp_size_)
    throw StatusError(KEEL_ERR_INVALID_ARGUMENT, "create: dp_size is " + std::to_string(dp_size_) +
                                                     " but the data-parallel communicator has " +
                                                     std::to_string(comm_size) + " ranks");
  if (!KEEL_HAS_SLOT(store_.backend().api, scale))
    throw StatusError(KEEL_ERR_UNIMPLEMENTED, "the backend lacks the \"scale\" slot ddp needs to average gradients");
  buckets_ = plan_gradient_buckets(store_.layout(), config.bucket_bytes);
  group_ = DataParallelGroup{args.dp_comm, args.dp_comm_obj, dp_size_};
  if (config.compression != DdpConfig::Compression::none &&
      (store_.tp().size > 1 || keel_support::pipeline_position(args).size > 1))
    throw StatusError(KEEL_ERR_UNIMPLEMENTED,
                      std::string("create: ") + (config.compression == DdpConfig::Compression::topk ? "topk" : "powersgd") +
                          " compresses each rank's gradients on its own, so the copies of a parameter replicated over "
                          "tensor-parallel ranks or tied across pipeline stages could be sent differently and drift "
                          "apart; it runs at parallel.tp 1 and parallel.pp 1 (found tp " +
                          std::to_string(store_.tp().size) + ", pp " +
                          std::to_string(keel_support::pipeline_position(args).size) + ")");
  const bool levelled = keel_support::LevelAllReduce::given(args);
  if (levelled && config.compression != DdpConfig::Compression::none)
    throw StatusError(KEEL_ERR_UNIMPLEMENTED, "create: parallel.dp_groups splits the data-parallel group in two levels, "
                                              "which the compressing strategies do not use yet; use \"ddp\", or "
                                              "dp_groups \"flat\"");
  if (config.compression == DdpConfig::Compression::topk)
    compressor_ = std::make_unique<TopkCompressor>(config.topk_ratio, store_.grad_elements());
  if (config.compression == DdpConfig::Compression::powersgd)
    compressor_ = std::make_unique<PowerSgdCompressor>(store_, config.powersgd_rank, args.seed);
  if (compressor_) {
    if (!KEEL_HAS_SLOT(args.dp_comm, all_gather))
      throw StatusError(KEEL_ERR_UNIMPLEMENTED, "the comm plugin lacks the \"all_gather\" slot gradient compression needs");
    own_arrays_ = compressor_->own_arrays();
    store_.host()->log(KEEL_LOG_INFO, "strategy ddp", compressor_->describe(store_).c_str());
    // The compressed messages are formed after the backward, on the training thread: no reducer.
    start_accumulation();
    return;
  }
  if (levelled) {
    int64_t largest = 0;
    for (const GradientBucket& bucket : buckets_.buckets)
      for (const keel_support::ElementRange& region : bucket.regions) largest = std::max(largest, region.count());
    levels_ = std::make_unique<keel_support::LevelAllReduce>(args, store_.backend(), largest, config.hierarchical_min_bytes);
    const std::string line = "two-level all-reduce: reduce-scatter inside groups of " +
                             std::to_string(levels_->inner_size()) + " ranks, all-reduce across " +
                             std::to_string(levels_->outer_size()) + " groups, gather inside; regions under " +
                             std::to_string(config.hierarchical_min_bytes >> 10) + " KiB flat";
    store_.host()->log(KEEL_LOG_INFO, kSource, line.c_str());
  }
  for (const GradientBucket& bucket : buckets_.buckets) {
    char waits = 0;
    for (int32_t layer : bucket.layers) waits |= store_.stage_tied().holds_tied(layer) ? 1 : 0;
    bucket_waits_for_tied_sum_.push_back(waits);
  }
  reducer_ = std::make_unique<keel_support::CommWorker>(store_.host(), args.dp_comm, args.dp_comm_obj);
  start_accumulation();
}

// A new accumulation (zero_grads): forget which layers were final and what was reduced.
// begin_microbatch only says whether the next backward's final releases may start reductions;
// it never resets this, since under 1F1B or interleaving one chunk's last backward can precede
// another chunk's earlier ones.
void DdpStrategy::start_accumulation() {
  local_sum_ = std::make_unique<keel_support::SumSquaresBatch>(store_.backend());
  collecting_ = false;
  reduced_ = false;
  tied_summed_ = false;
  reduction_failure_.reset();
  if (!reducer_) return;
  reducer_->wait_idle();  // the gradients must not change under a running all_reduce
  layer_final_.assign(store_.layout().layers.size(), 0);
  bucket_layers_left_.clear();
  for (const GradientBucket& bucket : buckets_.buckets)
    bucket_layers_left_.push_back(static_cast<int32_t>(bucket.layers.size()));
  bucket_submitted_.assign(buckets_.buckets.size(), 0);
}

void DdpStrategy::mark_layer_final(int32_t layer) {
  if (!reducer_ || !collecting_ || layer_final_[size_t(layer)]) return;
  const int32_t bucket = buckets_.bucket_of_layer[size_t(layer)];
  if (bucket < 0) return;  // no parameters, nothing to reduce
  layer_final_[size_t(layer)] = 1;
  // A bucket with a STAGE_TIED gradient waits for its sum over the stages (finish_gradient_reduction).
  if (--bucket_layers_left_[size_t(bucket)] == 0 && !bucket_waits_for_tied_sum_[size_t(bucket)])
    submit_bucket(size_t(bucket));
}

void DdpStrategy::submit_bucket(size_t index) {
  if (bucket_submitted_[index]) return;
  bucket_submitted_[index] = 1;
  const GradientBucket& bucket = buckets_.buckets[index];
  add_local_sum_squares(bucket);
  // The model's backward ops on this bucket (and the local sum's read) must have finished before
  // another thread reads it.
  store_.backend().synchronize();
  const std::string what = "gradient bucket " + std::to_string(index) + " (layers " +
                           std::to_string(bucket.layers.back()) + ".." + std::to_string(bucket.layers.front()) +
                           ", " + std::to_string(bucket.elements) + " elements)";
  for (const keel_support::ElementRange& region : bucket.regions) {
    float* data = store_.grads() + region.begin;
    const size_t count = static_cast<size_t>(region.count());
    reducer_->submit(
        [data, count, levels = levels_.get()](const keel_comm_api* comm, void* comm_obj) {
          if (levels) return levels->all_reduce(comm, comm_obj, data, count);
          return comm->all_reduce(comm_obj, data, data, count, keel_dtype{KEEL_DTYPE_FLOAT, 32, 1}, KEEL_REDUCE_SUM,
                                  nullptr);
        },
        "data-parallel all_reduce of " + what);
  }
}

// Called on the training thread before the gradients are read: starts the buckets that never
// became final (a layer the model did not release final; the same on every rank), waits for
// every all_reduce, and divides by dp_size. The backend is only used here, never from the
// communication thread (backend.h: one thread at a time).
// Under pipeline parallelism the STAGE_TIED gradients are summed over the embedding group
// first, once per step, on this thread (its communicator is not the reducer's).
void DdpStrategy::finish_gradient_reduction() {
  if (reduced_) return;
  if (reduction_failure_) throw *reduction_failure_;
  if (!tied_summed_) {
    store_.stage_tied().sum_over_stages([&](size_t index) { return store_.grad_element(index, 0); });
    tied_summed_ = true;
  }
  if (compressor_) {
    try {
      compressor_->reduce_mean(store_, buckets_, group_);
    } catch (const StatusError& e) {
      reduction_failure_ = std::make_unique<StatusError>(e);
      throw;
    }
    reduced_ = true;
    return;
  }
  if (!reducer_) {
    reduced_ = true;
    return;
  }
  for (size_t b = 0; b < buckets_.buckets.size(); ++b) submit_bucket(b);
  collecting_ = false;
  try {
    reducer_->wait_all();
  } catch (const StatusError& e) {
    reduction_failure_ = std::make_unique<StatusError>(e);  // the gradients are torn: every later read fails too
    throw;
  }
  store_.backend().scale(store_.grads(), 1.0f / static_cast<float>(dp_size_), store_.grad_elements());
  reduced_ = true;
}

// Queues Σ g² of the bucket's counted parameters (counts_in_grad_norm: as grad_sq_norm counts).
void DdpStrategy::add_local_sum_squares(const GradientBucket& bucket) {
  for (int32_t layer : bucket.layers)
    for (size_t index : store_.layout().layers[size_t(layer)].param_indices)
      if (keel_support::counts_in_grad_norm(store_.spec(index), store_.tp()))
        local_sum_->add(store_.grad_element(index, 0), store_.layout().params[index].numel);
}

double DdpStrategy::local_grad_sq_norm() {
  if (!local_sum_) throw StatusError(KEEL_ERR_INVALID_ARGUMENT, "local_grad_sq_norm: no step's gradients yet");
  if (compressor_)
    throw StatusError(KEEL_ERR_UNIMPLEMENTED, "local_grad_sq_norm: the reduced gradient is compressed, so its norm is "
                                              "not the mean gradient's and the noise scale would be biased");
  finish_gradient_reduction();
  // One rank: its own gradients are the mean.
  return dp_size_ == 1 ? store_.counted_grad_sum_squares() : local_sum_->total();
}

void DataParallelGroup::all_reduce_sum(void* data, size_t count, keel_dtype dtype) const {
  if (count == 0) return;
  keel_support::check_callee(comm->all_reduce(comm_obj, data, data, count, dtype, KEEL_REDUCE_SUM, nullptr),
                             "data-parallel all_reduce of compressed gradients");
}

void DataParallelGroup::all_gather(const void* send, void* recv, size_t count, keel_dtype dtype) const {
  if (count == 0) return;
  keel_support::check_callee(comm->all_gather(comm_obj, send, recv, count, dtype, nullptr),
                             "data-parallel all_gather of compressed gradients");
}

}  // namespace keel_ddp
