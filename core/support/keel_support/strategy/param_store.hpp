// One parameter store for every strategy: what ddp, zero (1/2/3), the localsgd example and a
// third-party strategy all need and none should re-implement. It lays out this rank's pieces
// (store_layout.hpp), keeps parameters, gradients and optimizer state in homes chosen by a
// HomeFactory (shard_home.hpp: the seam where an offload tier goes), initialises the stored
// elements through the host, hands the model per-layer views, runs the optimizer over the
// elements this rank owns in runs grouped by weight decay, serves the checkpoint's
// owned_range and read/write slots by piece-local flat range, and describes its memory.
// With an offload tier in the create args (strategy.h offload), the arrays the config names
// live there (tier_home.hpp) and the step streams them (state_streamer.hpp); a strategy says
// which arrays it lets the store offload (StoreOptions::offload_supported).
// A strategy is then only its communication policy on top (when gradients are reduced, when
// parameters are gathered or averaged).
//
// Placement: optimizer state always holds this rank's chunks (the whole layout with one shard).
// Parameters and the persistent gradients are either full (every layer's padded region) or
// sharded (this rank's chunks), as StoreOptions says. Methods throw keel_support errors.
#pragma once

#include <keel/host.h>
#include <keel/optimizer.h>
#include <keel/strategy.h>

#include <memory>
#include <string>
#include <vector>

#include "keel_support/common/abi_guard.hpp"
#include "keel_support/common/backend_ops.hpp"
#include "keel_support/model/compute_ops.hpp"
#include "keel_support/strategy/offload_tier.hpp"
#include "keel_support/strategy/packed_state.hpp"
#include "keel_support/strategy/param_specs.hpp"
#include "keel_support/strategy/shard_home.hpp"
#include "keel_support/strategy/stage_tied_grads.hpp"
#include "keel_support/strategy/state_streamer.hpp"
#include "keel_support/strategy/store_checks.hpp"
#include "keel_support/strategy/store_layout.hpp"
#include "keel_support/strategy/sum_squares_batch.hpp"
#include "keel_support/strategy/tier_home.hpp"
#include "keel_support/strategy/tp_pieces.hpp"

namespace keel_support {

struct StoreOptions {
  int32_t shard_rank = 0;   // which chunk of every layer this rank owns (steps, saves)
  int32_t shards = 1;       // how many ranks share the state: 1 keeps everything whole
  bool params_sharded = false;  // keep only this rank's parameter chunks (ZeRO-3)
  bool grads_sharded = false;   // keep only this rank's gradient chunks (ZeRO-2/3)
  std::string sharding_label;   // for messages: "ZeRO stage 3, "
  HomeFactory homes;            // empty: resident backend memory (or the offload tier, below)
  // KEEL_OFFLOAD_* arrays this strategy lets the store keep in the offload tier; the store
  // refuses a request for any other at create. Parameters and gradients only when sharded.
  uint32_t offload_supported = 0;
  bool stream_serially = false;  // the offloaded step without read-ahead (for measurements)
};

class ParamStore {
 public:
  // Checks the tables for the store's own slots (a strategy checks its policy's first, with
  // check_strategy_tables), lays out, allocates every persistent array and initialises the
  // stored parameter elements.
  ParamStore(const keel_host* host, const keel_strategy_create_args& args, StoreOptions options)
      : host_(host),
        backend_{(check_strategy_tables(args), args.backend), args.backend_obj},
        optimizer_(args.optimizer),
        optimizer_obj_(args.optimizer_obj),
        specs_(args.params),
        tp_(tp_position(args)),
        options_(std::move(options)),
        layout_(build_store_layout(args.params, args.n_params, args.n_layers, options_.shard_rank, options_.shards)),
        stage_tied_(args, layout_, backend_) {
    device_ = backend_.device();
    optimizer_info_.struct_size = sizeof(optimizer_info_);
    check_callee(optimizer_->describe(optimizer_obj_, &optimizer_info_), "optimizer describe");
    if (optimizer_info_.n_state_slots < 0 || optimizer_info_.n_state_slots > KEEL_OPTIMIZER_MAX_STATE_SLOTS)
      throw StatusError(KEEL_ERR_INVALID_ARGUMENT, "the optimizer asks for " +
                                                       std::to_string(optimizer_info_.n_state_slots) +
                                                       " state slots; at most " +
                                                       std::to_string(KEEL_OPTIMIZER_MAX_STATE_SLOTS) + " are allowed");
    const HomeFactory make = homes(args);
    params_ = make(StoreArray::kParams, options_.params_sharded ? layout_.shard_elements : layout_.full_elements);
    grads_ = make(StoreArray::kGrads, options_.grads_sharded ? layout_.shard_elements : layout_.full_elements);
    if (optimizer_flags(optimizer_, optimizer_info_) & KEEL_OPTIMIZER_PACKED_STATE)
      make_packed_state();
    else
      for (int32_t slot = 0; slot < optimizer_info_.n_state_slots; ++slot)
        state_.push_back(make(StoreArray::kState, layout_.shard_elements));  // zero: "first step" state
    initialise_params(args.seed);
    make_compute_copy();
  }

