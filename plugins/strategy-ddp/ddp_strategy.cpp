// The ddp strategy's behaviour on one rank (see ddp_strategy.hpp): the store's resident views
// for the model, its optimizer runs and its host access; the data-parallel reduction lives in
// ddp_gradient_sync.cpp.
#include "ddp_strategy.hpp"

#include <keel_support/common/abi_guard.hpp>
#include <keel_support/strategy/offload_tier.hpp>

#include <string>

namespace keel_ddp {
namespace {

using keel_support::StatusError;

const keel_strategy_create_args& checked_create_args(const keel_strategy_create_args& args) {
  // The data-parallel fields (0.4) are needed; the tp position (0.6) defaults to tp 1.
  if (args.struct_size < offsetof(keel_strategy_create_args, dp_size) + sizeof(args.dp_size))
    throw StatusError(KEEL_ERR_INVALID_ARGUMENT, "create: args is older than ABI 0.4");
  keel_support::check_strategy_tables(args);
  return args;
}

// ddp keeps whole parameters and gradients in backend memory: the model reads every parameter
// at each forward and accumulates into every gradient, so only the optimizer state, touched by
// the step alone, can live in the offload tier.
keel_support::StoreOptions store_options(const keel_strategy_create_args& args) {
  const keel_support::OffloadRequest offload = keel_support::offload_request(args);
  const char* why = "strategy ddp keeps every parameter and gradient whole in backend memory for the model; use "
                    "strategy zero (stage 3 for offload.params, stage 2 or 3 for offload.gradients) or set it false";
  if (offload.wants(KEEL_OFFLOAD_PARAMS)) throw StatusError(KEEL_ERR_INVALID_CONFIG, std::string("offload.params: ") + why);
  if (offload.wants(KEEL_OFFLOAD_GRADIENTS))
    throw StatusError(KEEL_ERR_INVALID_CONFIG, std::string("offload.gradients: ") + why);
  keel_support::StoreOptions options;
  options.offload_supported = KEEL_OFFLOAD_OPTIMIZER_STATE;
  return options;
}

}  // namespace

DdpStrategy::DdpStrategy(const keel_host* host, const keel_strategy_create_args& args, const DdpConfig& config)
    : store_(host, checked_create_args(args), store_options(args)) {
  setup_data_parallel(args, config);
}

// --- model access: resident memory, nothing moves ---

void DdpStrategy::acquire(int32_t layer, int32_t phase, keel_tensor* params, keel_tensor* grads, size_t n) const {
  store_.check_acquire(layer, phase, params, grads, n);
  store_.describe_layer(layer, store_.full_layer(store_.params(), layer), store_.full_layer(store_.grads(), layer),
                        params, grads, n);
}

void DdpStrategy::release(int32_t layer, int32_t phase, int32_t grads_final) {
  store_.check_layer(layer, phase);
  // A final release in the last micro-batch may complete a bucket, whose all-reduce then
  // overlaps the rest of the backward.
  if (phase == KEEL_PHASE_BACKWARD && grads_final) mark_layer_final(layer);
}

// Comes right before each backward (0.7): is_last says this backward writes its layers'
// gradients for the last time this step, so their final releases may start the reduction.
void DdpStrategy::begin_microbatch(int32_t index, int32_t is_last) {
  if (index < 0) throw StatusError(KEEL_ERR_INVALID_ARGUMENT, "begin_microbatch: index is negative");
  collecting_ = is_last != 0;
}

// --- gradients and the optimizer ---

void DdpStrategy::zero_grads() {
  start_accumulation();
  store_.backend().fill_zero(store_.grads(), store_.grad_elements());
}

double DdpStrategy::grad_sq_norm() {
  finish_gradient_reduction();  // every rank now holds the same mean, so the same sum
  return store_.counted_grad_sum_squares();
}

void DdpStrategy::step(const keel_strategy_step_args& args) {
  keel_support::ParamStore::check_step(args);
  finish_gradient_reduction();  // a no-op after grad_sq_norm
  store_.step_owned(args);
  if (compressor_) compressor_->commit();  // the step was taken: its error feedback is kept
}

void DdpStrategy::read_grad(size_t index, int64_t begin, int64_t count, float* dst_host) {
  if (reducer_) reducer_->wait_idle();  // no torn values; a collective is never started from here
  store_.read_grad(index, begin, count, dst_host);
}

}  // namespace keel_ddp
