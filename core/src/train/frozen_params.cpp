// FrozenParams (frozen_params.h): the frozen tensors' memory and the strategy slots over it.
#include "train/frozen_params.h"

#include <algorithm>
#include <cmath>
#include <iterator>
#include <cstring>
#include <exception>
#include <string>

#include <keel_support/common/nf4.hpp>
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
    if (is_nf4(i)) {
      if (!KEEL_HAS_SLOT(backend_.api, nf4_dequantize_dt))
        throw KeelError(KEEL_ERR_UNIMPLEMENTED, "the backend has no nf4_dequantize_dt (ABI 0.19), which an NF4 base "
                                                "(QLoRA) needs");
      nf4_[i];
      own_state_names_.push_back("nf4." + std::string(spec.name) + ".scales");
      values_.emplace_back();
    } else {
      values_.push_back(backend_.alloc_bytes(size_t(numel_[i]) * size_t(dtype_.bits / 8)));
    }
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

void FrozenParams::quantize_into(size_t index, const float* values) {
  const keel_support::Nf4Tensor q = keel_support::nf4_quantize(values, numel_[index]);
  Nf4Stored& s = nf4_.at(index);
  auto upload = [&](keel_support::BackendBuffer& buffer, const void* data, size_t bytes) {
    if (buffer.bytes() != bytes) buffer = backend_.alloc_bytes(bytes);
    backend_.copy_bytes(buffer.get(), data, bytes, KEEL_COPY_HOST_TO_DEVICE);
  };
  upload(s.codes, q.codes.data(), q.codes.size());
  upload(s.block_scales, q.block_scales.data(), q.block_scales.size());
  upload(s.scale_factors, q.scale_factors.data(), q.scale_factors.size() * sizeof(float));
  s.scale_mean = q.scale_mean;
  s.bytes = q.bytes();
  backend_.synchronize();  // the host vectors go at return
}

void FrozenParams::flush(size_t index) {
  Nf4Stored& s = nf4_.at(index);
  if (s.staging.empty()) return;
  quantize_into(index, s.staging.data());
  std::vector<float>().swap(s.staging);
}

void FrozenParams::dequantize(size_t index, void* out, keel_dtype dt) const {
  const Nf4Stored& s = nf4_.at(index);
  check_plugin(backend_.api->nf4_dequantize_dt(backend_.obj, dt, out, static_cast<const uint8_t*>(s.codes.get()),
                                               static_cast<const int8_t*>(s.block_scales.get()),
                                               s.scale_factors.floats(), s.scale_mean, numel_[index]),
               std::string("backend nf4_dequantize_dt (frozen ") + specs_[index].name + ")");
}

// A whole tensor is quantized at once; a part waits in fp32 (the rest read back from the codes)
// until the tensor is next acquired or read.
void FrozenParams::write_nf4(size_t index, int64_t begin, int64_t count, const float* src) {
  Nf4Stored& s = nf4_.at(index);
  if (begin == 0 && count == numel_[index]) {
    std::vector<float>().swap(s.staging);
    return quantize_into(index, src);
  }
  if (s.staging.empty()) {
    std::vector<float> current(size_t(numel_[index]), 0.0f);
    if (s.codes.get()) read_nf4(index, 0, numel_[index], current.data());
    s.staging = std::move(current);
  }
  std::copy(src, src + count, s.staging.begin() + begin);
}

