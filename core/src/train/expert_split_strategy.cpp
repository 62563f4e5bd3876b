// The two halves behind ExpertSplitStrategy's table (expert_split_strategy.h): which parameter
// each holds, each layer's tensors split between them, and every slot forwarded to one or both.
#include "train/expert_split_strategy.h"
#include "train/expert_split_offload.h"

#include <algorithm>
#include <cstring>
#include <exception>
#include <utility>
#include <vector>

#include "host/errors.h"
#include "host/host_table.h"
#include "mesh/collectives.h"

namespace keel {
namespace {

constexpr int kDense = 0, kExperts = 1;

}  // namespace

// One creation of the configured strategy and the parameters it was handed, in the core's order.
struct StrategyHalf {
  void* obj = nullptr;
  std::vector<keel_param_spec> specs;
  keel_param_access access{};
  std::vector<int32_t> layer_tensors;       // how many of each layer's tensors it holds
  std::vector<keel_tensor> params, grads;   // one acquire's descriptors, before they are interleaved
};

struct ExpertSplitHalves {
  const keel_strategy_api* inner = nullptr;
  std::unique_ptr<SharedTier> tier;  // the core's offload tier seen by each half apart; outlives the halves
  StrategyHalf half[2];
  std::vector<std::pair<int32_t, size_t>> where;     // the core's parameter i: (half, its index there)
  std::vector<std::vector<int32_t>> layer_halves;     // each layer's tensors in spec order: their half
  CommGroup core_ep;
  std::string plugin;
  std::vector<std::string> expert_array_names;       // the expert half's own arrays, as the core names them

  ~ExpertSplitHalves() {
    for (StrategyHalf& h : half)
      if (h.obj) inner->destroy(std::exchange(h.obj, nullptr));
  }
};

namespace {

// A slot's body, its KeelError turned into the status and the thread's last error at the edge.
template <typename Body>
keel_status guarded(Body&& body) {
  try {
    return body();
  } catch (const KeelError& e) {
    set_last_error(e.what());
    return e.code;
  } catch (const std::exception& e) {
    set_last_error(e.what());
    return KEEL_ERR_INTERNAL;
  }
}

}  // namespace

struct ExpertSplitSlots {
  static ExpertSplitHalves& of(void* s) { return *static_cast<ExpertSplitStrategy*>(s)->halves_; }
  static StrategyHalf& part(ExpertSplitHalves& h, size_t index, size_t* local) {
    if (index >= h.where.size())
      throw KeelError(KEEL_ERR_INVALID_ARGUMENT, "parameter index " + std::to_string(index) + " is not below " +
                                                     std::to_string(h.where.size()));
    *local = h.where[index].second;
    return h.half[h.where[index].first];
  }
  // Calls `slot` on each half that holds parameters, stopping at the first failure.
  template <typename Slot>
  static keel_status each(ExpertSplitHalves& h, Slot&& slot) {
    for (StrategyHalf& half : h.half)
      if (half.obj)
        if (const keel_status status = slot(half); status != KEEL_OK) return status;
    return KEEL_OK;
  }

  static void destroy(void* s) { delete static_cast<ExpertSplitStrategy*>(s); }

  static keel_status acquire(void* ctx, int32_t layer, int32_t phase, keel_tensor* params, keel_tensor* grads,
                             size_t n) {
    auto& h = *static_cast<ExpertSplitHalves*>(ctx);
    return guarded([&]() -> keel_status {
      if (layer < 0 || size_t(layer) >= h.layer_halves.size() || h.layer_halves[size_t(layer)].size() != n)
        throw KeelError(KEEL_ERR_INVALID_ARGUMENT, "acquire of layer " + std::to_string(layer) + " with " +
                                                       std::to_string(n) + " tensors, which is not the layer's count");
      for (StrategyHalf& half : h.half) {
        const int32_t count = half.obj ? half.layer_tensors[size_t(layer)] : 0;
        if (count == 0) continue;
        half.params.resize(size_t(count));
        half.grads.resize(size_t(count));
        const keel_status status = half.access.acquire(half.access.ctx, layer, phase, half.params.data(),
                                                       grads ? half.grads.data() : nullptr, size_t(count));
        if (status != KEEL_OK) return status;
      }
      size_t taken[2] = {0, 0};
      for (size_t t = 0; t < n; ++t) {
        const int32_t which = h.layer_halves[size_t(layer)][t];
        const size_t j = taken[which]++;
        params[t] = h.half[which].params[j];
        if (grads) grads[t] = h.half[which].grads[j];
      }
      return KEEL_OK;
    });
  }