  const keel_host* host() const { return host_; }
  const BackendOps& backend() const { return backend_; }
  const StoreLayout& layout() const { return layout_; }
  const keel_param_spec& spec(size_t index) const { return specs_[index]; }
  size_t n_params() const { return layout_.params.size(); }
  TpPosition tp() const { return tp_; }
  // Pipeline position and the STAGE_TIED gradients' sum over the embedding group (0.7).
  const StageTiedGrads& stage_tied() const { return stage_tied_; }
  const keel_optimizer_info& optimizer_info() const { return optimizer_info_; }

  // The arrays' backend addresses; an offloaded one has none (params_tier()/grads_tier()).
  float* params() const { return params_->data(); }
  float* grads() const { return grads_->data(); }
  TierHome* params_tier() const { return params_->tiered(); }
  TierHome* grads_tier() const { return grads_->tiered(); }
  const OffloadTier* tier() const { return tier_.get(); }
  int64_t grad_elements() const { return grads_->elements(); }
  // Element `element` of parameter `index` where the store keeps it.
  float* param_element(size_t index, int64_t element) const { return params() + position(options_.params_sharded, index, element); }
  float* grad_element(size_t index, int64_t element) const { return grads() + position(options_.grads_sharded, index, element); }
  // The layer's padded region in a full array / this rank's chunk in the array, wherever it is.
  float* full_layer(float* full_array, int32_t layer) const { return full_array + layout_.layers[size_t(layer)].full_offset; }
  float* owned_params(int32_t layer) const { return owned_chunk(options_.params_sharded, params(), layer); }
  float* owned_grads(int32_t layer) const { return owned_chunk(options_.grads_sharded, grads(), layer); }

  // --- the model's access ---

  void check_layer(int32_t layer, int32_t phase) const {
    if (layer < 0 || size_t(layer) >= layout_.layers.size())
      throw StatusError(KEEL_ERR_INVALID_ARGUMENT, "layer " + std::to_string(layer) + " is outside [0, " +
                                                       std::to_string(layout_.layers.size()) + ")");
    if (phase != KEEL_PHASE_FORWARD && phase != KEEL_PHASE_BACKWARD)
      throw StatusError(KEEL_ERR_INVALID_ARGUMENT, "phase " + std::to_string(phase) + " is neither forward (" +
                                                       std::to_string(KEEL_PHASE_FORWARD) + ") nor backward (" +
                                                       std::to_string(KEEL_PHASE_BACKWARD) + ")");
  }

