// The zero strategy's behaviour (see zero_strategy.hpp): per-layer access for the model, the
// reduced gradient norm, and the store's optimizer run over this rank's chunks followed, below
// stage 3, by the all_gather that makes every rank's full parameters equal again.
#include "zero_strategy.hpp"

#include <keel/plugin.h>
#include <keel_support/common/abi_guard.hpp>
#include <keel_support/strategy/level_all_reduce.hpp>
#include <keel_support/strategy/offload_tier.hpp>

#include <algorithm>
#include <cstddef>
#include <string>

namespace keel_zero {
namespace {

using keel_support::StatusError;

// The stages from which parameters and gradients can live in the offload tier (the stages that
// shard them); below, the request is refused at create.
constexpr int32_t kParamsOffloadStage = 3;
constexpr int32_t kGradsOffloadStage = 2;

// The data-parallel fields of the create args; args from before ABI 0.4 mean a single rank,
// and a zero-initialised dp_size with no communicator means one too. With the dp group's levels
// (0.19, parallel.dp_groups) the shards span the inner group (hybrid sharding) and the outer
// group holds the replicas.
bool has_levels(const keel_strategy_create_args& args) { return keel_support::LevelAllReduce::given(args); }

struct DpArgs {
  const keel_comm_api* comm = nullptr;
  void* comm_obj = nullptr;
  int32_t rank = 0;
  int32_t size = 1;
};

DpArgs dp_args(const keel_strategy_create_args& args) {
  DpArgs dp;
  if (args.struct_size < offsetof(keel_strategy_create_args, dp_size) + sizeof(args.dp_size)) return dp;
  if (has_levels(args)) return {args.dp_inner_comm, args.dp_inner_comm_obj, args.dp_inner_rank, args.dp_inner_size};
  dp.comm = args.dp_comm;
  dp.comm_obj = args.dp_comm_obj;
  dp.rank = args.dp_rank;
  dp.size = (!args.dp_comm && args.dp_size == 0) ? 1 : args.dp_size;
  return dp;
}

// Every rank the mean runs over: both levels' (hybrid sharding), else the group's.
int32_t data_parallel_ranks(const keel_strategy_create_args& args) {
  return has_levels(args) ? args.dp_inner_size * args.dp_outer_size : dp_args(args).size;
}

const keel_strategy_create_args& checked_create_args(const keel_strategy_create_args& args, const ZeroConfig& config) {
  const keel_backend_api* backend = args.backend;
  keel_support::check_strategy_tables(args, {{"accumulate", config.stage < 2 || KEEL_HAS_SLOT(backend, accumulate)},
                                             {"scale", data_parallel_ranks(args) <= 1 || KEEL_HAS_SLOT(backend, scale)}});
  return args;
}

// Every stage streams its optimizer state shard; stage 3 also its parameter shard (gathered
// per layer from the tier), stages 2/3 their gradient shard. Stages 1/2 keep full parameters
// resident for the forward and stage 1 full gradients, which the tier cannot stand in for.
uint32_t offload_supported(const ZeroConfig& config, const keel_support::OffloadRequest& offload) {
  const std::string stage = "ZeRO stage " + std::to_string(config.stage);
  if (offload.wants(KEEL_OFFLOAD_PARAMS) && config.stage < kParamsOffloadStage)
    throw StatusError(KEEL_ERR_INVALID_CONFIG,
                      "offload.params: " + stage + " keeps every layer's full parameters resident for the forward "
                      "and all_gathers them after each step; only stage 3 keeps parameter shards that the tier can "
                      "hold (set parallel.strategy.stage to 3, or offload.params to false)");
  if (offload.wants(KEEL_OFFLOAD_GRADIENTS) && config.stage < kGradsOffloadStage)
    throw StatusError(KEEL_ERR_INVALID_CONFIG,
                      "offload.gradients: " + stage + " accumulates into full gradients resident in backend "
                      "memory; stages 2 and 3 reduce each layer into a shard that the tier can hold (set "
                      "parallel.strategy.stage to 2 or 3, or offload.gradients to false)");
  return KEEL_OFFLOAD_OPTIMIZER_STATE | (config.stage >= kParamsOffloadStage ? uint32_t(KEEL_OFFLOAD_PARAMS) : 0u) |
         (config.stage >= kGradsOffloadStage ? uint32_t(KEEL_OFFLOAD_GRADIENTS) : 0u);
}

// One shard per data-parallel rank; stage 3 keeps parameter chunks, stages 2/3 gradient chunks.
keel_support::StoreOptions store_options(const ZeroConfig& config, const keel_strategy_create_args& args) {
  const DpArgs dp = dp_args(args);
  if (dp.size < 1 || dp.rank < 0 || dp.rank >= dp.size)
    throw StatusError(KEEL_ERR_INVALID_ARGUMENT, "create: dp_rank " + std::to_string(dp.rank) +
                                                     " is outside a group of " + std::to_string(dp.size) + " (dp_size)");
  keel_support::StoreOptions options;
  options.shard_rank = dp.rank;
  options.shards = dp.size;
  options.params_sharded = config.stage == 3;
  options.grads_sharded = config.stage >= 2;
  options.sharding_label = "ZeRO stage " + std::to_string(config.stage) + ", ";
  options.offload_supported = offload_supported(config, keel_support::offload_request(args));
  return options;
}

}  // namespace

ZeroStrategy::ZeroStrategy(const keel_host* host, const ZeroConfig& config, const keel_strategy_create_args& args)
    : config_(config),
      store_(host, checked_create_args(args, config), store_options(config, args)),
      group_(dp_args(args).comm, dp_args(args).comm_obj, dp_args(args).rank, dp_args(args).size, store_.backend(),
             std::max<int64_t>(store_.layout().max_chunk, 1)),
      grads_(host, config.stage, config.overlap_comm, store_.layout(), store_.stage_tied(), group_, store_.backend(),
             store_.grads_tier() ? nullptr : store_.grads(), store_.grads_tier()) {
  if (config.stage == 3) {
    shard_ = std::make_unique<ParamShard>(store_.layout(), store_.backend(), store_.backend().device(),
                                          store_.params_tier() ? nullptr : store_.params(), store_.params_tier());
    gather_ = std::make_unique<ParamGather>(store_.layout(), group_, store_.backend(), *shard_);
  }
  if (has_levels(args)) {
    levelled_ = true;
    group_.set_replicas(args.dp_outer_comm, args.dp_outer_comm_obj, args.dp_outer_size);
    const std::string line = "hybrid sharding: ZeRO stage " + std::to_string(config.stage) + " shards over " +
                             std::to_string(group_.size()) + " ranks, replicated across " +
                             std::to_string(group_.replicas()) + " groups";
    host->log(KEEL_LOG_INFO, kSource, line.c_str());
  }
  for (size_t i = 0; i < store_.n_params(); ++i)
    counted_in_norm_.push_back(keel_support::counts_in_grad_norm(store_.spec(i), store_.tp()) ? 1 : 0);
  grads_.measure_local_norm(&counted_in_norm_);
}

// --- model access ---

// Stage 3's gathered layer, at the compute type. It is held once per use, and once more for a
// whole backward pass (from the layer's first backward acquire to its final release), so a
// tied layer used twice in the backward is gathered once.
void* ZeroStrategy::gathered_params(int32_t layer, int32_t phase, bool opens_backward) {
  if (opens_backward) gather_->hold(layer);  // the backward pass's hold
  void* base = gather_->hold(layer);
  // The layer the model acquires next, and the one after: gathered ahead (prefetch), and read
  // ahead from the offload tier (offload.params) so its gather need not wait for the read.
  const int32_t direction = phase == KEEL_PHASE_BACKWARD ? -1 : 1;
  if (config_.prefetch) gather_->prefetch(layer + direction);
  gather_->read_ahead(config_.prefetch ? layer + 2 * direction : layer + direction);
  return base;
}

void ZeroStrategy::acquire(int32_t layer, int32_t phase, keel_tensor* params, keel_tensor* grads, size_t n) {
  store_.check_acquire(layer, phase, params, grads, n);
  const bool backward = phase == KEEL_PHASE_BACKWARD;
  const bool opens_backward = backward && !grads_.is_open(layer);
  // Forward: stages 2/3 keep no full gradient, so requested descriptors come back with data NULL.
  float* grad_base = backward ? grads_.open_layer(layer) : grads_.resident_layer(layer);
  if (config_.stage < 3)
    store_.describe_layer(layer, store_.full_layer(store_.params(), layer), grad_base, params, grads, n);
  else
    store_.describe_layer_at(layer, gathered_params(layer, phase, opens_backward), grad_base, params, grads, n);
}

void ZeroStrategy::release(int32_t layer, int32_t phase, int32_t grads_final) {
  store_.check_layer(layer, phase);
  if (phase == KEEL_PHASE_FORWARD) {
    if (gather_) gather_->drop(layer);
    return;
  }
  if (!grads_.is_open(layer))
    throw StatusError(KEEL_ERR_INVALID_ARGUMENT, "release: layer " + std::to_string(layer) +
                                                     " is not acquired for backward");
  if (gather_) gather_->drop(layer);
  if (!grads_final) return;
  grads_.close_layer(layer);
  if (gather_) gather_->drop(layer);  // the backward pass's hold
}

// Comes right before each backward (0.7); a forward of a later micro-batch may follow it.
void ZeroStrategy::begin_microbatch(int32_t index, int32_t is_last) {
  if (index < 0) throw StatusError(KEEL_ERR_INVALID_ARGUMENT, "begin_microbatch: index is negative");
  (void)is_last;  // every backward reduces at its final releases (stage 2/3, but for the layers
                  // waiting for the STAGE_TIED sum) or none does (stage 1)
}

// --- gradients and the optimizer ---

void ZeroStrategy::zero_grads() { grads_.zero(); }

// Stage 1 holds this rank's full gradients until the reduction; stages 2/3 reduce each layer as
// its backward finishes (a one-rank group's own gradients are the mean).
double ZeroStrategy::local_grad_sq_norm() {
  grads_.finish_reduction();
  if (group_.total_size() == 1) return grads_.local_sum_squares(counted_in_norm_);
  const double local = grads_.local_before_reduction();
  if (local != local)
    throw StatusError(KEEL_ERR_UNIMPLEMENTED, "local_grad_sq_norm: ZeRO stage " + std::to_string(config_.stage) +
                                                  " reduces each layer's gradients as its backward finishes, so this "
                                                  "rank's whole-step gradient is never held (stage 1 and ddp report it)");
  return local;
}

double ZeroStrategy::grad_sq_norm() {
  grads_.finish_reduction();
  // Every rank of the dp group has the same tp rank, so each leaves out the same parameters.
  return group_.sum_over_ranks(grads_.local_sum_squares(counted_in_norm_));
}

void ZeroStrategy::step(const keel_strategy_step_args& args) {
  keel_support::ParamStore::check_step(args);
  grads_.finish_reduction();
  const keel_support::StoreLayout& layout = store_.layout();
  if (gather_) {
    for (size_t l = 0; l < layout.layers.size(); ++l)
      if (gather_->holds(int32_t(l)) > 0)
        throw StatusError(KEEL_ERR_INVALID_ARGUMENT, "step: layer " + std::to_string(l) +
                                                         " is still acquired; release every layer first");
    gather_->drop_all();  // the shard is about to change: no gathered copy may outlive it
  }
  store_.step_owned(args);
  if (config_.stage < 3)
    for (size_t l = 0; l < layout.layers.size(); ++l)
      group_.all_gather_in_place(store_.full_layer(store_.params(), int32_t(l)), layout.layers[l].chunk);
}

// --- host access ---

void ZeroStrategy::write_param(size_t index, int64_t begin, int64_t count, const float* src_host) {
  store_.write_param(index, begin, count, src_host);
  // A prefetched copy is stale now; every rank forgets it, owner of the written part or not (the
  // core calls every rank, with no elements where a rank owns none), so their next gathers agree.
  if (gather_) gather_->forget_unheld(store_.layout().params[index].layer);
}

// Stage 1: the full local buffer (this rank's own gradients; after the reduction its owned
// part holds the mean). Stages 2/3: the owned part, the mean over ranks reduced so far.
void ZeroStrategy::read_grad(size_t index, int64_t begin, int64_t count, float* dst_host) {
  if (index < store_.n_params()) grads_.settle();
  store_.read_grad(index, begin, count, dst_host);
}

}  // namespace keel_zero
