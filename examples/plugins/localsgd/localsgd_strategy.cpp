// The local SGD strategy's behaviour (see localsgd_strategy.hpp): resident flat buffers handed
// to the model layer by layer, the optimizer run on this rank's own gradients, and the periodic
// parameter average — the only communication there is.
#include "localsgd_strategy.hpp"

#include <keel/plugin.h>
#include <keel_support/abi_guard.hpp>
#include <keel_support/sized_output.hpp>
#include <keel_support/tp_pieces.hpp>

#include <algorithm>
#include <string>

namespace localsgd {
namespace {

using keel_support::check_callee;
using keel_support::StatusError;

constexpr keel_dtype kFloat32 = {KEEL_DTYPE_FLOAT, 32, 1};
constexpr keel_dtype kFloat64 = {KEEL_DTYPE_FLOAT, 64, 1};

[[noreturn]] void invalid(const std::string& message) { throw StatusError(KEEL_ERR_INVALID_ARGUMENT, message); }

std::string name_of(const keel_param_spec& spec) { return spec.name ? spec.name : "<unnamed>"; }

// The slots this strategy calls, checked once so a short table fails at create with a message
// rather than at the first step with a crash.
void check_tables(const keel_strategy_create_args& args) {
  if (args.struct_size < offsetof(keel_strategy_create_args, dp_size) + sizeof(args.dp_size))
    invalid("create: args are older than ABI 0.4");
  const keel_backend_api* b = args.backend;
  if (!KEEL_HAS_SLOT(b, device) || !KEEL_HAS_SLOT(b, alloc) || !KEEL_HAS_SLOT(b, free_memory) ||
      !KEEL_HAS_SLOT(b, copy) || !KEEL_HAS_SLOT(b, fill_zero) || !KEEL_HAS_SLOT(b, scale) ||
      !KEEL_HAS_SLOT(b, sum_squares))
    throw StatusError(KEEL_ERR_UNIMPLEMENTED, "the backend lacks a slot this strategy needs "
                                              "(device, alloc, free_memory, copy, fill_zero, scale, sum_squares)");
  if (!KEEL_HAS_SLOT(args.optimizer, describe) || !KEEL_HAS_SLOT(args.optimizer, step))
    throw StatusError(KEEL_ERR_UNIMPLEMENTED, "the optimizer lacks the describe or step slot");
  if (args.dp_comm && !KEEL_HAS_SLOT(args.dp_comm, all_reduce))
    throw StatusError(KEEL_ERR_UNIMPLEMENTED, "the data-parallel communicator lacks all_reduce");
  if (args.dp_comm && (args.dp_size < 1 || args.dp_rank < 0 || args.dp_rank >= args.dp_size))
    invalid("create: dp_rank " + std::to_string(args.dp_rank) + " is outside dp_size " + std::to_string(args.dp_size));
}

}  // namespace

LocalSgd::LocalSgd(const keel_host* host, const keel_strategy_create_args& args, Config config)
    : host_(host),
      backend_((check_tables(args), args.backend)),  // the tables are checked before any member uses them
      backend_obj_(args.backend_obj),
      optimizer_(args.optimizer),
      optimizer_obj_(args.optimizer_obj),
      dp_comm_(args.dp_comm),
      dp_comm_obj_(args.dp_comm_obj),
      dp_size_(args.dp_comm ? args.dp_size : 1),
      config_(config),
      specs_(args.params),
      tp_(keel_support::tp_position(args)),
      layer_params_(static_cast<size_t>(std::max(args.n_layers, 0))) {
  check_callee(backend_->device(backend_obj_, &device_), "backend device");
  optimizer_info_.struct_size = sizeof(optimizer_info_);
  check_callee(optimizer_->describe(optimizer_obj_, &optimizer_info_), "optimizer describe");
  if (optimizer_info_.n_state_slots < 0 || optimizer_info_.n_state_slots > KEEL_OPTIMIZER_MAX_STATE_SLOTS)
    invalid("the optimizer asks for " + std::to_string(optimizer_info_.n_state_slots) + " state slots");

  // Layout: the model's parameters back to back, in spec order, no padding.
  for (size_t i = 0; i < args.n_params; ++i) {
    const keel_param_spec& spec = specs_[i];
    const int64_t numel = keel_support::checked_piece_numel(spec, i);  // this rank's tp piece
    if (spec.layer < 0 || spec.layer >= args.n_layers)
      invalid(name_of(spec) + ": layer " + std::to_string(spec.layer) + " is outside [0, n_layers)");
    offset_.push_back(total_);
    numel_.push_back(numel);
    layer_params_[size_t(spec.layer)].push_back(i);
    total_ += numel;
  }

  const size_t bytes = size_t(total_) * sizeof(float);
  params_ = keel_support::BackendBuffer(backend_, backend_obj_, bytes);
  grads_ = keel_support::BackendBuffer(backend_, backend_obj_, bytes);
  for (int32_t slot = 0; slot < optimizer_info_.n_state_slots; ++slot)
    state_.emplace_back(backend_, backend_obj_, bytes);  // zero-filled: the optimizer's "first step" state
  norm_scalar_ = keel_support::BackendBuffer(backend_, backend_obj_, sizeof(double));
  own_state_names_.push_back("params");
  for (size_t slot = 0; slot < state_.size(); ++slot) own_state_names_.push_back("optimizer_state." + std::to_string(slot));

  // Every rank initialises from the same seed, so the replicas start identical without a broadcast.
  std::vector<float> staging;
  for (size_t i = 0; i < numel_.size(); ++i) {
    if (numel_[i] == 0) continue;
    staging.resize(size_t(numel_[i]));
    keel_support::init_piece_elements(host_, specs_[i], i, args.seed, 0, numel_[i], staging.data());
    check_callee(backend_->copy(backend_obj_, params_.floats() + offset_[i], staging.data(),
                                size_t(numel_[i]) * sizeof(float), KEEL_COPY_HOST_TO_DEVICE), "backend copy");
  }
  if (dp_size_ > 1)
    keel_logf(host_, KEEL_LOG_INFO, "strategy localsgd", "%d ranks, parameters averaged every %lld optimizer steps",
              int(dp_size_), (long long)config_.sync_every);
  else
    host_->log(KEEL_LOG_INFO, "strategy localsgd", "one rank: plain local training, nothing to average");
}

// --- the model's access: resident memory, nothing moves ---

keel_tensor LocalSgd::view(float* base, size_t index) const {
  const keel_param_spec& spec = specs_[index];
  keel_tensor t{};
  t.data = base + offset_[index];
  t.device = device_;
  t.ndim = spec.ndim;
  t.dtype = kFloat32;
  for (int32_t d = 0; d < spec.ndim; ++d) t.shape[d] = spec.local_shape[d];
  return t;
}

void LocalSgd::acquire(int32_t layer, int32_t phase, keel_tensor* params, keel_tensor* grads, size_t n) const {
  check_layer(layer, phase);
  const std::vector<size_t>& indices = layer_params_[size_t(layer)];
  if (n != indices.size())
    invalid("acquire: layer " + std::to_string(layer) + " has " + std::to_string(indices.size()) +
            " parameters, the caller asked for " + std::to_string(n));
  if (n > 0 && (!params || (phase == KEEL_PHASE_BACKWARD && !grads)))
    invalid("acquire: params is NULL, or grads is NULL in the backward phase");
  for (size_t k = 0; k < n; ++k) {
    params[k] = view(params_.floats(), indices[k]);
    if (grads) grads[k] = view(grads_.floats(), indices[k]);  // the forward phase may pass NULL
  }
}

void LocalSgd::release(int32_t layer, int32_t phase, int32_t /*grads_final*/) const {
  check_layer(layer, phase);
  // Nothing to do: local SGD never communicates gradients. A strategy that does (DDP) starts
  // reducing a layer's gradients here, once grads_final is set in the last micro-batch.
}

void LocalSgd::check_layer(int32_t layer, int32_t phase) const {
  if (layer < 0 || size_t(layer) >= layer_params_.size())
    invalid("layer " + std::to_string(layer) + " is outside [0, " + std::to_string(layer_params_.size()) + ")");
  if (phase != KEEL_PHASE_FORWARD && phase != KEEL_PHASE_BACKWARD) invalid("phase " + std::to_string(phase) + " is unknown");
}

void LocalSgd::begin_microbatch(int32_t index, int32_t /*is_last*/) const {
  if (index < 0) invalid("begin_microbatch: index is negative");
}

// --- gradients and the optimizer ---

void LocalSgd::zero_grads() {
  if (total_ > 0) check_callee(backend_->fill_zero(backend_obj_, grads_.get(), grads_.bytes()), "backend fill_zero");
}

// Each rank's gradients are its own and differ across ranks; no averaged gradient is ever formed.
// So this returns the dp-mean of the local sums of squares: every rank then computes the same
// clip factor and logs the same grad_norm. Everything handed to dp_comm lives in backend memory
// (comm.h: mpi works on host memory, a device communicator on its backend's), so the scalar
// makes a round trip through norm_scalar_.
double LocalSgd::grad_sq_norm() {
  double sum_squares = 0.0;
  // Under tensor parallelism a replicated parameter counts on tp rank 0 only (strategy.h).
  // One call per run of neighbouring counted parameters: the whole buffer at tp rank 0.
  auto counted = [&](size_t i) { return keel_support::counts_in_grad_norm(specs_[i], tp_); };
  for (size_t first = 0; first < numel_.size();) {
    size_t end = first + 1;
    while (end < numel_.size() && counted(end) == counted(first)) ++end;
    const int64_t count = offset_[end - 1] + numel_[end - 1] - offset_[first];
    double run = 0.0;
    if (counted(first) && count > 0)
      check_callee(backend_->sum_squares(backend_obj_, grads_.floats() + offset_[first], count, &run), "backend sum_squares");
    sum_squares += run;
    first = end;
  }
  if (dp_size_ == 1) return sum_squares;
  check_callee(backend_->copy(backend_obj_, norm_scalar_.get(), &sum_squares, sizeof(double), KEEL_COPY_HOST_TO_DEVICE), "backend copy");
  check_callee(dp_comm_->all_reduce(dp_comm_obj_, norm_scalar_.get(), norm_scalar_.get(), 1, kFloat64, KEEL_REDUCE_SUM, nullptr),
               "comm all_reduce");
  check_callee(backend_->copy(backend_obj_, &sum_squares, norm_scalar_.get(), sizeof(double), KEEL_COPY_DEVICE_TO_HOST), "backend copy");
  return sum_squares / dp_size_;
}

void LocalSgd::step(const keel_strategy_step_args& args) {
  if (args.step < 1) invalid("step: step is 1-based, found " + std::to_string(args.step));
  // One optimizer call per run of neighbouring parameters that agree on weight decay: each run
  // is one contiguous range of every flat buffer.
  auto decays = [&](size_t i) { return (specs_[i].flags & optimizer_info_.decay_flags) == 0; };
  for (size_t first = 0; first < numel_.size();) {
    size_t end = first + 1;
    while (end < numel_.size() && decays(end) == decays(first)) ++end;
    run_optimizer(first, end, decays(first), args);
    first = end;
  }
  // The cadence follows the global step count, so a resumed run syncs on the same steps.
  if (dp_size_ > 1 && args.step % config_.sync_every == 0) average_params_across_ranks();
}

void LocalSgd::run_optimizer(size_t first, size_t end, bool weight_decay, const keel_strategy_step_args& args) {
  const int64_t begin = offset_[first];
  const int64_t count = offset_[end - 1] + numel_[end - 1] - begin;
  if (count == 0) return;
  float* state[KEEL_OPTIMIZER_MAX_STATE_SLOTS] = {};
  for (size_t slot = 0; slot < state_.size(); ++slot) state[slot] = state_[slot].floats() + begin;
  keel_optimizer_step_args a{};
  a.struct_size = sizeof(a);
  a.device = device_;
  a.params = params_.floats() + begin;
  a.grads = grads_.floats() + begin;
  a.state = state;
  a.n = count;
  a.lr = args.lr;
  a.grad_scale = args.grad_scale;
  a.step = args.step;
  a.apply_weight_decay = weight_decay ? 1 : 0;
  check_callee(optimizer_->step(optimizer_obj_, &a), "optimizer step");
}

// The replicas drift apart between syncs; this pulls them back to their mean. Optimizer state
// stays local (as in DiLoCo's inner optimizer).
void LocalSgd::average_params_across_ranks() {
  if (total_ == 0) return;
  check_callee(dp_comm_->all_reduce(dp_comm_obj_, params_.get(), params_.get(), size_t(total_), kFloat32,
                                    KEEL_REDUCE_SUM, nullptr), "comm all_reduce");
  check_callee(backend_->scale(backend_obj_, params_.floats(), 1.0f / float(dp_size_), total_), "backend scale");
}

// --- host access by global flat range (checkpoints, bindings) ---

float* LocalSgd::buffer_of(int32_t kind) const {
  if (kind == -1) return params_.floats();
  if (kind >= 0 && size_t(kind) < state_.size()) return state_[size_t(kind)].floats();
  invalid("kind " + std::to_string(kind) + " is neither -1 (parameters) nor an optimizer state slot in [0, " +
          std::to_string(state_.size()) + ")");
}

void LocalSgd::check_range(size_t index, int64_t begin, int64_t count, const void* host_ptr) const {
  if (index >= numel_.size())
    invalid("parameter index " + std::to_string(index) + " is outside [0, " + std::to_string(numel_.size()) + ")");
  if (begin < 0 || count < 0 || begin > numel_[index] || count > numel_[index] - begin)
    invalid(name_of(specs_[index]) + " has " + std::to_string(numel_[index]) + " elements; " +
            std::to_string(count) + " from element " + std::to_string(begin) + " do not fit");
  if (count > 0 && !host_ptr) invalid("the host buffer is NULL");
}

void LocalSgd::read(int32_t kind, size_t index, int64_t begin, int64_t count, float* dst_host) const {
  float* base = buffer_of(kind);
  check_range(index, begin, count, dst_host);
  if (count > 0)
    check_callee(backend_->copy(backend_obj_, dst_host, base + offset_[index] + begin, size_t(count) * sizeof(float),
                                KEEL_COPY_DEVICE_TO_HOST), "backend copy");
}

void LocalSgd::write(int32_t kind, size_t index, int64_t begin, int64_t count, const float* src_host) {
  float* base = buffer_of(kind);
  check_range(index, begin, count, src_host);
  if (count > 0)
    check_callee(backend_->copy(backend_obj_, base + offset_[index] + begin, src_host, size_t(count) * sizeof(float),
                                KEEL_COPY_HOST_TO_DEVICE), "backend copy");
}

void LocalSgd::read_grad(size_t index, int64_t begin, int64_t count, float* dst_host) const {
  check_range(index, begin, count, dst_host);
  if (count > 0)
    check_callee(backend_->copy(backend_obj_, dst_host, grads_.floats() + offset_[index] + begin,
                                size_t(count) * sizeof(float), KEEL_COPY_DEVICE_TO_HOST), "backend copy");
}

// Every rank holds every tensor whole, so each reports it whole and the core saves rank 0's.
// Right after a sync that is every rank's parameters; a checkpoint taken between syncs saves
// rank 0's drifted ones, and a resumed run starts every rank from them (so set checkpoint.every
// to a multiple of sync_every to save the average). Optimizer state, never averaged, is always
// rank 0's: on several ranks a stateful optimizer resumes close to, not exactly on, its path.
void LocalSgd::owned_range(int32_t kind, size_t index, int64_t* begin, int64_t* end) const {
  buffer_of(kind);  // checks kind
  check_range(index, 0, 0, nullptr);
  if (!begin || !end) invalid("owned_range: begin or end is NULL");
  *begin = 0;
  *end = numel_[index];
}

void LocalSgd::describe(keel_strategy_info* out) const {
  const uint64_t bytes = uint64_t(total_) * sizeof(float);
  keel_strategy_info info{};
  info.struct_size = sizeof(info);
  info.params_resident = 1;
  info.param_bytes = bytes;
  info.grad_bytes = bytes;
  info.state_bytes = bytes * state_.size();
  keel_support::write_sized_output(out, info, sizeof info, "describe: out");
}

const std::string& LocalSgd::own_state_name(int32_t index) const {
  if (index < 0 || index >= own_state_count())
    invalid("own state index " + std::to_string(index) + " is outside [0, " + std::to_string(own_state_count()) + ")");
  return own_state_names_[size_t(index)];
}

void LocalSgd::read_own_state(int32_t index, float* dst_host) const {
  own_state_name(index);  // checks index
  if (total_ > 0 && !dst_host) invalid("read_own_state: dst_host is NULL");
  check_callee(backend_->copy(backend_obj_, dst_host, buffer_of(index - 1), size_t(total_) * sizeof(float),
                              KEEL_COPY_DEVICE_TO_HOST), "backend copy");
}

void LocalSgd::write_own_state(int32_t index, const float* src_host) {
  own_state_name(index);
  if (total_ > 0 && !src_host) invalid("write_own_state: src_host is NULL");
  check_callee(backend_->copy(backend_obj_, buffer_of(index - 1), src_host, size_t(total_) * sizeof(float),
                              KEEL_COPY_HOST_TO_DEVICE), "backend copy");
}

}  // namespace localsgd
