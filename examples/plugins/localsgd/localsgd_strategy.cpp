// The local SGD algorithm (see localsgd_strategy.hpp): the optimizer on this rank's own
// gradients, a grad norm that is the same on every rank, and the periodic parameter average —
// the only communication there is.
#include "localsgd_strategy.hpp"

#include <keel/plugin.h>
#include <keel_support/common/abi_guard.hpp>

#include <string>

namespace localsgd {
namespace {

using keel_support::check_callee;
using keel_support::StatusError;

constexpr keel_dtype kFloat32 = {KEEL_DTYPE_FLOAT, 32, 1};
constexpr keel_dtype kFloat64 = {KEEL_DTYPE_FLOAT, 64, 1};

[[noreturn]] void invalid(const std::string& message) { throw StatusError(KEEL_ERR_INVALID_ARGUMENT, message); }

// The store checks its own slots; this adds the ones averaging needs.
const keel_strategy_create_args& checked(const keel_strategy_create_args& args) {
  if (args.struct_size < offsetof(keel_strategy_create_args, dp_size) + sizeof(args.dp_size))
    invalid("create: args are older than ABI 0.4");
  keel_support::check_strategy_tables(args, {{"scale", KEEL_HAS_SLOT(args.backend, scale)}});
  if (args.dp_comm && !KEEL_HAS_SLOT(args.dp_comm, all_reduce))
    throw StatusError(KEEL_ERR_UNIMPLEMENTED, "the data-parallel communicator lacks all_reduce");
  if (args.dp_comm && (args.dp_size < 1 || args.dp_rank < 0 || args.dp_rank >= args.dp_size))
    invalid("create: dp_rank " + std::to_string(args.dp_rank) + " is outside dp_size " + std::to_string(args.dp_size));
  // Pipeline stages would each need the STAGE_TIED gradient sum (keel_support/strategy/stage_tied_grads.hpp)
  // on top of local steps; this example keeps to data parallelism.
  const keel_support::PipelinePosition pp = keel_support::pipeline_position(args);
  if (pp.size > 1)
    throw StatusError(KEEL_ERR_UNIMPLEMENTED, "create: parallel.pp is " + std::to_string(pp.size) +
                                                  ", but the localsgd strategy supports no pipeline parallelism "
                                                  "(pp 1 only); use the ddp or zero strategy with pp > 1");
  return args;
}

}  // namespace

// Every rank initialises from the same seed, so the replicas start identical without a broadcast.
LocalSgd::LocalSgd(const keel_host* host, const keel_strategy_create_args& args, Config config)
    : store_(host, checked(args), keel_support::StoreOptions{}),
      dp_comm_(args.dp_comm),
      dp_comm_obj_(args.dp_comm_obj),
      dp_size_(args.dp_comm ? args.dp_size : 1),
      config_(config),
      norm_scalar_(store_.backend().alloc_bytes(sizeof(double))) {
  own_state_names_.push_back("params");
  for (int32_t slot = 0; slot < store_.n_state_slots(); ++slot)
    own_state_names_.push_back("optimizer_state." + std::to_string(slot));
  if (dp_size_ > 1)
    keel_logf(host, KEEL_LOG_INFO, "strategy localsgd", "%d ranks, parameters averaged every %lld optimizer steps",
              int(dp_size_), (long long)config_.sync_every);
  else
    host->log(KEEL_LOG_INFO, "strategy localsgd", "one rank: plain local training, nothing to average");
}

// Resident memory, nothing moves.
void LocalSgd::acquire(int32_t layer, int32_t phase, keel_tensor* params, keel_tensor* grads, size_t n) const {
  store_.check_acquire(layer, phase, params, grads, n);
  store_.describe_layer(layer, store_.full_layer(store_.params(), layer), store_.full_layer(store_.grads(), layer),
                        params, grads, n);
}

// Nothing to do: local SGD never communicates gradients. A strategy that does (DDP) starts
// reducing a layer's gradients here, once grads_final is set in the last micro-batch.
void LocalSgd::release(int32_t layer, int32_t phase, int32_t /*grads_final*/) const { store_.check_layer(layer, phase); }

void LocalSgd::begin_microbatch(int32_t index, int32_t /*is_last*/) const {
  if (index < 0) invalid("begin_microbatch: index is negative");
}

void LocalSgd::zero_grads() { store_.backend().fill_zero(store_.grads(), store_.grad_elements()); }

// Each rank's gradients are its own and differ across ranks; no averaged gradient is ever formed.
// So this returns the dp-mean of the local sums of squares: every rank then computes the same
// clip factor and logs the same grad_norm. Everything handed to dp_comm lives in backend memory
// (comm.h: mpi works on host memory, a device communicator on its backend's), so the scalar
// makes a round trip through norm_scalar_.
double LocalSgd::grad_sq_norm() {
  double sum_squares = store_.counted_grad_sum_squares();  // tp-replicated ones on tp rank 0 only
  if (dp_size_ == 1) return sum_squares;
  const keel_support::BackendOps& backend = store_.backend();
  backend.copy_bytes(norm_scalar_.get(), &sum_squares, sizeof(double), KEEL_COPY_HOST_TO_DEVICE);
  check_callee(dp_comm_->all_reduce(dp_comm_obj_, norm_scalar_.get(), norm_scalar_.get(), 1, kFloat64, KEEL_REDUCE_SUM, nullptr),
               "comm all_reduce");
  backend.copy_bytes(&sum_squares, norm_scalar_.get(), sizeof(double), KEEL_COPY_DEVICE_TO_HOST);
  return sum_squares / dp_size_;
}

void LocalSgd::step(const keel_strategy_step_args& args) {
  keel_support::ParamStore::check_step(args);
  store_.step_owned(args);
  // The cadence follows the global step count, so a resumed run syncs on the same steps.
  if (dp_size_ > 1 && args.step % config_.sync_every == 0) average_params_across_ranks();
}

// The replicas drift apart between syncs; this pulls them back to their mean. Optimizer state
// stays local (as in DiLoCo's inner optimizer).
void LocalSgd::average_params_across_ranks() {
  const int64_t total = store_.layout().full_elements;
  if (total == 0) return;
  check_callee(dp_comm_->all_reduce(dp_comm_obj_, store_.params(), store_.params(), size_t(total), kFloat32,
                                    KEEL_REDUCE_SUM, nullptr), "comm all_reduce");
  store_.backend().scale(store_.params(), 1.0f / float(dp_size_), total);
}

// --- own state ---

const std::string& LocalSgd::own_state_name(int32_t index) const {
  if (index < 0 || index >= own_state_count())
    invalid("own state index " + std::to_string(index) + " is outside [0, " + std::to_string(own_state_count()) + ")");
  return own_state_names_[size_t(index)];
}

void LocalSgd::read_own_state(int32_t index, float* dst_host) const {
  own_state_name(index);  // checks index
  if (own_state_elements() > 0 && !dst_host) invalid("read_own_state: dst_host is NULL");
  if (index > 0) return store_.read_state_shard(index - 1, dst_host);  // the exchange form, packed or not
  store_.backend().copy(dst_host, store_.params(), own_state_elements(), KEEL_COPY_DEVICE_TO_HOST);
}

void LocalSgd::write_own_state(int32_t index, const float* src_host) {
  own_state_name(index);  // checks index
  if (own_state_elements() > 0 && !src_host) invalid("write_own_state: src_host is NULL");
  if (index > 0) return store_.write_state_shard(index - 1, src_host);
  store_.backend().copy(store_.params(), src_host, own_state_elements(), KEEL_COPY_HOST_TO_DEVICE);
}

}  // namespace localsgd
