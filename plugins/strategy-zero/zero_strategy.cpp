// The zero strategy's behaviour (see zero_strategy.hpp): per-layer access for the model,
// the reduced gradient norm, and the optimizer run over this rank's chunks followed, below
// stage 3, by the all_gather that makes every rank's full parameters equal again.
#include "zero_strategy.hpp"

#include <keel/plugin.h>
#include <keel_support/abi_guard.hpp>
#include <keel_support/sized_output.hpp>
#include <keel_support/tp_pieces.hpp>

#include <algorithm>
#include <cstddef>
#include <string>

namespace keel_zero {
namespace {

using keel_support::StatusError;

constexpr keel_dtype kFloat32 = {KEEL_DTYPE_FLOAT, 32, 1};

// The data-parallel fields of the create args; args from before ABI 0.4 mean a single rank,
// and a zero-initialised dp_size with no communicator means one too.
struct DpArgs {
  const keel_comm_api* comm = nullptr;
  void* comm_obj = nullptr;
  int32_t rank = 0;
  int32_t size = 1;
};

DpArgs dp_args(const keel_strategy_create_args& args) {
  DpArgs dp;
  if (args.struct_size < offsetof(keel_strategy_create_args, dp_size) + sizeof(args.dp_size)) return dp;
  dp.comm = args.dp_comm;
  dp.comm_obj = args.dp_comm_obj;
  dp.rank = args.dp_rank;
  dp.size = (!args.dp_comm && args.dp_size == 0) ? 1 : args.dp_size;
  return dp;
}

const keel_strategy_create_args& checked_create_args(const keel_strategy_create_args& args, const ZeroConfig& config) {
  if (args.struct_size < offsetof(keel_strategy_create_args, dp_comm))
    throw StatusError(KEEL_ERR_INVALID_ARGUMENT, "create: args is older than this plugin's ABI");
  const keel_backend_api* backend = args.backend;
  if (!backend) throw StatusError(KEEL_ERR_INVALID_ARGUMENT, "create: backend is NULL");
  const bool needs_accumulate = config.stage >= 2, needs_scale = dp_args(args).size > 1;
  const char* missing = !KEEL_HAS_SLOT(backend, device)                          ? "device"
                        : !KEEL_HAS_SLOT(backend, alloc)                         ? "alloc"
                        : !KEEL_HAS_SLOT(backend, free_memory)                   ? "free_memory"
                        : !KEEL_HAS_SLOT(backend, copy)                          ? "copy"
                        : !KEEL_HAS_SLOT(backend, fill_zero)                     ? "fill_zero"
                        : !KEEL_HAS_SLOT(backend, sum_squares)                   ? "sum_squares"
                        : needs_accumulate && !KEEL_HAS_SLOT(backend, accumulate) ? "accumulate"
                        : needs_scale && !KEEL_HAS_SLOT(backend, scale)          ? "scale"
                                                                                 : nullptr;
  if (missing) throw StatusError(KEEL_ERR_UNIMPLEMENTED, std::string("the backend lacks the \"") + missing +
                                                             "\" slot this strategy needs");
  if (!args.optimizer) throw StatusError(KEEL_ERR_INVALID_ARGUMENT, "create: optimizer is NULL");
  if (!KEEL_HAS_SLOT(args.optimizer, describe) || !KEEL_HAS_SLOT(args.optimizer, step))
    throw StatusError(KEEL_ERR_UNIMPLEMENTED, "the optimizer lacks the \"describe\" or \"step\" slot");
  return args;
}

}  // namespace

ZeroStrategy::ZeroStrategy(const keel_host* host, const ZeroConfig& config, const keel_strategy_create_args& args)
    : host_(host),
      config_(config),
      backend_{checked_create_args(args, config).backend, args.backend_obj},
      optimizer_(args.optimizer),
      optimizer_obj_(args.optimizer_obj),
      specs_(args.params),
      layout_(build_shard_layout(args.params, args.n_params, args.n_layers, dp_args(args).rank,
                                 std::max(dp_args(args).size, 1))),
      group_(dp_args(args).comm, dp_args(args).comm_obj, dp_args(args).rank, dp_args(args).size, backend_,
             std::max<int64_t>(layout_.max_chunk, 1)),
      params_(backend_.alloc_floats(config.stage < 3 ? layout_.full_elements : layout_.shard_elements)),
      grads_(host, config.stage, config.overlap_comm, layout_, group_, backend_) {
  keel_support::check_callee(backend_.api->device(backend_.obj, &device_), "backend device");
  optimizer_info_.struct_size = sizeof(optimizer_info_);
  keel_support::check_callee(optimizer_->describe(optimizer_obj_, &optimizer_info_), "optimizer describe");
  if (optimizer_info_.n_state_slots < 0 || optimizer_info_.n_state_slots > KEEL_OPTIMIZER_MAX_STATE_SLOTS)
    throw StatusError(KEEL_ERR_INVALID_ARGUMENT, "the optimizer asks for " +
                                                     std::to_string(optimizer_info_.n_state_slots) +
                                                     " state slots; at most " +
                                                     std::to_string(KEEL_OPTIMIZER_MAX_STATE_SLOTS) + " are allowed");
  for (int32_t slot = 0; slot < optimizer_info_.n_state_slots; ++slot)
    optimizer_state_.push_back(backend_.alloc_floats(layout_.shard_elements));  // zero: "first step" state
  if (config.stage == 3) gather_ = std::make_unique<ParamGather>(layout_, group_, backend_, params_.floats());
  const keel_support::TpPosition tp = keel_support::tp_position(args);
  for (size_t i = 0; i < layout_.params.size(); ++i)
    counted_in_norm_.push_back(keel_support::counts_in_grad_norm(specs_[i], tp) ? 1 : 0);
  initialise_params(args.seed);
}

void ZeroStrategy::initialise_params(uint64_t seed) {
  std::vector<float> staging;
  for (size_t i = 0; i < layout_.params.size(); ++i) {
    // Below stage 3 every rank stores the whole tensor; in stage 3 only its owned part.
    const ElementRange stored = config_.stage < 3 ? ElementRange{0, layout_.params[i].numel} : layout_.owned_part(i);
    if (stored.empty()) continue;
    staging.resize(size_t(stored.count()));
    keel_support::init_piece_elements(host_, specs_[i], i, seed, stored.begin, stored.count(), staging.data());
    backend_.copy(param_element(i, stored.begin), staging.data(), stored.count(), KEEL_COPY_HOST_TO_DEVICE);
  }
}

float* ZeroStrategy::param_element(size_t index, int64_t begin) const {
  const int64_t position =
      config_.stage < 3 ? layout_.full_position(index, begin) : layout_.shard_position(index, begin);
  return params_.floats() + position;
}

// --- model access ---

void ZeroStrategy::check_layer(int32_t layer, int32_t phase) const {
  if (layer < 0 || size_t(layer) >= layout_.layers.size())
    throw StatusError(KEEL_ERR_INVALID_ARGUMENT, "layer " + std::to_string(layer) + " is outside [0, " +
                                                     std::to_string(layout_.layers.size()) + ")");
  if (phase != KEEL_PHASE_FORWARD && phase != KEEL_PHASE_BACKWARD)
    throw StatusError(KEEL_ERR_INVALID_ARGUMENT, "phase " + std::to_string(phase) + " is neither forward (" +
                                                     std::to_string(KEEL_PHASE_FORWARD) + ") nor backward (" +
                                                     std::to_string(KEEL_PHASE_BACKWARD) + ")");
}

keel_tensor ZeroStrategy::describe_tensor(size_t index, float* layer_base) const {
  const keel_param_spec& spec = specs_[index];
  keel_tensor tensor{};
  tensor.data = layer_base ? layer_base + layout_.params[index].offset_in_layer : nullptr;
  tensor.device = device_;
  tensor.ndim = spec.ndim;
  tensor.dtype = kFloat32;
  for (int32_t d = 0; d < spec.ndim; ++d) tensor.shape[d] = spec.local_shape[d];
  return tensor;
}

// The layer's full parameters. Stage 3 holds the gathered layer once per use, and once more
// for a whole backward pass (from the layer's first backward acquire to its final release),
// so a tied layer used twice in the backward is gathered once.
float* ZeroStrategy::acquire_params(int32_t layer, int32_t phase, bool opens_backward) {
  if (config_.stage < 3) return params_.floats() + layout_.layers[size_t(layer)].full_offset;
  if (opens_backward) gather_->hold(layer);  // the backward pass's hold
  float* base = gather_->hold(layer);
  if (config_.prefetch) gather_->prefetch(phase == KEEL_PHASE_BACKWARD ? layer - 1 : layer + 1);
  return base;
}

void ZeroStrategy::acquire(int32_t layer, int32_t phase, keel_tensor* params, keel_tensor* grads, size_t n) {
  check_layer(layer, phase);
  const LayerShards& shards = layout_.layers[size_t(layer)];
  if (n != shards.param_indices.size())
    throw StatusError(KEEL_ERR_INVALID_ARGUMENT, "acquire: layer " + std::to_string(layer) + " has " +
                                                     std::to_string(shards.param_indices.size()) +
                                                     " parameters, the caller asked for " + std::to_string(n));
  if (n > 0 && !params) throw StatusError(KEEL_ERR_INVALID_ARGUMENT, "acquire: params is NULL");
  const bool backward = phase == KEEL_PHASE_BACKWARD;
  if (n > 0 && !grads && backward)
    throw StatusError(KEEL_ERR_INVALID_ARGUMENT, "acquire: grads is NULL in the backward phase");
  const bool opens_backward = backward && !grads_.is_open(layer);
  // Forward: stages 2/3 keep no full gradient, so requested descriptors come back with data NULL.
  float* grad_base = backward ? grads_.open_layer(layer) : grads_.resident_layer(layer);
  float* param_base = acquire_params(layer, phase, opens_backward);
  for (size_t k = 0; k < n; ++k) {
    params[k] = describe_tensor(shards.param_indices[k], param_base);
    if (grads) grads[k] = describe_tensor(shards.param_indices[k], grad_base);
  }
}

void ZeroStrategy::release(int32_t layer, int32_t phase, int32_t grads_final) {
  check_layer(layer, phase);
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

void ZeroStrategy::begin_microbatch(int32_t index, int32_t is_last) {
  if (index < 0) throw StatusError(KEEL_ERR_INVALID_ARGUMENT, "begin_microbatch: index is negative");
  (void)is_last;  // every micro-batch reduces at its final releases (stage 2/3) or none does (stage 1)
}

// --- gradients and the optimizer ---

void ZeroStrategy::zero_grads() { grads_.zero(); }

double ZeroStrategy::grad_sq_norm() {
  grads_.finish_reduction();
  // Every rank of the dp group has the same tp rank, so each leaves out the same parameters.
  return group_.sum_over_ranks(grads_.local_sum_squares(counted_in_norm_));
}

bool ZeroStrategy::applies_weight_decay(size_t index) const {
  return (specs_[index].flags & optimizer_info_.decay_flags) == 0;
}

float* ZeroStrategy::owned_param_chunk(int32_t layer) const {
  const LayerShards& shards = layout_.layers[size_t(layer)];
  if (config_.stage == 3) return params_.floats() + shards.shard_offset;
  return params_.floats() + shards.full_offset + layout_.owned_chunk(layer).begin;
}

void ZeroStrategy::step(const keel_strategy_step_args& args) {
  if (args.step < 1)
    throw StatusError(KEEL_ERR_INVALID_ARGUMENT, "step: step is 1-based, found " + std::to_string(args.step));
  grads_.finish_reduction();
  if (gather_) {
    for (size_t l = 0; l < layout_.layers.size(); ++l)
      if (gather_->holds(int32_t(l)) > 0)
        throw StatusError(KEEL_ERR_INVALID_ARGUMENT, "step: layer " + std::to_string(l) +
                                                         " is still acquired; release every layer first");
    gather_->drop_all();  // the shard is about to change: no gathered copy may outlive it
  }
  for (size_t l = 0; l < layout_.layers.size(); ++l) step_owned_chunk(int32_t(l), args);
  if (config_.stage < 3)
    for (size_t l = 0; l < layout_.layers.size(); ++l)
      group_.all_gather_in_place(params_.floats() + layout_.layers[l].full_offset, layout_.layers[l].chunk);
}

// One optimizer call per maximal run of the chunk's parameter elements that agree on weight
// decay. A chunk may start or end inside a parameter; its padding is never handed over.
void ZeroStrategy::step_owned_chunk(int32_t layer, const keel_strategy_step_args& args) {
  ElementRange run;
  int32_t run_decay = -1;
  for (size_t index : layout_.layers[size_t(layer)].param_indices) {
    const ElementRange part = layout_.owned_part(index);
    if (part.empty()) continue;
    const int64_t offset = layout_.params[index].offset_in_layer;
    const ElementRange in_layer{offset + part.begin, offset + part.end};
    const int32_t decay = applies_weight_decay(index) ? 1 : 0;
    if (decay == run_decay && run.end == in_layer.begin) {
      run.end = in_layer.end;
      continue;
    }
    if (!run.empty()) run_optimizer(layer, run, run_decay, args);
    run = in_layer;
    run_decay = decay;
  }
  if (!run.empty()) run_optimizer(layer, run, run_decay, args);
}

void ZeroStrategy::run_optimizer(int32_t layer, ElementRange run, int32_t apply_weight_decay,
                                 const keel_strategy_step_args& args) {
  const int64_t in_chunk = run.begin - layout_.owned_chunk(layer).begin;
  const int64_t in_shard = layout_.layers[size_t(layer)].shard_offset + in_chunk;
  float* state[KEEL_OPTIMIZER_MAX_STATE_SLOTS] = {};
  for (size_t slot = 0; slot < optimizer_state_.size(); ++slot) state[slot] = optimizer_state_[slot].floats() + in_shard;
  keel_optimizer_step_args step_args{};
  step_args.struct_size = sizeof(step_args);
  step_args.device = device_;
  step_args.params = owned_param_chunk(layer) + in_chunk;
  step_args.grads = grads_.owned_chunk(layer) + in_chunk;
  step_args.state = state;
  step_args.n = run.count();
  step_args.lr = args.lr;
  step_args.grad_scale = args.grad_scale;
  step_args.step = args.step;
  step_args.apply_weight_decay = apply_weight_decay;
  keel_support::check_callee(optimizer_->step(optimizer_obj_, &step_args), "optimizer step");
}

void ZeroStrategy::describe(keel_strategy_info* out) const {
  keel_strategy_info info{};
  info.struct_size = sizeof(info);
  info.params_resident = config_.stage < 3 ? 1 : 0;
  info.param_bytes = params_.bytes();
  info.grad_bytes = uint64_t(grads_.persistent_elements()) * sizeof(float);
  for (const auto& slot : optimizer_state_) info.state_bytes += slot.bytes();
  // The per-layer gather and gradient buffers and the staging scratch are transient: not counted.
  keel_support::write_sized_output(out, info, sizeof info, "describe: out");
}

}  // namespace keel_zero