  // acquire's argument checks (params.h).
  void check_acquire(int32_t layer, int32_t phase, const keel_tensor* params, const keel_tensor* grads, size_t n) const {
    check_layer(layer, phase);
    const size_t expected = layout_.layers[size_t(layer)].param_indices.size();
    if (n != expected)
      throw StatusError(KEEL_ERR_INVALID_ARGUMENT, "acquire: layer " + std::to_string(layer) + " has " +
                                                       std::to_string(expected) + " parameters, the caller asked for " +
                                                       std::to_string(n));
    if (n > 0 && !params) throw StatusError(KEEL_ERR_INVALID_ARGUMENT, "acquire: params is NULL");
    if (n > 0 && !grads && phase == KEEL_PHASE_BACKWARD)
      throw StatusError(KEEL_ERR_INVALID_ARGUMENT, "acquire: grads is NULL in the backward phase");
  }

  // Descriptors of the layer's pieces inside full regions `param_base` (the store's whole fp32
  // masters) and `grad_base` (a NULL base gives data NULL; grads NULL: none wanted).
  // Under a bf16 compute type the parameters are views of the compute copy (fp32 masters stay
  // here for the optimizer and checkpoints); gradients are fp32 always.
  void describe_layer(int32_t layer, float* param_base, float* grad_base, keel_tensor* params, keel_tensor* grads,
                      size_t n) const {
    void* compute_base = param_base;
    if (compute_params_.get() != nullptr && param_base != nullptr) {
      refresh_compute_layer(layer);
      compute_base = static_cast<char*>(compute_params_.get()) +
                     (param_base - params_->data()) * (compute_dtype_.bits / 8);
    }
    describe_layer_at(layer, compute_base, grad_base, params, grads, n);
  }
  // The same over a layer's full region already at the compute type, wherever it lives (ZeRO-3's
  // gathered layer).
  void describe_layer_at(int32_t layer, void* compute_base, float* grad_base, keel_tensor* params, keel_tensor* grads,
                         size_t n) const {
    const std::vector<size_t>& indices = layout_.layers[size_t(layer)].param_indices;
    for (size_t k = 0; k < n; ++k) {
      params[k] = view(indices[k], nullptr);
      params[k].dtype = compute_dtype_;
      if (compute_base)
        params[k].data = static_cast<char*>(compute_base) + layout_.params[indices[k]].offset_in_layer * (compute_dtype_.bits / 8);
      if (grads) grads[k] = view(indices[k], grad_base);
    }
  }

  // --- the optimizer ---

  static void check_step(const keel_strategy_step_args& args) {
    if (args.step < 1)
      throw StatusError(KEEL_ERR_INVALID_ARGUMENT, "step: step is 1-based, found " + std::to_string(args.step));
  }

  bool applies_weight_decay(size_t index) const { return (specs_[index].flags & optimizer_info_.decay_flags) == 0; }