  static keel_status release(void* ctx, int32_t layer, int32_t phase, int32_t grads_final) {
    auto& h = *static_cast<ExpertSplitHalves*>(ctx);
    return guarded([&]() -> keel_status {
      if (layer < 0 || size_t(layer) >= h.layer_halves.size())
        throw KeelError(KEEL_ERR_INVALID_ARGUMENT, "release of layer " + std::to_string(layer) + ", which is not one");
      return each(h, [&](StrategyHalf& half) -> keel_status {
        return half.layer_tensors[size_t(layer)] ? half.access.release(half.access.ctx, layer, phase, grads_final) : KEEL_OK;
      });
    });
  }

  static keel_status param_access(void* s, keel_param_access* out) {
    out->struct_size = sizeof(*out);
    out->ctx = &of(s);
    out->acquire = &acquire;
    out->release = &release;
    return KEEL_OK;
  }

  static keel_status begin_microbatch(void* s, int32_t index, int32_t is_last) {
    ExpertSplitHalves& h = of(s);
    return each(h, [&](StrategyHalf& half) -> keel_status { return h.inner->begin_microbatch(half.obj, index, is_last); });
  }
  static keel_status zero_grads(void* s) {
    ExpertSplitHalves& h = of(s);
    return each(h, [&](StrategyHalf& half) -> keel_status { return h.inner->zero_grads(half.obj); });
  }
  static keel_status step(void* s, const keel_strategy_step_args* args) {
    ExpertSplitHalves& h = of(s);
    return each(h, [&](StrategyHalf& half) -> keel_status { return h.inner->step(half.obj, args); });
  }

  // The dense half's sum is the same on every dp rank; the expert half's on every rank of the
  // expert-data-parallel group, and the ep block holds different experts: added over the block.
  template <typename Norm>
  static keel_status norm(void* s, double* out, Norm&& of_half) {
    ExpertSplitHalves& h = of(s);
    return guarded([&]() -> keel_status {
      double sums[2] = {0.0, 0.0};
      for (int which : {kDense, kExperts})
        if (h.half[which].obj)
          if (const keel_status status = of_half(h.half[which], &sums[which]); status != KEEL_OK) return status;
      *out = sums[kDense] + sum_in_rank_order(h.core_ep, sums[kExperts]);
      return KEEL_OK;
    });
  }
  static keel_status grad_sq_norm(void* s, double* out) {
    return norm(s, out, [&](StrategyHalf& half, double* sum) -> keel_status { return of(s).inner->grad_sq_norm(half.obj, sum); });
  }
  // The experts' part is the ep block's gradient before the expert-data-parallel reduction, not
  // this rank's alone: close enough for the noise scale, whose ratio it enters.
  static keel_status local_grad_sq_norm(void* s, double* out) {
    ExpertSplitHalves& h = of(s);
    if (!KEEL_HAS_SLOT(h.inner, local_grad_sq_norm)) {
      set_last_error("strategy '" + h.plugin + "' does not report its local gradient norm");
      return KEEL_ERR_UNIMPLEMENTED;
    }
    return norm(s, out, [&](StrategyHalf& half, double* sum) -> keel_status { return h.inner->local_grad_sq_norm(half.obj, sum); });
  }

  static keel_status read_param(void* s, size_t index, int64_t begin, int64_t count, float* dst) {
    return guarded([&]() -> keel_status {
      size_t j = 0;
      StrategyHalf& half = part(of(s), index, &j);
      return of(s).inner->read_param(half.obj, j, begin, count, dst);
    });
  }
  static keel_status write_param(void* s, size_t index, int64_t begin, int64_t count, const float* src) {
    return guarded([&]() -> keel_status {
      size_t j = 0;
      StrategyHalf& half = part(of(s), index, &j);
      return of(s).inner->write_param(half.obj, j, begin, count, src);
    });
  }
  static keel_status read_grad(void* s, size_t index, int64_t begin, int64_t count, float* dst) {
    return guarded([&]() -> keel_status {
      size_t j = 0;
      StrategyHalf& half = part(of(s), index, &j);
      return of(s).inner->read_grad(half.obj, j, begin, count, dst);
    });
  }
  static keel_status read_state(void* s, int32_t slot, size_t index, int64_t begin, int64_t count, float* dst) {
    return guarded([&]() -> keel_status {
      size_t j = 0;
      StrategyHalf& half = part(of(s), index, &j);
      return of(s).inner->read_state(half.obj, slot, j, begin, count, dst);
    });
  }
  static keel_status write_state(void* s, int32_t slot, size_t index, int64_t begin, int64_t count, const float* src) {
    return guarded([&]() -> keel_status {
      size_t j = 0;
      StrategyHalf& half = part(of(s), index, &j);
      return of(s).inner->write_state(half.obj, slot, j, begin, count, src);
    });
  }
  static keel_status owned_range(void* s, int32_t kind, size_t index, int64_t* begin, int64_t* end) {
    return guarded([&]() -> keel_status {
      size_t j = 0;
      StrategyHalf& half = part(of(s), index, &j);
      return of(s).inner->owned_range(half.obj, kind, j, begin, end);
    });
  }

