// DiLoCo's steps (see diloco_strategy.hpp): the inner optimizer on this rank's own gradients, a
// grad norm that is the same on every rank, and at each interval's end the average and the outer
// step, on host copies in fp32, element by element as torch.optim.SGD's single-tensor rule.
#include "diloco_strategy.hpp"

#include <keel/plugin.h>
#include <keel_support/common/abi_guard.hpp>
#include <keel_support/strategy/offload_tier.hpp>

#include <algorithm>
#include <cmath>
#include <string>

namespace keel_diloco {
namespace {

using keel_support::check_callee;
using keel_support::StatusError;

constexpr keel_dtype kFloat32 = {KEEL_DTYPE_FLOAT, 32, 1};
constexpr keel_dtype kFloat64 = {KEEL_DTYPE_FLOAT, 64, 1};

[[noreturn]] void invalid(const std::string& message) { throw StatusError(KEEL_ERR_INVALID_ARGUMENT, message); }

// x as three floats whose double sum is x exactly (24 + 24 + 24 bits cover a double's 53), so the
// statistics survive a checkpoint's fp32 arrays bit for bit.
void split_double(double x, float* out) {
  out[0] = float(x);
  out[1] = float(x - double(out[0]));
  out[2] = float(x - double(out[0]) - double(out[1]));
}

const keel_strategy_create_args& checked(const keel_strategy_create_args& args) {
  if (args.struct_size < offsetof(keel_strategy_create_args, dp_size) + sizeof(args.dp_size))
    invalid("create: args are older than ABI 0.4");
  keel_support::check_strategy_tables(args, {{"scale", KEEL_HAS_SLOT(args.backend, scale)}});
  if (args.dp_comm && !KEEL_HAS_SLOT(args.dp_comm, all_reduce))
    throw StatusError(KEEL_ERR_UNIMPLEMENTED, "the data-parallel communicator lacks all_reduce");
  if (args.dp_comm && (args.dp_size < 1 || args.dp_rank < 0 || args.dp_rank >= args.dp_size))
    invalid("create: dp_rank " + std::to_string(args.dp_rank) + " is outside dp_size " + std::to_string(args.dp_size));
  if (keel_support::pipeline_position(args).size > 1)
    throw StatusError(KEEL_ERR_UNIMPLEMENTED, "create: parallel.pp is " +
                                                  std::to_string(keel_support::pipeline_position(args).size) +
                                                  ", but diloco supports no pipeline parallelism (pp 1 only)");
  if (keel_support::offload_request(args).api)
    throw StatusError(KEEL_ERR_INVALID_CONFIG, "offload: diloco keeps every array resident; remove the offload section");
  return args;
}

}  // namespace

Diloco::Diloco(const keel_host* host, const keel_strategy_create_args& args, Config config)
    : store_(host, checked(args), keel_support::StoreOptions{}),
      dp_comm_(args.dp_comm),
      dp_comm_obj_(args.dp_comm_obj),
      dp_size_(args.dp_comm ? args.dp_size : 1),
      dp_rank_(args.dp_comm ? args.dp_rank : 0),
      config_(config),
      norm_scalar_(store_.backend().alloc_bytes(sizeof(double))),
      start_(size_t(store_.layout().full_elements), 0.0f),
      momentum_(size_t(store_.layout().full_elements), 0.0f) {
  // Each rank reads its own clock: the tp ranks of one replica would close their intervals after
  // different steps and wait for each other in different collectives.
  if (independent_replicas() && config_.simulated_step_seconds.empty() && args.tp_size > 1)
    throw StatusError(KEEL_ERR_UNIMPLEMENTED, "sync_seconds on the clock needs parallel.tp 1 (this run has " +
                                                  std::to_string(args.tp_size) + "): the tensor-parallel ranks of a "
                                                  "replica would each close their intervals after different steps");
  // With the dp group's levels (parallel.dp_groups): each inner group (a site) is one worker whose
  // ranks average their gradients every step, and the outer step averages the workers across.
  if (keel_support::LevelAllReduce::given(args)) {
    if (config_.edit || independent_replicas())
      throw StatusError(KEEL_ERR_UNIMPLEMENTED, std::string("create: parallel.dp_groups makes each group one worker, "
                                                            "which ") + (config_.edit ? "edit's layer-wise syncs" :
                                                            "A-EDiT's sync_seconds") + " do not take yet; use "
                                                            "\"diloco\" with sync_every, or dp_groups \"flat\"");
    levels_ = std::make_unique<keel_support::LevelAllReduce>(args, store_.backend(), store_.layout().full_elements, 0);
    keel_logf(host, KEEL_LOG_INFO, kSource, "workers are the %d data-parallel groups of %d ranks, each averaging its "
              "gradients every step; the outer step averages the groups' parameters through the two levels",
              int(levels_->outer_size()), int(levels_->inner_size()));
  }
  own_state_names_.push_back("params");
  for (int32_t slot = 0; slot < store_.n_state_slots(); ++slot)
    own_state_names_.push_back("optimizer_state." + std::to_string(slot));
  own_state_names_.push_back("diloco.start");
  own_state_names_.push_back("diloco.outer_momentum");
  if (config_.edit) {
    own_state_names_.push_back("edit.pending");
    own_state_names_.push_back("edit.norm_statistics");
    pending_.assign(store_.layout().layers.size(), 0);
    statistics_.assign(store_.layout().layers.size(), NormStatistics{});
  }
  const std::string interval = independent_replicas()
                                   ? std::to_string(config_.sync_seconds) + " s of each replica's training time (A-EDiT" +
                                         (config_.simulated_step_seconds.empty() ? "" : ", simulated step times") + ")"
                                   : std::to_string(config_.sync_every) + " inner steps";
  keel_logf(host, KEEL_LOG_INFO, config_.edit ? "strategy edit" : kSource,
            "%d ranks: %s per interval, outer %s lr %g momentum %g%s", int(dp_size_), interval.c_str(),
            config_.nesterov ? "nesterov" : "sgd", config_.outer_lr, config_.outer_momentum,
            config_.edit ? "; layer-wise syncs in the forward, pseudo-gradient penalty" : "");
}

void Diloco::acquire(int32_t layer, int32_t phase, keel_tensor* params, keel_tensor* grads, size_t n) {
  store_.check_acquire(layer, phase, params, grads, n);
  if (config_.edit && pending_[size_t(layer)]) sync_layer(layer);  // the first use after an interval's end
  store_.describe_layer(layer, store_.full_layer(store_.params(), layer), store_.full_layer(store_.grads(), layer),
                        params, grads, n);
}

void Diloco::release(int32_t layer, int32_t phase, int32_t /*grads_final*/) const { store_.check_layer(layer, phase); }

void Diloco::begin_microbatch(int32_t index, int32_t /*is_last*/) const {
  if (index < 0) invalid("begin_microbatch: index is negative");
}

void Diloco::zero_grads() {
  step_started_ = std::chrono::steady_clock::now();  // a step begins here (the core's first call)
  sync_seconds_in_step_ = 0;
  grads_averaged_ = false;
  store_.backend().fill_zero(store_.grads(), store_.grad_elements());
}

// The dp-mean of the local sums of squares, so every rank clips alike and logs the same norm;
// A-EDiT's replicas, which do not step together, each their own.
double Diloco::grad_sq_norm() {
  average_gradients_in_group();
  double sum_squares = store_.counted_grad_sum_squares();
  if (dp_size_ == 1 || independent_replicas()) return sum_squares;
  const keel_support::BackendOps& backend = store_.backend();
  backend.copy_bytes(norm_scalar_.get(), &sum_squares, sizeof(double), KEEL_COPY_HOST_TO_DEVICE);
  check_callee(dp_comm_->all_reduce(dp_comm_obj_, norm_scalar_.get(), norm_scalar_.get(), 1, kFloat64, KEEL_REDUCE_SUM,
                                    nullptr), "comm all_reduce");
  backend.copy_bytes(&sum_squares, norm_scalar_.get(), sizeof(double), KEEL_COPY_DEVICE_TO_HOST);
  return sum_squares / dp_size_;
}

// The first step's parameters (identical on every rank: the same seed, or the checkpoint's
// replicated values) start the first interval unless a checkpoint restored an interval.
void Diloco::remember_start() {
  store_.backend().copy(start_.data(), store_.params(), store_.layout().full_elements, KEEL_COPY_DEVICE_TO_HOST);
  started_ = true;
}

void Diloco::step(const keel_strategy_step_args& args) {
  keel_support::ParamStore::check_step(args);
  if (!started_) remember_start();
  if (config_.edit) sync_pending_layers();  // a layer the forward never used (none in gpt or llama)
  average_gradients_in_group();
  store_.step_owned(args);
  // By steps, the cadence follows the global step count, so a resumed run syncs on the same
  // steps; by time (A-EDiT), sync_reached decides.
  if (!independent_replicas() && args.step % config_.sync_every == 0) close_interval();
}

void Diloco::close_interval() {
  if (!config_.edit) return outer_step();
  for (size_t l = 0; l < pending_.size(); ++l) pending_[l] = store_.layout().layers[l].numel > 0 ? 1 : 0;
}

// A-EDiT: every replica closes its intervals in the same order, so the syncs' collectives match.
// A step's time runs from zero_grads to here, less the layer syncs' own (waiting for slower
// replicas is not training time); a skipped step's time counts too. An interval restarts from
// zero: the core saves only at syncs, so nothing of it needs saving.
bool Diloco::sync_reached() {
  if (!independent_replicas()) return false;
  const std::vector<double>& simulated = config_.simulated_step_seconds;
  interval_seconds_ += !simulated.empty()
                           ? simulated[size_t(dp_rank_) % simulated.size()]
                           : std::chrono::duration<double>(std::chrono::steady_clock::now() - step_started_).count() -
                                 sync_seconds_in_step_;
  if (interval_seconds_ < config_.sync_seconds * (1 - 1e-12)) return false;  // 4 × 0.1 s closes 0.4 s
  interval_seconds_ = 0;
  if (!started_) remember_start();  // every step so far was skipped: the interval started here
  close_interval();
  return true;
}

// average θ_i over ranks; Δ = start − average; momentum = μ·momentum + Δ;
// start −= lr · (Δ + μ·momentum) (nesterov) or lr · momentum (sgd); every rank continues from start.
void Diloco::outer_step() {
  const int64_t total = store_.layout().full_elements;
  if (total == 0) return;
  const keel_support::BackendOps& backend = store_.backend();
  if (dp_size_ > 1) {  // with levels, a group's ranks hold the same parameters: the mean over ranks is the groups'
    check_callee(levels_ ? levels_->all_reduce(dp_comm_, dp_comm_obj_, store_.params(), size_t(total))
                         : dp_comm_->all_reduce(dp_comm_obj_, store_.params(), store_.params(), size_t(total), kFloat32,
                                                KEEL_REDUCE_SUM, nullptr),
                 "comm all_reduce of the parameters");
    backend.scale(store_.params(), 1.0f / float(dp_size_), total);
  }
  std::vector<float> delta(static_cast<size_t>(total));
  backend.copy(delta.data(), store_.params(), total, KEEL_COPY_DEVICE_TO_HOST);
  for (size_t e = 0; e < delta.size(); ++e) delta[e] = start_[e] - delta[e];
  outer_update(0, total, delta.data());
}

// With levels: the group's mean gradient, once per step, before the norm and the inner step.
void Diloco::average_gradients_in_group() {
  if (!levels_ || grads_averaged_) return;
  grads_averaged_ = true;
  const int64_t n = store_.grad_elements();
  if (levels_->inner_size() == 1 || n == 0) return;
  check_callee(levels_->inner_comm()->all_reduce(levels_->inner_obj(), store_.grads(), store_.grads(), size_t(n),
                                                 kFloat32, KEEL_REDUCE_SUM, nullptr),
               "comm all_reduce of the gradients inside the group");
  store_.backend().scale(store_.grads(), 1.0f / float(levels_->inner_size()), n);
}

void Diloco::outer_update(int64_t begin, int64_t end, const float* delta) {
  const float lr = float(config_.outer_lr), mu = float(config_.outer_momentum);
  for (int64_t e = begin; e < end; ++e) {
    const float d = delta[e - begin];
    momentum_[size_t(e)] = mu * momentum_[size_t(e)] + d;
    start_[size_t(e)] -= lr * (config_.nesterov ? d + mu * momentum_[size_t(e)] : momentum_[size_t(e)]);
  }
  store_.backend().copy(store_.params() + begin, start_.data() + begin, end - begin, KEEL_COPY_HOST_TO_DEVICE);
}

// --- own state ---

const std::string& Diloco::own_state_name(int32_t index) const {
  if (index < 0 || index >= own_state_count())
    invalid("own state index " + std::to_string(index) + " is outside [0, " + std::to_string(own_state_count()) + ")");
  return own_state_names_[size_t(index)];
}

int64_t Diloco::own_state_elements(int32_t index) const {
  const std::string& name = own_state_name(index);
  if (name == "edit.pending") return int64_t(pending_.size());
  if (name == "edit.norm_statistics") return 7 * int64_t(statistics_.size());
  return store_.layout().full_elements;
}

void Diloco::read_own_state(int32_t index, float* dst_host) {
  const std::string& name = own_state_name(index);
  const int64_t n = own_state_elements(index);
  if (n > 0 && !dst_host) invalid("read_own_state: dst_host is NULL");
  const int32_t slots = store_.n_state_slots();
  if (index == 0) return store_.backend().copy(dst_host, store_.params(), n, KEEL_COPY_DEVICE_TO_HOST);
  if (index <= slots) return store_.read_state_shard(index - 1, dst_host);
  if (name == "edit.pending") {
    for (size_t l = 0; l < pending_.size(); ++l) dst_host[l] = float(pending_[l]);
    return;
  }
  if (name == "edit.norm_statistics") {  // a double as three floats whose sum is it exactly; the count
    for (size_t l = 0; l < statistics_.size(); ++l) {
      split_double(statistics_[l].mean, dst_host + 7 * l);
      split_double(statistics_[l].variance, dst_host + 7 * l + 3);
      dst_host[7 * l + 6] = float(std::min<int64_t>(statistics_[l].syncs, 1 << 24));
    }
    return;
  }
  if (!started_) remember_start();  // saved before the first step: the interval starts here
  const std::vector<float>& host = index == slots + 1 ? start_ : momentum_;
  std::copy(host.begin(), host.end(), dst_host);
}

void Diloco::write_own_state(int32_t index, const float* src_host) {
  const std::string& name = own_state_name(index);
  const int64_t n = own_state_elements(index);
  if (n > 0 && !src_host) invalid("write_own_state: src_host is NULL");
  const int32_t slots = store_.n_state_slots();
  if (index == 0) return store_.backend().copy(store_.params(), src_host, n, KEEL_COPY_HOST_TO_DEVICE);
  if (index <= slots) return store_.write_state_shard(index - 1, src_host);
  if (name == "edit.pending") {
    for (size_t l = 0; l < pending_.size(); ++l) pending_[l] = src_host[l] != 0.0f ? 1 : 0;
    return;
  }
  if (name == "edit.norm_statistics") {
    for (size_t l = 0; l < statistics_.size(); ++l) {
      const float* at = src_host + 7 * l;
      const double mean = double(at[0]) + double(at[1]) + double(at[2]);
      const double variance = double(at[3]) + double(at[4]) + double(at[5]);
      const float syncs = at[6];
      if (!std::isfinite(mean) || !(variance >= 0) || !std::isfinite(variance) || !(syncs >= 0 && syncs <= float(1 << 24)))
        invalid("write_own_state: edit.norm_statistics of layer " + std::to_string(l) + " are not a mean, a variance "
                "and a count");
      statistics_[l] = NormStatistics{mean, variance, int64_t(syncs)};
    }
    return;
  }
  std::vector<float>& host = index == slots + 1 ? start_ : momentum_;
  std::copy(src_host, src_host + n, host.begin());
  if (index == slots + 1) started_ = true;
}

}  // namespace keel_diloco