  // The optimizer over every element this rank owns: one call per maximal run of owned parts
  // that agree on weight decay and lie back to back in the parameter, gradient and state
  // arrays alike (with one shard: every neighbouring pair of parameters). Padding is never
  // handed over.
  // With arrays in the offload tier the same runs are streamed through host buffers.
  void step_owned(const keel_strategy_step_args& args) {
    std::vector<StreamRun> runs;
    for (size_t l = 0; l < layout_.layers.size(); ++l)
      for (size_t index : layout_.layers[l].param_indices) {
        const ElementRange part = layout_.owned_part(index);
        if (part.empty()) continue;
        const StreamRun next{position(options_.params_sharded, index, part.begin),
                             position(options_.grads_sharded, index, part.begin),
                             layout_.shard_position(index, part.begin), part.count(), applies_weight_decay(index)};
        if (!runs.empty()) {
          StreamRun& run = runs.back();
          if (run.decay == next.decay && run.param_position + run.count == next.param_position &&
              run.grad_position + run.count == next.grad_position &&
              run.state_position + run.count == next.state_position) {
            run.count += next.count;
            continue;
          }
        }
        runs.push_back(next);
      }
    auto update = [&](float* params, float* grads, float** state, int64_t count, bool decay) {
      run_optimizer(params, grads, state, count, decay, args);
    };
    mark_compute_copy_stale();  // the step (and a strategy's gathers after it) change the masters
    if (packed_) {  // one call per owned tensor part, on its packed buffer
      for (size_t index = 0; index < n_params(); ++index) {
        const ElementRange part = layout_.owned_part(index);
        if (part.empty()) continue;
        PackedState::Part& packed = packed_->for_step(index);
        run_optimizer(params() + position(options_.params_sharded, index, part.begin),
                      grads() + position(options_.grads_sharded, index, part.begin), nullptr, part.count(),
                      applies_weight_decay(index), args, &packed);
      }
      return;
    }
    if (!tier_) {
      float* state[KEEL_OPTIMIZER_MAX_STATE_SLOTS] = {};
      for (const StreamRun& run : runs) {
        for (size_t slot = 0; slot < state_.size(); ++slot) state[slot] = state_[slot]->data() + run.state_position;
        update(params() + run.param_position, grads() + run.grad_position, state, run.count, run.decay);
      }
      return;
    }
    if (!streamer_) {  // its buffers stay for the run's next steps
      std::vector<StreamArray> arrays{stream_array(*params_, true), stream_array(*grads_, false)};
      for (const auto& slot : state_) arrays.push_back(stream_array(*slot, true));
      streamer_ = std::make_unique<StateStreamer>(*tier_, backend_, device_, std::move(arrays), layout_.shard_elements,
                                                  !options_.stream_serially);
    }
    streamer_->step(runs, update);
  }

  // Σ g² over the gradients this rank's grad_sq_norm counts (tp: replicated ones on tp rank 0
  // only; pp: no STAGE_COPY), one backend call per run of counted parameters back to back in
  // the gradient array (the whole array at tp rank 0 without a copy), read back once. For
  // strategies whose gradients are whole (one shard).
  double counted_grad_sum_squares() const {
    SumSquaresBatch sum(backend_);
    const size_t n = n_params();
    for (size_t first = 0; first < n;) {
      const bool counted = counts_in_grad_norm(specs_[first], tp_);
      size_t end = first + 1;
      while (end < n && counts_in_grad_norm(specs_[end], tp_) == counted &&
             grad_element(end, 0) == grad_element(end - 1, 0) + layout_.params[end - 1].numel)
        ++end;
      const float* begin = grad_element(first, 0);
      const int64_t count = grad_element(end - 1, 0) + layout_.params[end - 1].numel - begin;
      if (counted) sum.add(begin, count);
      first = end;
    }
    return sum.total();
  }

  // --- host access by piece-local flat range (checkpoints, bindings) ---

  // kind -1: the parameter (whole unless parameters are sharded); kind k: state slot k (owned part).
  void owned_range(int32_t kind, size_t index, int64_t* begin, int64_t* end) const {
    if (!begin || !end) throw StatusError(KEEL_ERR_INVALID_ARGUMENT, "owned_range: begin or end is NULL");
    check_range("owned_range", index, 0, 0, nullptr);
    if (kind != -1) check_slot("owned_range", kind);
    const ElementRange owned = (kind == -1 && !options_.params_sharded) ? ElementRange{0, layout_.params[index].numel}
                                                                         : layout_.owned_part(index);
    *begin = owned.begin;
    *end = owned.end;
  }