  // Both halves' memory; nothing is whole on every rank, since each ep place holds its own experts.
  static keel_status describe(void* s, keel_strategy_info* out) {
    ExpertSplitHalves& h = of(s);
    const size_t size = out->struct_size;
    keel_strategy_info total{};
    total.struct_size = size;
    total.params_resident = 1;
    const keel_status status = each(h, [&](StrategyHalf& half) -> keel_status {
      keel_strategy_info info{};
      info.struct_size = sizeof(info);
      if (const keel_status st = h.inner->describe(half.obj, &info); st != KEEL_OK) return st;
      total.params_resident = total.params_resident && info.params_resident;
      total.param_bytes += info.param_bytes;
      total.grad_bytes += info.grad_bytes;
      total.state_bytes += info.state_bytes;
      return KEEL_OK;
    });
    if (status != KEEL_OK) return status;
    std::memcpy(out, &total, std::min(size, sizeof(total)));
    return KEEL_OK;
  }

  // The dense half's arrays first, then the expert half's under "experts.<name>".
  static int32_t own_count(ExpertSplitHalves& h, const StrategyHalf& half) {
    int32_t count = 0;
    if (half.obj && KEEL_HAS_SLOT(h.inner, own_state_count) && h.inner->own_state_count)
      check_plugin(h.inner->own_state_count(half.obj, &count), "strategy '" + h.plugin + "' own_state_count");
    return count;
  }
  static StrategyHalf& own_part(ExpertSplitHalves& h, int32_t* index) {
    const int32_t dense = own_count(h, h.half[kDense]);
    if (*index < dense) return h.half[kDense];
    *index -= dense;
    return h.half[kExperts];
  }
  static keel_status own_state_count(void* s, int32_t* out) {
    ExpertSplitHalves& h = of(s);
    return guarded([&]() -> keel_status {
      *out = own_count(h, h.half[kDense]) + own_count(h, h.half[kExperts]);
      return KEEL_OK;
    });
  }
  static keel_status own_state_info(void* s, int32_t index, const char** name, int64_t* count) {
    ExpertSplitHalves& h = of(s);
    return guarded([&]() -> keel_status {
      int32_t local = index;
      StrategyHalf& half = own_part(h, &local);
      if (const keel_status st = h.inner->own_state_info(half.obj, local, name, count); st != KEEL_OK) return st;
      if (&half == &h.half[kExperts]) {
        if (h.expert_array_names.size() <= size_t(local)) h.expert_array_names.resize(size_t(local) + 1);
        h.expert_array_names[size_t(local)] = std::string("experts.") + *name;
        *name = h.expert_array_names[size_t(local)].c_str();
      }
      return KEEL_OK;
    });
  }
  static keel_status read_own_state(void* s, int32_t index, float* dst) {
    ExpertSplitHalves& h = of(s);
    return guarded([&]() -> keel_status {
      StrategyHalf& half = own_part(h, &index);
      return h.inner->read_own_state(half.obj, index, dst);
    });
  }
  static keel_status write_own_state(void* s, int32_t index, const float* src) {
    ExpertSplitHalves& h = of(s);
    return guarded([&]() -> keel_status {
      StrategyHalf& half = own_part(h, &index);
      return h.inner->write_own_state(half.obj, index, src);
    });
  }

