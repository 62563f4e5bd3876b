// FrozenParams (frozen_params.h): the frozen tensors' memory and the strategy slots over it.
#include "train/frozen_params.h"

#include <algorithm>
#include <cstring>
#include <exception>
#include <string>

#include <keel_support/model/compute_ops.hpp>
#include <keel_support/strategy/tp_pieces.hpp>

#include "host/errors.h"
#include "host/host_table.h"

namespace keel {
namespace {

constexpr keel_dtype kFp32{KEEL_DTYPE_FLOAT, 32, 1};

int64_t local_numel(const keel_param_spec& spec) {
  int64_t n = 1;
  for (int32_t d = 0; d < spec.ndim; ++d) n *= spec.local_shape[d];
  return n;
}

}  // namespace

FrozenParams::FrozenParams(const keel_strategy_create_args& args)
    : backend_{args.backend, args.backend_obj} {
  dtype_ = keel_support::compute_dtype_of(backend_);
  if (!keel_support::is_fp32(dtype_) && !KEEL_HAS_SLOT(backend_.api, convert))
    throw KeelError(KEEL_ERR_UNIMPLEMENTED, "the backend computes in another type than fp32 but has no convert (ABI 0.8)");
  device_ = backend_.device();
  specs_.assign(args.params, args.params + args.n_params);
  layer_indices_.resize(size_t(args.n_layers));
  std::vector<float> staging;
  for (size_t i = 0; i < specs_.size(); ++i) {
    const keel_param_spec& spec = specs_[i];
    numel_.push_back(local_numel(spec));
    layer_indices_[size_t(spec.layer)].push_back(i);
    values_.push_back(backend_.alloc_bytes(size_t(numel_[i]) * size_t(dtype_.bits / 8)));
    staging.resize(size_t(numel_[i]));
    keel_support::init_piece_elements(host_table(), spec, i, args.seed, 0, numel_[i], staging.data());
    check_plugin(FrozenParams::table()->write_param(this, i, 0, numel_[i], staging.data()),
                 std::string("initialising frozen ") + spec.name);
  }
}

void FrozenParams::check_index(size_t index, int64_t begin, int64_t count) const {
  if (index >= specs_.size())
    throw KeelError(KEEL_ERR_INVALID_ARGUMENT, "frozen parameter index " + std::to_string(index) + " is not below " +
                                                   std::to_string(specs_.size()));
  if (begin < 0 || count < 0 || begin + count > numel_[index])
    throw KeelError(KEEL_ERR_INVALID_ARGUMENT, std::string("range [") + std::to_string(begin) + ", " +
                                                   std::to_string(begin + count) + ") of frozen " + specs_[index].name +
                                                   " is outside its " + std::to_string(numel_[index]) + " elements");
}

struct FrozenSlots {
  static FrozenParams& of(void* s) { return *static_cast<FrozenParams*>(s); }
  static void destroy(void* s) { delete static_cast<FrozenParams*>(s); }

  // The layer's tensors at the compute type; their gradients NULL (params.h KEEL_PARAM_FROZEN).
  static keel_status acquire(void* ctx, int32_t layer, int32_t, keel_tensor* params, keel_tensor* grads, size_t n) {
    FrozenParams& f = of(ctx);
    return status_of([&]() -> keel_status {
      if (layer < 0 || size_t(layer) >= f.layer_indices_.size() || f.layer_indices_[size_t(layer)].size() != n)
        throw KeelError(KEEL_ERR_INVALID_ARGUMENT, "acquire of frozen layer " + std::to_string(layer) + " with " +
                                                       std::to_string(n) + " tensors, which is not its count");
      for (size_t t = 0; t < n; ++t) {
        const size_t i = f.layer_indices_[size_t(layer)][t];
        const keel_param_spec& spec = f.specs_[i];
        keel_tensor view{};
        view.device = f.device_;
        view.ndim = spec.ndim;
        for (int32_t d = 0; d < spec.ndim; ++d) view.shape[d] = spec.local_shape[d];
        if (grads) {
          view.dtype = kFp32;
          grads[t] = view;  // data NULL: no gradient to form
        }
        view.dtype = f.dtype_;
        view.data = f.values_[i].get();
        params[t] = view;
      }
      return KEEL_OK;
    });
  }
  static keel_status release(void*, int32_t, int32_t, int32_t) { return KEEL_OK; }
  static keel_status param_access(void* s, keel_param_access* out) {
    out->struct_size = sizeof(*out);
    out->ctx = s;
    out->acquire = &acquire;
    out->release = &release;
    return KEEL_OK;
  }

  static keel_status nothing(void*) { return KEEL_OK; }
  static keel_status begin_microbatch(void*, int32_t, int32_t) { return KEEL_OK; }
  static keel_status no_gradient(void*, double* out) {
    *out = 0.0;
    return KEEL_OK;
  }
  static keel_status step(void*, const keel_strategy_step_args*) { return KEEL_OK; }