  void read_param(size_t index, int64_t begin, int64_t count, float* dst_host) const {
    check_range("read_param", index, begin, count, dst_host);
    if (options_.params_sharded) check_owned("read_param", "parameter", index, begin, count);
    if (count > 0) read_array(*params_, position(options_.params_sharded, index, begin), count, dst_host);
  }
  void write_param(size_t index, int64_t begin, int64_t count, const float* src_host) {
    check_range("write_param", index, begin, count, src_host);
    if (options_.params_sharded) check_owned("write_param", "parameter", index, begin, count);
    if (count > 0) write_array(*params_, position(options_.params_sharded, index, begin), count, src_host);
    mark_compute_copy_stale();
  }
  // Full gradients: any range; sharded: the owned part.
  void read_grad(size_t index, int64_t begin, int64_t count, float* dst_host) const {
    check_range("read_grad", index, begin, count, dst_host);
    if (options_.grads_sharded) check_owned("read_grad", "gradient", index, begin, count);
    if (count > 0) read_array(*grads_, position(options_.grads_sharded, index, begin), count, dst_host);
  }
  // Optimizer state in its exchange form (fp32 per element), packed or not.
  void read_state(int32_t slot, size_t index, int64_t begin, int64_t count, float* dst_host) const {
    check_range("read_state", index, begin, count, dst_host);
    check_slot("read_state", slot);
    check_owned("read_state", "optimizer state", index, begin, count);
    if (count == 0) return;
    if (packed_) return packed_->read(slot, index, begin, count, dst_host);
    read_array(*state_[size_t(slot)], layout_.shard_position(index, begin), count, dst_host);
  }
  void write_state(int32_t slot, size_t index, int64_t begin, int64_t count, const float* src_host) {
    check_range("write_state", index, begin, count, src_host);
    check_slot("write_state", slot);
    check_owned("write_state", "optimizer state", index, begin, count);
    if (count == 0) return;
    if (packed_) return packed_->write(slot, index, begin, count, src_host);
    write_array(*state_[size_t(slot)], layout_.shard_position(index, begin), count, src_host);
  }

  int32_t n_state_slots() const { return optimizer_info_.n_state_slots; }
  // State slot `slot`'s fp32 shard array; `what` names the caller in the message. An optimizer
  // with packed state has none: read_state_shard and write_state_shard serve both kinds.
  float* state(const char* what, int32_t slot) const {
    check_slot(what, slot);
    if (packed_)
      throw StatusError(KEEL_ERR_UNIMPLEMENTED, std::string(what) + ": the optimizer keeps its state packed (ABI "
                                                                    "0.12), not as fp32 arrays; use read_state_shard "
                                                                    "or write_state_shard");
    return state_[size_t(slot)]->data();
  }
  // State slot `slot` over this rank's whole shard (layout_.shard_elements values, padding
  // zero), in the exchange form: what a strategy that saves its replica's state as its own
  // (diloco, localsgd) reads and writes.
  void read_state_shard(int32_t slot, float* dst_host) const {
    check_slot("read_state_shard", slot);
    if (!packed_) return read_array(*state_[size_t(slot)], 0, layout_.shard_elements, dst_host);
    std::fill(dst_host, dst_host + layout_.shard_elements, 0.0f);
    for (size_t index = 0; index < n_params(); ++index) {
      const ElementRange part = layout_.owned_part(index);
      if (!part.empty())
        packed_->read(slot, index, part.begin, part.count(), dst_host + layout_.shard_position(index, part.begin));
    }
  }
  void write_state_shard(int32_t slot, const float* src_host) {
    check_slot("write_state_shard", slot);
    if (!packed_) return write_array(*state_[size_t(slot)], 0, layout_.shard_elements, src_host);
    for (size_t index = 0; index < n_params(); ++index) {
      const ElementRange part = layout_.owned_part(index);
      if (!part.empty())
        packed_->write(slot, index, part.begin, part.count(), src_host + layout_.shard_position(index, part.begin));
    }
  }

