// The two parts behind SplitStrategy's table (split_strategy.h): which parameter each holds,
// each layer's tensors split between them, and every slot forwarded to one or both.
#include "train/split_strategy.h"

#include <algorithm>
#include <cstring>
#include <exception>
#include <utility>
#include <vector>

#include "host/errors.h"
#include "host/host_table.h"

namespace keel {

// One part: its strategy and the parameters it was handed, in the core's order.
struct SplitPart {
  const keel_strategy_api* api = nullptr;
  void* obj = nullptr;
  std::string plugin;                       // names it in messages
  std::string own_prefix;                   // before its own arrays' names
  std::vector<std::string> own_names;       // those names, prefixed, valid for the split's life
  std::vector<keel_param_spec> specs;
  keel_param_access access{};
  std::vector<int32_t> layer_tensors;       // how many of each layer's tensors it holds
  std::vector<keel_tensor> params, grads;   // one acquire's descriptors, before they are interleaved
};

struct SplitParts {
  SplitPart half[2];
  std::vector<std::pair<int32_t, size_t>> where;  // the core's parameter i: (part, its index there)
  std::vector<std::vector<int32_t>> layer_halves;  // each layer's tensors in spec order: their part

  void destroy() {
    for (SplitPart& h : half)
      if (h.obj) h.api->destroy(std::exchange(h.obj, nullptr));
  }
  ~SplitParts() { destroy(); }
};

struct SplitSlots {
  static SplitParts& of(void* s) { return *static_cast<SplitStrategy*>(s)->parts_; }
  static SplitPart& part(SplitParts& h, size_t index, size_t* local) {
    if (index >= h.where.size())
      throw KeelError(KEEL_ERR_INVALID_ARGUMENT, "parameter index " + std::to_string(index) + " is not below " +
                                                     std::to_string(h.where.size()));
    *local = h.where[index].second;
    return h.half[h.where[index].first];
  }
  // Calls `slot` on each half that holds parameters, stopping at the first failure.
  template <typename Slot>
  static keel_status each(SplitParts& h, Slot&& slot) {
    for (SplitPart& half : h.half)
      if (half.obj)
        if (const keel_status status = slot(half); status != KEEL_OK) return status;
    return KEEL_OK;
  }

  static void destroy(void* s) { delete static_cast<SplitStrategy*>(s); }

