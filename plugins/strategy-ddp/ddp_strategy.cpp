// The ddp strategy's behaviour on one rank (see ddp_strategy.hpp): resident flat buffers,
// per-layer access for the model, the optimizer run over contiguous weight-decay runs, and
// host access by flat range. The data-parallel reduction lives in ddp_gradient_sync.cpp.
#include "ddp_strategy.hpp"

#include <keel/plugin.h>
#include <keel_support/abi_guard.hpp>
#include <keel_support/tp_pieces.hpp>

#include <algorithm>
#include <string>

namespace keel_ddp {
namespace {

using keel_support::StatusError;

constexpr keel_dtype kFloat32 = {KEEL_DTYPE_FLOAT, 32, 1};

std::string param_label(const keel_param_spec& spec, size_t index) {
  return "parameter " + std::to_string(index) + " (\"" + (spec.name ? spec.name : "<unnamed>") + "\")";
}

void check_backend_slots(const keel_backend_api* backend) {
  if (!backend) throw StatusError(KEEL_ERR_INVALID_ARGUMENT, "create: backend is NULL");
  const char* missing = !KEEL_HAS_SLOT(backend, device)          ? "device"
                        : !KEEL_HAS_SLOT(backend, alloc)         ? "alloc"
                        : !KEEL_HAS_SLOT(backend, free_memory)   ? "free_memory"
                        : !KEEL_HAS_SLOT(backend, copy)          ? "copy"
                        : !KEEL_HAS_SLOT(backend, fill_zero)     ? "fill_zero"
                        : !KEEL_HAS_SLOT(backend, sum_squares)   ? "sum_squares"
                                                                 : nullptr;
  if (missing) throw StatusError(KEEL_ERR_UNIMPLEMENTED, std::string("the backend lacks the \"") + missing +
                                                             "\" slot this strategy needs");
}

void check_optimizer_slots(const keel_optimizer_api* optimizer) {
  if (!optimizer) throw StatusError(KEEL_ERR_INVALID_ARGUMENT, "create: optimizer is NULL");
  if (!KEEL_HAS_SLOT(optimizer, describe) || !KEEL_HAS_SLOT(optimizer, step))
    throw StatusError(KEEL_ERR_UNIMPLEMENTED, "the optimizer lacks the \"describe\" or \"step\" slot");
}

const keel_strategy_create_args& checked_create_args(const keel_strategy_create_args& args) {
  // The data-parallel fields (0.4) are needed; the tp position (0.6) defaults to tp 1.
  if (args.struct_size < offsetof(keel_strategy_create_args, dp_size) + sizeof(args.dp_size))
    throw StatusError(KEEL_ERR_INVALID_ARGUMENT, "create: args is older than ABI 0.4");
  check_backend_slots(args.backend);
  check_optimizer_slots(args.optimizer);
  return args;
}

}  // namespace

DdpStrategy::DdpStrategy(const keel_host* host, const keel_strategy_create_args& args, const DdpConfig& config)
    : host_(host),
      backend_(checked_create_args(args).backend),
      backend_obj_(args.backend_obj),
      optimizer_(args.optimizer),
      optimizer_obj_(args.optimizer_obj),
      specs_(args.params),
      tp_(keel_support::tp_position(args)),
      layout_(build_param_layout(args.params, args.n_params, args.n_layers)) {
  keel_support::check_callee(backend_->device(backend_obj_, &device_), "backend device");
  optimizer_info_.struct_size = sizeof(optimizer_info_);
  keel_support::check_callee(optimizer_->describe(optimizer_obj_, &optimizer_info_), "optimizer describe");
  if (optimizer_info_.n_state_slots < 0 || optimizer_info_.n_state_slots > KEEL_OPTIMIZER_MAX_STATE_SLOTS)
    throw StatusError(KEEL_ERR_INVALID_ARGUMENT, "the optimizer asks for " +
                                                     std::to_string(optimizer_info_.n_state_slots) +
                                                     " state slots; at most " +
                                                     std::to_string(KEEL_OPTIMIZER_MAX_STATE_SLOTS) + " are allowed");
  params_ = keel_support::BackendBuffer(backend_, backend_obj_, size_t(layout_.total_elements) * sizeof(float));
  grads_ = keel_support::BackendBuffer(backend_, backend_obj_, size_t(layout_.total_elements) * sizeof(float));
  for (int32_t slot = 0; slot < optimizer_info_.n_state_slots; ++slot)
    optimizer_state_.emplace_back(backend_, backend_obj_, size_t(layout_.total_elements) * sizeof(float));  // zero: "first step" state
  initialise_params(args.seed);
  setup_data_parallel(args, config);
}

void DdpStrategy::initialise_params(uint64_t seed) {
  if (layout_.numel.empty()) return;
  std::vector<float> staging(static_cast<size_t>(*std::max_element(layout_.numel.begin(), layout_.numel.end())));
  for (size_t i = 0; i < layout_.numel.size(); ++i) {
    const int64_t numel = layout_.numel[i];
    if (numel == 0) continue;
    keel_support::init_piece_elements(host_, specs_[i], i, seed, 0, numel, staging.data());
    keel_support::check_callee(backend_->copy(backend_obj_, params_.floats() + layout_.offset[i], staging.data(),
                                static_cast<size_t>(numel) * sizeof(float), KEEL_COPY_HOST_TO_DEVICE), "backend copy");
  }
}

// --- model access ---

void DdpStrategy::check_layer(int32_t layer, int32_t phase) const {
  if (layer < 0 || static_cast<size_t>(layer) >= layout_.layers.size())
    throw StatusError(KEEL_ERR_INVALID_ARGUMENT, "layer " + std::to_string(layer) + " is outside [0, " +
                                                     std::to_string(layout_.layers.size()) + ")");
  if (phase != KEEL_PHASE_FORWARD && phase != KEEL_PHASE_BACKWARD)
    throw StatusError(KEEL_ERR_INVALID_ARGUMENT, "phase " + std::to_string(phase) + " is neither forward (" +
                                                     std::to_string(KEEL_PHASE_FORWARD) + ") nor backward (" +
                                                     std::to_string(KEEL_PHASE_BACKWARD) + ")");
}

keel_tensor DdpStrategy::describe_tensor(size_t index, float* base) const {
  const keel_param_spec& spec = specs_[index];
  keel_tensor tensor{};
  tensor.data = base + layout_.offset[index];
  tensor.device = device_;
  tensor.ndim = spec.ndim;
  tensor.dtype = kFloat32;
  for (int32_t d = 0; d < spec.ndim; ++d) tensor.shape[d] = spec.local_shape[d];
  tensor.byte_offset = 0;
  return tensor;
}

void DdpStrategy::acquire(int32_t layer, int32_t phase, keel_tensor* params, keel_tensor* grads, size_t n) const {
  check_layer(layer, phase);
  const LayerSlots& slots = layout_.layers[static_cast<size_t>(layer)];
  if (n != slots.param_indices.size())
    throw StatusError(KEEL_ERR_INVALID_ARGUMENT, "acquire: layer " + std::to_string(layer) + " has " +
                                                     std::to_string(slots.param_indices.size()) +
                                                     " parameters, the caller asked for " + std::to_string(n));
  if (n > 0 && !params) throw StatusError(KEEL_ERR_INVALID_ARGUMENT, "acquire: params is NULL");
  if (n > 0 && !grads && phase == KEEL_PHASE_BACKWARD)
    throw StatusError(KEEL_ERR_INVALID_ARGUMENT, "acquire: grads is NULL in the backward phase");
  // Resident memory: nothing moves, the descriptors point straight into the flat buffers.
  for (size_t k = 0; k < n; ++k) {
    const size_t index = slots.param_indices[k];
    params[k] = describe_tensor(index, params_.floats());
    if (grads) grads[k] = describe_tensor(index, grads_.floats());
  }
}

void DdpStrategy::release(int32_t layer, int32_t phase, int32_t grads_final) {
  check_layer(layer, phase);
  // Resident memory: nothing to free. A final release in the last micro-batch may complete a
  // bucket, whose all-reduce then overlaps the rest of the backward.
  if (phase == KEEL_PHASE_BACKWARD && grads_final) mark_layer_final(layer);
}

void DdpStrategy::begin_microbatch(int32_t index, int32_t is_last) {
  if (index < 0) throw StatusError(KEEL_ERR_INVALID_ARGUMENT, "begin_microbatch: index is negative");
  start_accumulation(is_last != 0);
}

// --- gradients and the optimizer ---

void DdpStrategy::zero_grads() {
  start_accumulation(false);
  if (layout_.total_elements == 0) return;
  keel_support::check_callee(backend_->fill_zero(backend_obj_, grads_.floats(),
                                   static_cast<size_t>(layout_.total_elements) * sizeof(float)), "backend fill_zero");
}

double DdpStrategy::grad_sq_norm() {
  finish_gradient_reduction();  // every rank now holds the same mean, so the same sum
  double sum_squares = 0.0;
  // One call per maximal run of neighbouring parameters the norm counts on this tp rank (at tp
  // rank 0 that is the whole buffer, as before tensor parallelism).
  const size_t n_params = layout_.numel.size();
  for (size_t first = 0; first < n_params;) {
    const bool counted = keel_support::counts_in_grad_norm(specs_[first], tp_);
    size_t end = first + 1;
    while (end < n_params && keel_support::counts_in_grad_norm(specs_[end], tp_) == counted) ++end;
    const int64_t begin = layout_.offset[first];
    const int64_t count = layout_.offset[end - 1] + layout_.numel[end - 1] - begin;
    double run = 0.0;
    if (counted && count > 0)
      keel_support::check_callee(backend_->sum_squares(backend_obj_, grads_.floats() + begin, count, &run),
                                 "backend sum_squares");
    sum_squares += run;
    first = end;
  }
  return sum_squares;
}

bool DdpStrategy::applies_weight_decay(size_t index) const {
  return (specs_[index].flags & optimizer_info_.decay_flags) == 0;
}

void DdpStrategy::step(const keel_strategy_step_args& args) {
  if (args.step < 1) throw StatusError(KEEL_ERR_INVALID_ARGUMENT, "step: step is 1-based, found " +
                                                                     std::to_string(args.step));
  finish_gradient_reduction();  // a no-op after grad_sq_norm
  // One optimizer call per maximal run of neighbouring parameters that agree on weight decay;
  // the layout has no padding, so each run is one contiguous range of every flat buffer.
  const size_t n_params = layout_.numel.size();
  for (size_t first = 0; first < n_params;) {
    const bool decay = applies_weight_decay(first);
    size_t end = first + 1;
    while (end < n_params && applies_weight_decay(end) == decay) ++end;
    run_optimizer(first, end, decay ? 1 : 0, args);
    first = end;
  }
}

void DdpStrategy::run_optimizer(size_t first, size_t end, int32_t apply_weight_decay,
                                const keel_strategy_step_args& args) {
  const int64_t begin = layout_.offset[first];
  const int64_t count = layout_.offset[end - 1] + layout_.numel[end - 1] - begin;
  if (count == 0) return;
  float* state[KEEL_OPTIMIZER_MAX_STATE_SLOTS] = {};
  for (size_t slot = 0; slot < optimizer_state_.size(); ++slot) state[slot] = optimizer_state_[slot].floats() + begin;
  keel_optimizer_step_args step_args{};
  step_args.struct_size = sizeof(step_args);
  step_args.device = device_;
  step_args.params = params_.floats() + begin;
  step_args.grads = grads_.floats() + begin;
  step_args.state = state;
  step_args.n = count;
  step_args.lr = args.lr;
  step_args.grad_scale = args.grad_scale;
  step_args.step = args.step;
  step_args.apply_weight_decay = apply_weight_decay;
  keel_support::check_callee(optimizer_->step(optimizer_obj_, &step_args), "optimizer step");
}

// --- host access by flat range ---

void DdpStrategy::check_range(const char* what, size_t index, int64_t begin, int64_t count,
                              const void* host_ptr) const {
  if (index >= layout_.numel.size())
    throw StatusError(KEEL_ERR_INVALID_ARGUMENT, std::string(what) + ": parameter index " + std::to_string(index) +
                                                     " is outside [0, " + std::to_string(layout_.numel.size()) + ")");
  const int64_t numel = layout_.numel[index];
  if (begin < 0 || count < 0 || begin > numel || count > numel - begin)
    throw StatusError(KEEL_ERR_INVALID_ARGUMENT, std::string(what) + ": " + param_label(specs_[index], index) +
                                                     " has " + std::to_string(numel) + " elements; " + std::to_string(count) +
                                                     " elements from element " + std::to_string(begin) +
                                                     " do not fit");
  if (count > 0 && !host_ptr)
    throw StatusError(KEEL_ERR_INVALID_ARGUMENT, std::string(what) + ": the host buffer is NULL");
}

float* DdpStrategy::state_slot(const char* what, int32_t slot) const {
  if (slot < 0 || size_t(slot) >= optimizer_state_.size())
    throw StatusError(KEEL_ERR_INVALID_ARGUMENT, std::string(what) + ": state slot " + std::to_string(slot) +
                                                     " is outside [0, " + std::to_string(optimizer_state_.size()) +
                                                     ") (the optimizer's n_state_slots)");
  return optimizer_state_[size_t(slot)].floats();
}

void DdpStrategy::copy_to_host(const float* device_base, size_t index, int64_t begin, int64_t count,
                               float* dst_host) const {
  if (count == 0) return;
  keel_support::check_callee(backend_->copy(backend_obj_, dst_host, device_base + layout_.offset[index] + begin,
                              static_cast<size_t>(count) * sizeof(float), KEEL_COPY_DEVICE_TO_HOST), "backend copy");
}

void DdpStrategy::read_param(size_t index, int64_t begin, int64_t count, float* dst_host) const {
  check_range("read_param", index, begin, count, dst_host);
  copy_to_host(params_.floats(), index, begin, count, dst_host);
}

void DdpStrategy::read_grad(size_t index, int64_t begin, int64_t count, float* dst_host) {
  check_range("read_grad", index, begin, count, dst_host);
  if (reducer_) reducer_->wait_idle();  // no torn values; a collective is never started from here
  copy_to_host(grads_.floats(), index, begin, count, dst_host);
}

void DdpStrategy::copy_from_host(float* device_base, size_t index, int64_t begin, int64_t count,
                                 const float* src_host) {
  if (count == 0) return;
  keel_support::check_callee(backend_->copy(backend_obj_, device_base + layout_.offset[index] + begin, src_host,
                              static_cast<size_t>(count) * sizeof(float), KEEL_COPY_HOST_TO_DEVICE), "backend copy");
}

void DdpStrategy::write_param(size_t index, int64_t begin, int64_t count, const float* src_host) {
  check_range("write_param", index, begin, count, src_host);
  copy_from_host(params_.floats(), index, begin, count, src_host);
}

void DdpStrategy::read_state(int32_t slot, size_t index, int64_t begin, int64_t count, float* dst_host) const {
  check_range("read_state", index, begin, count, dst_host);
  copy_to_host(state_slot("read_state", slot), index, begin, count, dst_host);
}

void DdpStrategy::write_state(int32_t slot, size_t index, int64_t begin, int64_t count, const float* src_host) {
  check_range("write_state", index, begin, count, src_host);
  copy_from_host(state_slot("write_state", slot), index, begin, count, src_host);
}

// --- what this rank holds ---

void DdpStrategy::owned_range(int32_t kind, size_t index, int64_t* begin, int64_t* end) const {
  if (!begin || !end) throw StatusError(KEEL_ERR_INVALID_ARGUMENT, "owned_range: begin or end is NULL");
  if (kind != -1) state_slot("owned_range", kind);  // validates the slot
  if (index >= layout_.numel.size())
    throw StatusError(KEEL_ERR_INVALID_ARGUMENT, "owned_range: parameter index " + std::to_string(index) +
                                                     " is outside [0, " + std::to_string(layout_.numel.size()) + ")");
  *begin = 0;  // replicated: every rank holds (and may save) the whole tensor
  *end = layout_.numel[index];
}

keel_strategy_info DdpStrategy::describe() const {
  keel_strategy_info info{};
  info.struct_size = sizeof(info);
  info.params_resident = 1;
  info.param_bytes = params_.bytes();
  info.grad_bytes = grads_.bytes();
  for (const auto& slot : optimizer_state_) info.state_bytes += slot.bytes();
  return info;
}

}  // namespace keel_ddp