  // The persistent arrays' bytes; the strategy says whether parameters stay resident and whole.
  keel_strategy_info describe(int32_t params_resident) const {
    keel_strategy_info info{};
    info.struct_size = sizeof(info);
    info.params_resident = params_resident;
    info.param_bytes = params_->backend_bytes() + compute_params_.bytes();
    info.grad_bytes = grads_->backend_bytes();
    for (const auto& slot : state_) info.state_bytes += slot->backend_bytes();
    if (packed_) info.state_bytes += packed_->bytes();
    return info;
  }

 private:
  void check_slot(const char* what, int32_t slot) const {
    if (slot < 0 || slot >= optimizer_info_.n_state_slots)
      throw StatusError(KEEL_ERR_INVALID_ARGUMENT, std::string(what) + ": state slot " + std::to_string(slot) +
                                                       " is outside [0, " + std::to_string(optimizer_info_.n_state_slots) +
                                                       ") (the optimizer's n_state_slots)");
  }

  // Packed state (optimizer.h 0.12) is host memory the optimizer computes on: the parameters
  // and gradients must be host memory too, and nothing of it goes to an offload tier.
  void make_packed_state() {
    if (device_.device_type != KEEL_DEVICE_CPU)
      throw StatusError(KEEL_ERR_UNIMPLEMENTED, "the optimizer keeps its state packed and updates on the host, but "
                                                "the backend's memory is device type " +
                                                    std::to_string(device_.device_type) + " (expected the cpu backend)");
    if (tier_)
      throw StatusError(KEEL_ERR_INVALID_CONFIG, "offload: the optimizer keeps its state packed in host memory of its "
                                                 "own; it cannot be offloaded (expected no offload section)");
    packed_ = std::make_unique<PackedState>(optimizer_, optimizer_obj_, optimizer_info_, specs_, layout_,
                                            options_.shards > 1, options_.sharding_label);
  }

  // Host access to elements [position, position + count) of an array, wherever it lives.
  void read_array(const ShardHome& home, int64_t at, int64_t count, float* dst_host) const {
    if (TierHome* tiered = const_cast<ShardHome&>(home).tiered()) return tiered->read(at, count, dst_host);
    backend_.copy(dst_host, const_cast<ShardHome&>(home).data() + at, count, KEEL_COPY_DEVICE_TO_HOST);
  }
  void write_array(ShardHome& home, int64_t at, int64_t count, const float* src_host) const {
    if (TierHome* tiered = home.tiered()) return tiered->write(at, count, src_host);
    backend_.copy(home.data() + at, src_host, count, KEEL_COPY_HOST_TO_DEVICE);
  }

  static StreamArray stream_array(ShardHome& home, bool written) {
    StreamArray array;
    array.tier = home.tiered();
    if (!array.tier) array.resident = home.data();
    array.written = written;
    return array;
  }

  // The homes of the arrays: the strategy's factory, else the offload tier for the arrays the
  // create args ask for (each checked against what the strategy supports), else resident.
  HomeFactory homes(const keel_strategy_create_args& args) {
    const OffloadRequest request = offload_request(args);
    if (options_.homes && request.api)
      throw StatusError(KEEL_ERR_INVALID_CONFIG, "offload: " + options_.sharding_label +
                                                     "this strategy places the store's arrays itself and cannot "
                                                     "keep them in the offload tier (expected no offload section)");
    if (options_.homes) return options_.homes;
    if (!request.api) return resident_homes(backend_);
    const uint32_t known = KEEL_OFFLOAD_OPTIMIZER_STATE | KEEL_OFFLOAD_PARAMS | KEEL_OFFLOAD_GRADIENTS;
    if (request.arrays & ~known)
      throw StatusError(KEEL_ERR_INVALID_CONFIG, "offload: offload_arrays has unknown flags " +
                                                     std::to_string(request.arrays & ~known) + " (known: KEEL_OFFLOAD_*)");
    for (uint32_t array : {uint32_t(KEEL_OFFLOAD_OPTIMIZER_STATE), uint32_t(KEEL_OFFLOAD_PARAMS), uint32_t(KEEL_OFFLOAD_GRADIENTS)}) {
      if (!request.wants(array)) continue;
      const bool sharded_enough = array == KEEL_OFFLOAD_OPTIMIZER_STATE ||
                                  (array == KEEL_OFFLOAD_PARAMS ? options_.params_sharded : options_.grads_sharded);
      if ((options_.offload_supported & array) && sharded_enough) continue;
      throw StatusError(KEEL_ERR_INVALID_CONFIG,
                        std::string(offload_key(array)) + ": " + options_.sharding_label +
                            "this strategy cannot keep that array in the offload tier: it reaches the array's memory "
                            "directly (expected false, or a strategy that streams it, e.g. zero stage 3 for params, "
                            "stage 2 or 3 for gradients)");
    }
    tier_ = std::make_shared<const OffloadTier>(request, backend_);
    return tier_homes(tier_, request.arrays, resident_homes(backend_));
  }