// What the model computes with: staged values are quantized first.
void FrozenParams::read_nf4(size_t index, int64_t begin, int64_t count, float* dst) {
  flush(index);
  keel_support::BackendBuffer fp32 = backend_.alloc_floats(numel_[index]);
  dequantize(index, fp32.get(), kFp32);
  backend_.copy_bytes(dst, fp32.floats() + begin, size_t(count) * sizeof(float), KEEL_COPY_DEVICE_TO_HOST);
  backend_.synchronize();
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
      // The first holder dequantizes the layer's NF4 tensors; the lease is recorded only once
      // they all are, so a failure leaves nothing held.
      if (f.leases_.count(layer) == 0) {
        FrozenParams::Lease fresh;
        for (size_t i : f.layer_indices_[size_t(layer)]) {
          if (!f.is_nf4(i)) continue;
          f.flush(i);
          keel_support::BackendBuffer values = f.backend_.alloc_bytes(size_t(f.numel_[i]) * size_t(f.dtype_.bits / 8));
          f.dequantize(i, values.get(), f.dtype_);
          fresh.values.emplace(i, std::move(values));
        }
        f.leases_.emplace(layer, std::move(fresh));
      }
      FrozenParams::Lease& lease = f.leases_.at(layer);
      ++lease.holders;
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
        view.data = f.is_nf4(i) ? lease.values.at(i).get() : f.values_[i].get();
        params[t] = view;
      }
      return KEEL_OK;
    });
  }
  // A layer's dequantized NF4 tensors go with its last holder (the backend orders the free after
  // the work queued on them).
  static keel_status release(void* ctx, int32_t layer, int32_t, int32_t) {
    FrozenParams& f = of(ctx);
    auto held = f.leases_.find(layer);
    if (held != f.leases_.end() && --held->second.holders <= 0) f.leases_.erase(held);
    return KEEL_OK;
  }
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
      if (f.is_nf4(index)) return f.read_nf4(index, begin, count, dst), KEEL_OK;
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
      if (f.is_nf4(index)) return f.write_nf4(index, begin, count, src), KEEL_OK;
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
    for (size_t i = 0; i < f.numel_.size(); ++i)
      info.param_bytes += f.is_nf4(i) ? uint64_t(f.nf4_.at(i).bytes) : uint64_t(f.numel_[i]) * uint64_t(f.dtype_.bits / 8);
    info.holds_whole = KEEL_STRATEGY_HOLDS_WHOLE_PARAMS | KEEL_STRATEGY_HOLDS_WHOLE_GRADS;
    info.dp_levels = 1;  // whole on every rank: every group a replica
    std::memcpy(out, &info, std::min(size_t(out->struct_size), sizeof(info)));
    return KEEL_OK;
  }
  static keel_status local_grad_sq_norm(void* s, double* out) { return no_gradient(s, out); }

  // Own state: each NF4 tensor's scales as fp32 [mean, factors..., block scales...].
  static std::pair<size_t, int64_t> nf4_state(FrozenParams& f, int32_t index) {
    if (index < 0 || size_t(index) >= f.nf4_.size())
      throw KeelError(KEEL_ERR_INVALID_ARGUMENT, "frozen own state " + std::to_string(index) + " is not below " +
                                                     std::to_string(f.nf4_.size()));
    const size_t tensor = std::next(f.nf4_.begin(), index)->first;
    const int64_t blocks = keel_support::nf4_blocks(f.numel_[tensor]);
    return {tensor, 1 + keel_support::nf4_scale_groups(f.numel_[tensor]) + blocks};
  }
  static keel_status own_state_count(void* s, int32_t* out) {
    *out = int32_t(of(s).nf4_.size());
    return KEEL_OK;
  }
  static keel_status own_state_info(void* s, int32_t index, const char** name, int64_t* count) {
    FrozenParams& f = of(s);
    return status_of([&]() -> keel_status {
      *count = nf4_state(f, index).second;
      *name = f.own_state_names_[size_t(index)].c_str();
      return KEEL_OK;
    });
  }
  static keel_status read_own_state(void* s, int32_t index, float* dst) {
    FrozenParams& f = of(s);
    return status_of([&]() -> keel_status {
      const auto [tensor, count] = nf4_state(f, index);
      f.flush(tensor);
      const FrozenParams::Nf4Stored& q = f.nf4_.at(tensor);
      const int64_t groups = keel_support::nf4_scale_groups(f.numel_[tensor]);
      std::vector<int8_t> scales(size_t(count - 1 - groups));
      dst[0] = q.scale_mean;
      f.backend_.copy_bytes(dst + 1, q.scale_factors.get(), size_t(groups) * sizeof(float), KEEL_COPY_DEVICE_TO_HOST);
      f.backend_.copy_bytes(scales.data(), q.block_scales.get(), scales.size(), KEEL_COPY_DEVICE_TO_HOST);
      f.backend_.synchronize();
      std::copy(scales.begin(), scales.end(), dst + 1 + groups);
      return KEEL_OK;
    });
  }
  // After the checkpoint's values were written (and quantized to the same codes): the saved
  // scales, checked as untrusted input, replace the ones quantizing gave.
  static keel_status write_own_state(void* s, int32_t index, const float* src) {
    FrozenParams& f = of(s);
    return status_of([&]() -> keel_status {
      const auto [tensor, count] = nf4_state(f, index);
      const int64_t groups = keel_support::nf4_scale_groups(f.numel_[tensor]);
      const std::string what = "checkpoint own state " + f.own_state_names_[size_t(index)];
      for (int64_t k = 0; k < 1 + groups; ++k)
        if (!std::isfinite(src[k]))
          throw KeelError(KEEL_ERR_INVALID_CONFIG, what + ": element " + std::to_string(k) + " is not finite");
      std::vector<int8_t> scales(size_t(count - 1 - groups));
      for (size_t b = 0; b < scales.size(); ++b) {
        const float v = src[1 + groups + int64_t(b)];
        if (!(v >= -128.0f && v <= 127.0f) || v != std::trunc(v))
          throw KeelError(KEEL_ERR_INVALID_CONFIG, what + ": block scale " + std::to_string(b) + " is " +
                                                       std::to_string(v) + ", not an integer in [-128, 127]");
        scales[b] = int8_t(v);
      }
      f.flush(tensor);
      FrozenParams::Nf4Stored& q = f.nf4_.at(tensor);
      q.scale_mean = src[0];
      f.backend_.copy_bytes(q.scale_factors.get(), src + 1, size_t(groups) * sizeof(float), KEEL_COPY_HOST_TO_DEVICE);
      f.backend_.copy_bytes(q.block_scales.get(), scales.data(), scales.size(), KEEL_COPY_HOST_TO_DEVICE);
      f.backend_.synchronize();
      return KEEL_OK;
    });
  }
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
    t.own_state_count = &FrozenSlots::own_state_count;
    t.own_state_info = &FrozenSlots::own_state_info;
    t.read_own_state = &FrozenSlots::read_own_state;
    t.write_own_state = &FrozenSlots::write_own_state;
    return t;
  }();
  return &api;
}

}  // namespace keel
