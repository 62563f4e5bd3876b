// What every hand-written model needs besides its math: calling backend ops, borrowing one
// layer's parameters at a time, carving activations out of one allocation. Shared by the gpt and mlp plugins (the mlp plugin adds
// this folder to its include path); it could move to keel_support once a third model uses it.
#pragma once

#include <keel/backend.h>
#include <keel/host.h>
#include <keel/params.h>

#include <cstring>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "keel_support/abi_guard.hpp"
#include "keel_support/backend_buffer.hpp"

namespace keel_model {

using keel_support::BackendBuffer;
using keel_support::check_callee;

// The backend a model computes with: its table and object.
struct Backend {
  const keel_backend_api* api = nullptr;
  void* obj = nullptr;
};

// KEEL_OP(backend, matmul_forward, out, inp, ...) calls one backend op and throws CalleeFailed
// (keel_support), which keeps the backend's own message,
// naming the op when it fails.
#define KEEL_OP(backend, op, ...) \
  ::keel_support::check_callee((backend).api->op((backend).obj, __VA_ARGS__), "backend op " #op)

// Carves one allocation into 64-byte-aligned pieces (llm.c's "one malloc, structs of pointers").
// First pass: take() with base == nullptr counts the bytes; second pass hands out pointers.
class Carver {
 public:
  explicit Carver(char* base) : base_(base) {}
  template <typename T>
  T* take(int64_t count) {
    size_t offset = used_;
    used_ += (static_cast<size_t>(count) * sizeof(T) + 63) / 64 * 64;
    return base_ ? reinterpret_cast<T*>(base_ + offset) : nullptr;
  }
  size_t used() const { return used_; }

 private:
  char* base_;
  size_t used_ = 0;
};

// One layer's parameters (and, in backward, gradient buffers) borrowed from the strategy.
// release() hands them back; on an error path the destructor releases them, never as final.
class LayerLease {
 public:
  static constexpr size_t kMaxTensors = 16;

  // `specs` points at the layer's first spec; the layer has n consecutive specs.
  LayerLease(const keel_param_access* access, int32_t layer, int32_t phase, const keel_param_spec* specs,
             size_t n)
      : access_(access), layer_(layer), phase_(phase), n_(n) {
    if (n > kMaxTensors) throw std::logic_error("LayerLease: too many tensors in one layer");
    keel_tensor* grads = phase == KEEL_PHASE_BACKWARD ? grads_ : nullptr;
    check_callee(access->acquire(access->ctx, layer, phase, params_, grads, n), "strategy acquire");
    held_ = true;
    for (size_t i = 0; i < n; ++i) {
      check_tensor(params_[i], specs[i], "parameter");
      if (grads) check_tensor(grads_[i], specs[i], "gradient");
    }
  }
  LayerLease(const LayerLease&) = delete;
  LayerLease& operator=(const LayerLease&) = delete;
  ~LayerLease() {
    if (held_) access_->release(access_->ctx, layer_, phase_, 0);
  }

  float* param(size_t i) const { return data_of(params_[i]); }
  float* grad(size_t i) const { return data_of(grads_[i]); }

  // grads_final: backward only; this was the layer's last use in this backward pass.
  void release(bool grads_final) {
    held_ = false;
    check_callee(access_->release(access_->ctx, layer_, phase_, grads_final ? 1 : 0), "strategy release");
  }

 private:
  static float* data_of(const keel_tensor& t) {
    return reinterpret_cast<float*>(static_cast<char*>(t.data) + t.byte_offset);
  }
  // A strategy bug shows up here, named, instead of as corrupted memory later.
  void check_tensor(const keel_tensor& t, const keel_param_spec& spec, const char* what) const {
    bool ok = t.data != nullptr && t.dtype.code == KEEL_DTYPE_FLOAT && t.dtype.bits == 32 && t.ndim == spec.ndim;
    for (int d = 0; ok && d < spec.ndim; ++d) ok = t.shape[d] == spec.local_shape[d];
    if (!ok)
      throw keel_support::StatusError(
          KEEL_ERR_INTERNAL, std::string("the strategy's acquire returned a ") + what + " tensor for \"" +
                                 spec.name + "\" (layer " + std::to_string(layer_) +
                                 ") that is NULL, not fp32, or not of the declared local shape");
  }

  const keel_param_access* access_;
  int32_t layer_;
  int32_t phase_;
  size_t n_;
  bool held_ = false;
  keel_tensor params_[kMaxTensors] = {};
  keel_tensor grads_[kMaxTensors] = {};
};

// The mean cross-entropy over the valid targets from the per-position losses in backend memory
// (ignored targets hold 0); with no valid target the mean is empty and the loss is 0.
inline float mean_loss(const Backend& backend, const float* device_losses, int64_t n, int64_t valid_targets) {
  std::vector<float> losses(static_cast<size_t>(n));
  check_callee(backend.api->copy(backend.obj, losses.data(), device_losses, losses.size() * sizeof(float),
                                 KEEL_COPY_DEVICE_TO_HOST),
               "backend copy");
  double sum = 0;
  for (float x : losses) sum += x;
  return valid_targets ? static_cast<float>(sum / static_cast<double>(valid_targets)) : 0.0f;
}

// Fills a spec with the fields every model sets the same way (replicated, local = global).
inline keel_param_spec make_spec(const char* name, int32_t layer, std::initializer_list<int64_t> shape,
                                 uint32_t flags, int32_t init, float init_std, int64_t init_rows = -1) {
  keel_param_spec s;
  std::memset(&s, 0, sizeof s);
  s.struct_size = sizeof s;
  s.name = name;
  s.layer = layer;
  s.ndim = static_cast<int32_t>(shape.size());
  int d = 0;
  for (int64_t extent : shape) s.global_shape[d] = s.local_shape[d] = extent, ++d;
  s.tp_dim = -1;
  s.flags = flags;
  s.init = init;
  s.init_std = init_std;
  s.init_rows = init_rows;
  return s;
}

inline int64_t element_count(const keel_param_spec& s) {
  int64_t n = 1;
  for (int d = 0; d < s.ndim; ++d) n *= s.global_shape[d];
  return n;
}

// Token ids arrive in backend memory; checking them on the host costs one small copy and turns
// an out-of-range id into an error instead of an out-of-bounds read in the embedding kernel.
// Returns how many entries are >= 0 (the valid targets). `allow_negative`: targets may be < 0.
inline int64_t check_token_ids(const Backend& backend, const int32_t* ids, int64_t count, int32_t vocab_size,
                               bool allow_negative, const char* what) {
  std::vector<int32_t> host(static_cast<size_t>(count));
  check_callee(backend.api->copy(backend.obj, host.data(), ids, host.size() * sizeof(int32_t),
                                 KEEL_COPY_DEVICE_TO_HOST),
               "backend copy");
  int64_t valid = 0;
  for (int64_t i = 0; i < count; ++i) {
    int32_t id = host[static_cast<size_t>(i)];
    if (id >= vocab_size || (id < 0 && !allow_negative))
      throw keel_support::StatusError(KEEL_ERR_INVALID_ARGUMENT,
                                      std::string(what) + "[" + std::to_string(i) + "] = " + std::to_string(id) +
                                          " is outside [" + (allow_negative ? "-inf" : "0") + ", " +
                                          std::to_string(vocab_size) + ") (vocab_size)");
    valid += id >= 0;
  }
  return valid;
}

}  // namespace keel_model