  int64_t position(bool sharded, size_t index, int64_t element) const {
    return sharded ? layout_.shard_position(index, element) : layout_.full_position(index, element);
  }
  float* owned_chunk(bool sharded, float* array, int32_t layer) const {
    const LayerPlace& place = layout_.layers[size_t(layer)];
    return sharded ? array + place.shard_offset : array + place.full_offset + layout_.owned_chunk(layer).begin;
  }

  void initialise_params(uint64_t seed) {
    std::vector<float> staging;
    for (size_t i = 0; i < n_params(); ++i) {
      // Full parameters: the whole piece; sharded: only the owned part.
      const ElementRange stored = options_.params_sharded ? layout_.owned_part(i) : ElementRange{0, layout_.params[i].numel};
      if (stored.empty()) continue;
      staging.resize(size_t(stored.count()));
      init_piece_elements(host_, specs_[i], i, seed, stored.begin, stored.count(), staging.data());
      write_array(*params_, position(options_.params_sharded, i, stored.begin), stored.count(), staging.data());
    }
  }

  // The bf16 compute copy (backend.h 0.8): made when the backend computes in another type than
  // fp32, for whole parameters only. Each layer is converted from the fp32 masters when
  // it is next acquired after they changed (a step, a write).
  void make_compute_copy() {
    compute_dtype_ = compute_dtype_of(backend_);
    if (is_fp32(compute_dtype_)) return;
    if (!KEEL_HAS_SLOT(backend_.api, convert))
      throw StatusError(KEEL_ERR_UNIMPLEMENTED, "the backend computes in bf16 but has no convert (ABI 0.8)");
    // Sharded parameters (ZeRO-3, resident or offloaded) have no whole copy: the strategy
    // converts each chunk as it gathers the layer (describe_layer_at).
    if (options_.params_sharded) return;
    compute_params_ = backend_.alloc_bytes(size_t(layout_.full_elements) * size_t(compute_dtype_.bits / 8));
    mark_compute_copy_stale();
  }
  void mark_compute_copy_stale() { compute_stale_.assign(layout_.layers.size(), 1); }
  void refresh_compute_layer(int32_t layer) const {
    if (!compute_stale_[size_t(layer)]) return;
    const LayerPlace& place = layout_.layers[size_t(layer)];
    const int64_t padded = place.chunk * layout_.size;
    char* compute = static_cast<char*>(compute_params_.get()) + place.full_offset * (compute_dtype_.bits / 8);
    if (padded > 0)
      check_callee(backend_.api->convert(backend_.obj, compute, compute_dtype_, params_->data() + place.full_offset,
                                         keel_dtype{KEEL_DTYPE_FLOAT, 32, 1}, padded),
                   "backend convert (the parameters' compute copy)");
    compute_stale_[size_t(layer)] = 0;
  }
  keel_tensor view(size_t index, float* layer_base) const {
    const keel_param_spec& spec = specs_[index];
    keel_tensor tensor{};
    tensor.data = layer_base ? layer_base + layout_.params[index].offset_in_layer : nullptr;
    tensor.device = device_;
    tensor.ndim = spec.ndim;
    tensor.dtype = keel_dtype{KEEL_DTYPE_FLOAT, 32, 1};
    for (int32_t d = 0; d < spec.ndim; ++d) tensor.shape[d] = spec.local_shape[d];
    return tensor;
  }