  static keel_status read_param(void* s, size_t index, int64_t begin, int64_t count, float* dst) {
    FrozenParams& f = of(s);
    return status_of([&]() -> keel_status {
      f.check_index(index, begin, count);
      if (count == 0) return KEEL_OK;
      const char* at = static_cast<const char*>(f.values_[index].get()) + size_t(begin) * size_t(f.dtype_.bits / 8);
      keel_support::BackendBuffer fp32 = f.backend_.alloc_floats(count);
      if (keel_support::is_fp32(f.dtype_))
        f.backend_.copy_bytes(fp32.get(), at, size_t(count) * sizeof(float), KEEL_COPY_DEVICE_TO_DEVICE);
      else
        check_plugin(f.backend_.api->convert(f.backend_.obj, fp32.get(), kFp32, at, f.dtype_, count), "backend convert");
      f.backend_.copy_bytes(dst, fp32.get(), size_t(count) * sizeof(float), KEEL_COPY_DEVICE_TO_HOST);
      f.backend_.synchronize();
      return KEEL_OK;
    });
  }
  static keel_status write_param(void* s, size_t index, int64_t begin, int64_t count, const float* src) {
    FrozenParams& f = of(s);
    return status_of([&]() -> keel_status {
      f.check_index(index, begin, count);
      if (count == 0) return KEEL_OK;
      char* at = static_cast<char*>(f.values_[index].get()) + size_t(begin) * size_t(f.dtype_.bits / 8);
      keel_support::BackendBuffer fp32 = f.backend_.alloc_floats(count);
      f.backend_.copy_bytes(fp32.get(), src, size_t(count) * sizeof(float), KEEL_COPY_HOST_TO_DEVICE);
      if (keel_support::is_fp32(f.dtype_))
        f.backend_.copy_bytes(at, fp32.get(), size_t(count) * sizeof(float), KEEL_COPY_DEVICE_TO_DEVICE);
      else
        check_plugin(f.backend_.api->convert(f.backend_.obj, at, f.dtype_, fp32.get(), kFp32, count), "backend convert");
      f.backend_.synchronize();
      return KEEL_OK;
    });
  }
  // A frozen tensor's gradient is zero by definition.
  static keel_status read_grad(void* s, size_t index, int64_t begin, int64_t count, float* dst) {
    return status_of([&]() -> keel_status {
      of(s).check_index(index, begin, count);
      std::fill(dst, dst + count, 0.0f);
      return KEEL_OK;
    });
  }
  static keel_status no_state(void* s, int32_t slot, size_t index, int64_t, int64_t count, const void*) {
    if (count == 0) return KEEL_OK;
    set_last_error("frozen parameter " + std::string(index < of(s).specs_.size() ? of(s).specs_[index].name : "?") +
                   " has no optimizer state (slot " + std::to_string(slot) + ")");
    return KEEL_ERR_INVALID_ARGUMENT;
  }
  static keel_status read_state(void* s, int32_t slot, size_t index, int64_t begin, int64_t count, float* dst) {
    return no_state(s, slot, index, begin, count, dst);
  }
  static keel_status write_state(void* s, int32_t slot, size_t index, int64_t begin, int64_t count, const float* src) {
    return no_state(s, slot, index, begin, count, src);
  }
  // Every rank holds each tensor whole (the first data-parallel rank saves it); no state.
  static keel_status owned_range(void* s, int32_t kind, size_t index, int64_t* begin, int64_t* end) {
    FrozenParams& f = of(s);
    return status_of([&]() -> keel_status {
      f.check_index(index, 0, 0);
      *begin = 0;
      *end = kind < 0 ? f.numel_[index] : 0;
      return KEEL_OK;
    });
  }
  static keel_status describe(void* s, keel_strategy_info* out) {
    FrozenParams& f = of(s);
    keel_strategy_info info{};
    info.struct_size = out->struct_size;
    info.params_resident = 1;
    for (int64_t n : f.numel_) info.param_bytes += uint64_t(n) * uint64_t(f.dtype_.bits / 8);
    info.holds_whole = KEEL_STRATEGY_HOLDS_WHOLE_PARAMS | KEEL_STRATEGY_HOLDS_WHOLE_GRADS;
    std::memcpy(out, &info, std::min(size_t(out->struct_size), sizeof(info)));
    return KEEL_OK;
  }
  static keel_status local_grad_sq_norm(void* s, double* out) { return no_gradient(s, out); }
};

const keel_strategy_api* FrozenParams::table() {
  static const keel_strategy_api api = [] {
    keel_strategy_api t{};
    t.struct_size = sizeof(t);
    t.destroy = &FrozenSlots::destroy;
    t.param_access = &FrozenSlots::param_access;
    t.begin_microbatch = &FrozenSlots::begin_microbatch;
    t.zero_grads = &FrozenSlots::nothing;
    t.grad_sq_norm = &FrozenSlots::no_gradient;
    t.step = &FrozenSlots::step;
    t.read_param = &FrozenSlots::read_param;
    t.write_param = &FrozenSlots::write_param;
    t.read_grad = &FrozenSlots::read_grad;
    t.read_state = &FrozenSlots::read_state;
    t.write_state = &FrozenSlots::write_state;
    t.owned_range = &FrozenSlots::owned_range;
    t.describe = &FrozenSlots::describe;
    t.local_grad_sq_norm = &FrozenSlots::local_grad_sq_norm;
    return t;
  }();
  return &api;
}

}  // namespace keel