  static keel_status acquire(void* ctx, int32_t layer, int32_t phase, keel_tensor* params, keel_tensor* grads,
                             size_t n) {
    auto& h = *static_cast<SplitParts*>(ctx);
    return status_of([&]() -> keel_status {
      if (layer < 0 || size_t(layer) >= h.layer_halves.size() || h.layer_halves[size_t(layer)].size() != n)
        throw KeelError(KEEL_ERR_INVALID_ARGUMENT, "acquire of layer " + std::to_string(layer) + " with " +
                                                       std::to_string(n) + " tensors, which is not the layer's count");
      for (size_t k = 0; k < 2; ++k) {
        SplitPart& half = h.half[k];
        const int32_t count = half.obj ? half.layer_tensors[size_t(layer)] : 0;
        if (count == 0) continue;
        half.params.resize(size_t(count));
        half.grads.resize(size_t(count));
        const keel_status status = half.access.acquire(half.access.ctx, layer, phase, half.params.data(),
                                                       grads ? half.grads.data() : nullptr, size_t(count));
        if (status != KEEL_OK) {  // the half acquired before this one lets go again
          if (k == 1 && h.half[0].obj && h.half[0].layer_tensors[size_t(layer)] > 0)
            h.half[0].access.release(h.half[0].access.ctx, layer, phase, 0);
          return status;
        }
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
    auto& h = *static_cast<SplitParts*>(ctx);
    return status_of([&]() -> keel_status {
      if (layer < 0 || size_t(layer) >= h.layer_halves.size())
        throw KeelError(KEEL_ERR_INVALID_ARGUMENT, "release of layer " + std::to_string(layer) + ", which is not one");
      return each(h, [&](SplitPart& half) -> keel_status {
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
    SplitParts& h = of(s);
    return each(h, [&](SplitPart& half) -> keel_status { return half.api->begin_microbatch(half.obj, index, is_last); });
  }
  static keel_status zero_grads(void* s) {
    SplitParts& h = of(s);
    return each(h, [&](SplitPart& half) -> keel_status { return half.api->zero_grads(half.obj); });
  }
  static keel_status step(void* s, const keel_strategy_step_args* args) {
    SplitParts& h = of(s);
    return each(h, [&](SplitPart& half) -> keel_status { return half.api->step(half.obj, args); });
  }

  // Each part's sum, joined as the split says (SplitStrategy::join_norms).
  template <typename Norm>
  static keel_status norm(void* s, double* out, Norm&& of_half) {
    SplitParts& h = of(s);
    return status_of([&]() -> keel_status {
      double sums[2] = {0.0, 0.0};
      for (int which : {0, 1})
        if (h.half[which].obj)
          if (const keel_status status = of_half(h.half[which], &sums[which]); status != KEEL_OK) return status;
      *out = static_cast<SplitStrategy*>(s)->join_norms(sums[0], sums[1]);
      return KEEL_OK;
    });
  }
  static keel_status grad_sq_norm(void* s, double* out) {
    return norm(s, out, [&](SplitPart& half, double* sum) -> keel_status { return half.api->grad_sq_norm(half.obj, sum); });
  }
  static keel_status local_grad_sq_norm(void* s, double* out) {
    SplitParts& h = of(s);
    for (const SplitPart& half : h.half)
      if (half.obj && !(KEEL_HAS_SLOT(half.api, local_grad_sq_norm) && half.api->local_grad_sq_norm)) {
        set_last_error("strategy '" + half.plugin + "' does not report its local gradient norm");
        return KEEL_ERR_UNIMPLEMENTED;
      }
    return norm(s, out, [&](SplitPart& half, double* sum) -> keel_status { return half.api->local_grad_sq_norm(half.obj, sum); });
  }

  static keel_status read_param(void* s, size_t index, int64_t begin, int64_t count, float* dst) {
    return status_of([&]() -> keel_status {
      size_t j = 0;
      SplitPart& half = part(of(s), index, &j);
      return half.api->read_param(half.obj, j, begin, count, dst);
    });
  }
  static keel_status write_param(void* s, size_t index, int64_t begin, int64_t count, const float* src) {
    return status_of([&]() -> keel_status {
      size_t j = 0;
      SplitPart& half = part(of(s), index, &j);
      return half.api->write_param(half.obj, j, begin, count, src);
    });
  }
  static keel_status read_grad(void* s, size_t index, int64_t begin, int64_t count, float* dst) {
    return status_of([&]() -> keel_status {
      size_t j = 0;
      SplitPart& half = part(of(s), index, &j);
      return half.api->read_grad(half.obj, j, begin, count, dst);
    });
  }
  static keel_status read_state(void* s, int32_t slot, size_t index, int64_t begin, int64_t count, float* dst) {
    return status_of([&]() -> keel_status {
      size_t j = 0;
      SplitPart& half = part(of(s), index, &j);
      return half.api->read_state(half.obj, slot, j, begin, count, dst);
    });
  }
  static keel_status write_state(void* s, int32_t slot, size_t index, int64_t begin, int64_t count, const float* src) {
    return status_of([&]() -> keel_status {
      size_t j = 0;
      SplitPart& half = part(of(s), index, &j);
      return half.api->write_state(half.obj, slot, j, begin, count, src);
    });
  }
  static keel_status owned_range(void* s, int32_t kind, size_t index, int64_t* begin, int64_t* end) {
    return status_of([&]() -> keel_status {
      size_t j = 0;
      SplitPart& half = part(of(s), index, &j);
      return half.api->owned_range(half.obj, kind, j, begin, end);
    });
  }

  // Both parts' memory; whole only where both parts are, and the split allows.
  static keel_status describe(void* s, keel_strategy_info* out) {
    SplitParts& h = of(s);
    const size_t size = out->struct_size;
    keel_strategy_info total{};
    total.struct_size = size;
    total.params_resident = 1;
    total.holds_whole = static_cast<SplitStrategy*>(s)->holds_whole_mask_;
    total.dp_levels = 1;  // every part's, below
    const keel_status status = each(h, [&](SplitPart& half) -> keel_status {
      keel_strategy_info info{};
      info.struct_size = sizeof(info);
      if (const keel_status st = half.api->describe(half.obj, &info); st != KEEL_OK) return st;
      total.params_resident = total.params_resident && info.params_resident;
      total.param_bytes += info.param_bytes;
      total.grad_bytes += info.grad_bytes;
      total.state_bytes += info.state_bytes;
      total.holds_whole &= info.holds_whole;
      total.dp_levels &= info.dp_levels;
      return KEEL_OK;
    });
    if (status != KEEL_OK) return status;
    std::memcpy(out, &total, std::min(size, sizeof(total)));
    return KEEL_OK;
  }

  // The first part's arrays, then the second's under its prefix.
  static int32_t own_count(const SplitPart& half) {
    int32_t count = 0;
    if (half.obj && KEEL_HAS_SLOT(half.api, own_state_count) && half.api->own_state_count)
      check_plugin(half.api->own_state_count(half.obj, &count), "strategy '" + half.plugin + "' own_state_count");
    return count;
  }
  static SplitPart& own_part(SplitParts& h, int32_t* index) {
    const int32_t first = own_count(h.half[0]);
    if (*index < first) return h.half[0];
    *index -= first;
    return h.half[1];
  }
  static keel_status own_state_count(void* s, int32_t* out) {
    SplitParts& h = of(s);
    return status_of([&]() -> keel_status {
      *out = own_count(h.half[0]) + own_count(h.half[1]);
      return KEEL_OK;
    });
  }
  static keel_status own_state_info(void* s, int32_t index, const char** name, int64_t* count) {
    SplitParts& h = of(s);
    return status_of([&]() -> keel_status {
      int32_t local = index;
      SplitPart& half = own_part(h, &local);
      if (const keel_status st = half.api->own_state_info(half.obj, local, name, count); st != KEEL_OK) return st;
      if (!half.own_prefix.empty()) {
        if (half.own_names.size() <= size_t(local)) half.own_names.resize(size_t(local) + 1);
        half.own_names[size_t(local)] = half.own_prefix + *name;
        *name = half.own_names[size_t(local)].c_str();
      }
      return KEEL_OK;
    });
  }
  static keel_status read_own_state(void* s, int32_t index, float* dst) {
    SplitParts& h = of(s);
    return status_of([&]() -> keel_status {
      SplitPart& half = own_part(h, &index);
      return half.api->read_own_state(half.obj, index, dst);
    });
  }
  static keel_status write_own_state(void* s, int32_t index, const float* src) {
    SplitParts& h = of(s);
    return status_of([&]() -> keel_status {
      SplitPart& half = own_part(h, &index);
      return half.api->write_own_state(half.obj, index, src);
    });
  }

  // Refused at attach for replicas that step on their own, so never independent here.
  static keel_status independent_replicas(void*, int32_t* out) {
    *out = 0;
    return KEEL_OK;
  }
};

const keel_strategy_api* SplitStrategy::table() {
  static const keel_strategy_api api = [] {
    keel_strategy_api t{};
    t.struct_size = sizeof(t);
    t.destroy = &SplitSlots::destroy;
    t.param_access = &SplitSlots::param_access;
    t.begin_microbatch = &SplitSlots::begin_microbatch;
    t.zero_grads = &SplitSlots::zero_grads;
    t.grad_sq_norm = &SplitSlots::grad_sq_norm;
    t.step = &SplitSlots::step;
    t.read_param = &SplitSlots::read_param;
    t.write_param = &SplitSlots::write_param;
    t.read_grad = &SplitSlots::read_grad;
    t.read_state = &SplitSlots::read_state;
    t.write_state = &SplitSlots::write_state;
    t.owned_range = &SplitSlots::owned_range;
    t.describe = &SplitSlots::describe;
    t.own_state_count = &SplitSlots::own_state_count;
    t.own_state_info = &SplitSlots::own_state_info;
    t.read_own_state = &SplitSlots::read_own_state;
    t.write_own_state = &SplitSlots::write_own_state;
    t.local_grad_sq_norm = &SplitSlots::local_grad_sq_norm;
    t.independent_replicas = &SplitSlots::independent_replicas;
    return t;
  }();
  return &api;
}


SplitStrategy::SplitStrategy(const keel_param_spec* params, size_t n_params, int32_t n_layers,
                             const std::function<bool(const keel_param_spec&)>& second, const std::string& who)
    : parts_(std::make_unique<SplitParts>()) {
  SplitParts& h = *parts_;
  h.layer_halves.resize(size_t(n_layers));
  for (SplitPart& half : h.half) half.layer_tensors.assign(size_t(n_layers), 0);
  for (size_t i = 0; i < n_params; ++i) {
    const keel_param_spec& spec = params[i];
    if (spec.layer < 0 || spec.layer >= n_layers)
      throw KeelError(KEEL_ERR_INVALID_ARGUMENT, who + "parameter " + spec.name + " has layer " +
                                                     std::to_string(spec.layer) + ", not below the model's " +
                                                     std::to_string(n_layers));
    const int which = second(spec) ? 1 : 0;
    h.where.emplace_back(which, h.half[which].specs.size());
    h.half[which].specs.push_back(spec);
    h.half[which].layer_tensors[size_t(spec.layer)] += 1;
    h.layer_halves[size_t(spec.layer)].push_back(which);
  }
}

SplitStrategy::~SplitStrategy() = default;

const std::vector<keel_param_spec>& SplitStrategy::part_specs(int which) const { return parts_->half[which].specs; }

void SplitStrategy::attach(int which, const keel_strategy_api* api, void* obj, const std::string& plugin,
                           const std::string& own_prefix, const std::string& why_not_independent) {
  SplitPart& half = parts_->half[which];
  half.api = api;
  half.obj = obj;
  half.plugin = plugin;
  half.own_prefix = own_prefix;
  half.access.struct_size = sizeof(half.access);
  check_plugin(api->param_access(obj, &half.access), "strategy '" + plugin + "' param_access");
  int32_t independent = 0;
  if (KEEL_HAS_SLOT(api, independent_replicas) && api->independent_replicas)
    check_plugin(api->independent_replicas(obj, &independent), "strategy '" + plugin + "' independent_replicas");
  if (independent) throw KeelError(KEEL_ERR_INVALID_CONFIG, why_not_independent);
}

void SplitStrategy::destroy_parts() { parts_->destroy(); }

}  // namespace keel