  // Refused at create for replicas that step on their own, so never independent here.
  static keel_status independent_replicas(void*, int32_t* out) {
    *out = 0;
    return KEEL_OK;
  }
};

const keel_strategy_api* ExpertSplitStrategy::table() {
  static const keel_strategy_api api = [] {
    keel_strategy_api t{};
    t.struct_size = sizeof(t);
    t.destroy = &ExpertSplitSlots::destroy;
    t.param_access = &ExpertSplitSlots::param_access;
    t.begin_microbatch = &ExpertSplitSlots::begin_microbatch;
    t.zero_grads = &ExpertSplitSlots::zero_grads;
    t.grad_sq_norm = &ExpertSplitSlots::grad_sq_norm;
    t.step = &ExpertSplitSlots::step;
    t.read_param = &ExpertSplitSlots::read_param;
    t.write_param = &ExpertSplitSlots::write_param;
    t.read_grad = &ExpertSplitSlots::read_grad;
    t.read_state = &ExpertSplitSlots::read_state;
    t.write_state = &ExpertSplitSlots::write_state;
    t.owned_range = &ExpertSplitSlots::owned_range;
    t.describe = &ExpertSplitSlots::describe;
    t.own_state_count = &ExpertSplitSlots::own_state_count;
    t.own_state_info = &ExpertSplitSlots::own_state_info;
    t.read_own_state = &ExpertSplitSlots::read_own_state;
    t.write_own_state = &ExpertSplitSlots::write_own_state;
    t.local_grad_sq_norm = &ExpertSplitSlots::local_grad_sq_norm;
    t.independent_replicas = &ExpertSplitSlots::independent_replicas;
    return t;
  }();
  return &api;
}

ExpertSplitStrategy::ExpertSplitStrategy(const keel_strategy_api* inner, const keel_strategy_create_args& args,
                                         const CommGroup& expert_dp, const CommGroup& core_ep,
                                         const std::string& config_file, const std::string& plugin)
    : halves_(std::make_unique<ExpertSplitHalves>()) {
  ExpertSplitHalves& h = *halves_;
  h.inner = inner;
  h.core_ep = core_ep;
  h.plugin = plugin;
  const std::string who = config_file + ": parallel.ep " + std::to_string(core_ep.size) + ": ";
  h.layer_halves.resize(size_t(args.n_layers));
  for (StrategyHalf& half : h.half) half.layer_tensors.assign(size_t(args.n_layers), 0);
  for (size_t i = 0; i < args.n_params; ++i) {
    const keel_param_spec& spec = args.params[i];
    if (spec.layer < 0 || spec.layer >= args.n_layers)
      throw KeelError(KEEL_ERR_INVALID_ARGUMENT, who + "parameter " + spec.name + " has layer " +
                                                     std::to_string(spec.layer) + ", not below the model's " +
                                                     std::to_string(args.n_layers));
    const int which = spec.flags & KEEL_PARAM_EXPERT ? kExperts : kDense;
    if (which == kExperts && (spec.flags & (KEEL_PARAM_STAGE_TIED | KEEL_PARAM_TIED)))
      throw KeelError(KEEL_ERR_INVALID_ARGUMENT, who + "parameter " + spec.name + " is an expert's and tied, which the "
                                                       "expert-data-parallel reduction cannot sum");
    h.where.emplace_back(which, h.half[which].specs.size());
    h.half[which].specs.push_back(spec);
    h.half[which].layer_tensors[size_t(spec.layer)] += 1;
    h.layer_halves[size_t(spec.layer)].push_back(which);
  }
  require_expert_tensors(config_file, core_ep.size, args.pp_size, args.params, args.n_params);
  if (args.offload) h.tier = std::make_unique<SharedTier>(args.offload, args.offload_obj);
  for (int which : {kDense, kExperts}) {
    StrategyHalf& half = h.half[which];
    if (half.specs.empty()) continue;
    keel_strategy_create_args part = args;
    if (h.tier) {
      part.offload = SharedTier::table();
      part.offload_obj = h.tier->view(which == kExperts ? "experts." : "");
    }
    part.params = half.specs.data();
    part.n_params = half.specs.size();
    if (which == kExperts) {
      part.dp_comm = expert_dp.alone() ? nullptr : expert_dp.comm;
      part.dp_comm_obj = expert_dp.alone() ? nullptr : expert_dp.obj;
      part.dp_rank = expert_dp.rank;
      part.dp_size = expert_dp.size;
      part.embedding_comm = nullptr;
      part.embedding_comm_obj = nullptr;
    }
    check_plugin(inner->create(host_table(), &part, &half.obj),
                 "creating strategy '" + plugin + "' over the " + (which == kExperts ? "experts" : "dense parameters"));
    half.access.struct_size = sizeof(half.access);
    check_plugin(inner->param_access(half.obj, &half.access), "strategy '" + plugin + "' param_access");
    int32_t independent = 0;
    if (KEEL_HAS_SLOT(inner, independent_replicas) && inner->independent_replicas)
      check_plugin(inner->independent_replicas(half.obj, &independent), "strategy independent_replicas");
    if (independent)
      throw KeelError(KEEL_ERR_INVALID_CONFIG, who + "strategy '" + plugin + "' lets each replica step on its own, but an "
                                                     "expert's tokens come from every rank of its ep block at every "
                                                     "step; use ddp or zero with ep, or ep 1");
  }
}

ExpertSplitStrategy::~ExpertSplitStrategy() = default;

void require_expert_tensors(const std::string& config_file, int32_t ep, int32_t pp, const keel_param_spec* params,
                            size_t n_params) {
  if (ep == 1 || pp > 1) return;
  for (size_t i = 0; i < n_params; ++i)
    if (params[i].flags & KEEL_PARAM_EXPERT) return;
  throw KeelError(KEEL_ERR_INVALID_CONFIG, config_file + ": parallel.ep " + std::to_string(ep) +
                                               ": the model declares no expert tensor (params.h KEEL_PARAM_EXPERT) to "
                                               "split over the ep ranks; set model.n_experts, or ep 1");
}

}  // namespace keel