  void run_optimizer(float* params, float* grads, float** state, int64_t count, bool decay,
                     const keel_strategy_step_args& args, PackedState::Part* packed = nullptr) {
    if (count == 0) return;
    keel_optimizer_step_args step_args{};
    step_args.struct_size = sizeof(step_args);
    step_args.device = device_;
    step_args.params = params;
    step_args.grads = grads;
    step_args.state = state;
    step_args.n = count;
    step_args.lr = args.lr;
    step_args.grad_scale = args.grad_scale;
    step_args.step = args.step;
    step_args.backend = backend_.api;
    step_args.backend_obj = backend_.obj;
    step_args.apply_weight_decay = decay ? 1 : 0;
    step_args.range = keel_optimizer_range{sizeof(keel_optimizer_range), count, nullptr, 0};
    if (packed) {
      step_args.packed_state = packed->bytes.data();
      step_args.range = packed->range;
    }
    check_callee(optimizer_->step(optimizer_obj_, &step_args), "optimizer step");
  }

  void check_range(const char* what, size_t index, int64_t begin, int64_t count, const void* host_ptr) const {
    if (index >= n_params())
      throw StatusError(KEEL_ERR_INVALID_ARGUMENT, std::string(what) + ": parameter index " + std::to_string(index) +
                                                       " is outside [0, " + std::to_string(n_params()) + ")");
    check_piece_range(what, specs_[index], index, layout_.params[index].numel, begin, count, host_ptr);
  }

  void check_owned(const char* what, const char* kind, size_t index, int64_t begin, int64_t count) const {
    const ElementRange owned = layout_.owned_part(index);
    if (count == 0 || (begin >= owned.begin && begin + count <= owned.end)) return;
    throw StatusError(KEEL_ERR_INVALID_ARGUMENT,
                      std::string(what) + ": " + spec_label(specs_[index], index) + "'s " + kind + " is sharded (" +
                          options_.sharding_label + "rank " + std::to_string(layout_.rank) + " of " +
                          std::to_string(layout_.size) + "): this rank holds elements [" +
                          std::to_string(owned.begin) + ", " + std::to_string(owned.end) + "), not [" +
                          std::to_string(begin) + ", " + std::to_string(begin + count) + "); stay within owned_range");
  }

  const keel_host* host_;
  BackendOps backend_;
  const keel_optimizer_api* optimizer_;
  void* optimizer_obj_;
  const keel_param_spec* specs_;  // the model's; outlives the strategy
  TpPosition tp_;
  StoreOptions options_;
  StoreLayout layout_;
  StageTiedGrads stage_tied_;  // after layout_ and backend_, which it reads
  keel_device device_{};
  keel_optimizer_info optimizer_info_{};
  std::shared_ptr<const OffloadTier> tier_;  // NULL: nothing offloaded; before the homes that use it
  std::unique_ptr<ShardHome> params_, grads_;
  std::vector<std::unique_ptr<ShardHome>> state_;  // one per optimizer state slot (none when packed)
  std::unique_ptr<PackedState> packed_;            // the optimizer's packed state (0.12), or NULL
  std::unique_ptr<StateStreamer> streamer_;        // the offloaded step's, made at the first step
  keel_dtype compute_dtype_{KEEL_DTYPE_FLOAT, 32, 1};
  BackendBuffer compute_params_;              // bf16 compute copy of the full parameters, or empty
  mutable std::vector<char> compute_stale_;   // per layer: the masters changed since its conversion
};

}  // namespace keel_support
