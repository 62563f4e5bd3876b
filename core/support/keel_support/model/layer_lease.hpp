// One layer's parameters (and in backward its gradients) borrowed from the strategy through
// keel_param_access, checked against the model's own specs, and handed back on every path: the
// way a model reads its weights without knowing where the strategy keeps them.
#pragma once

#include <keel/params.h>

#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

#include "keel_support/common/abi_guard.hpp"
#include "keel_support/model/compute_ops.hpp"

namespace keel_support {

// One layer's parameters (and, in backward, gradient buffers) borrowed from the strategy.
// release() hands them back; on an error path the destructor releases them, never as final.
class LayerLease {
 public:
  // `specs` points at the layer's first spec; the layer has n consecutive specs.
  LayerLease(const keel_param_access* access, int32_t layer, int32_t phase, const keel_param_spec* specs,
             size_t n)
      : access_(access), layer_(layer), phase_(phase), n_(n), params_(n), grads_(n) {
    keel_tensor* grads = phase == KEEL_PHASE_BACKWARD ? grads_.data() : nullptr;
    check_callee(access->acquire(access->ctx, layer, phase, params_.data(), grads, n), "strategy acquire");
    held_ = true;
    for (size_t i = 0; i < n; ++i) {
      check_tensor(params_[i], specs[i], "parameter");
      // A frozen tensor's gradient has no memory (params.h KEEL_PARAM_FROZEN): grad(i) is NULL.
      if (grads && !((specs[i].flags & KEEL_PARAM_FROZEN) && grads_[i].data == nullptr))
        check_tensor(grads_[i], specs[i], "gradient");
    }
  }
  LayerLease(const LayerLease&) = delete;
  LayerLease& operator=(const LayerLease&) = delete;
  ~LayerLease() {
    if (held_) access_->release(access_->ctx, layer_, phase_, 0);
  }

  float* param(size_t i) const { return data_of(params_[i]); }
  float* grad(size_t i) const { return grads_[i].data ? data_of(grads_[i]) : nullptr; }
  // A parameter at the compute type the strategy hands out (fp32, or bf16 under a bf16 backend).
  Elems param_elems(size_t i) const { return Elems(data_of(params_[i]), int32_t(params_[i].dtype.bits / 8)); }

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
    // Gradients are fp32; parameters fp32 or bf16 (a bf16 compute copy, backend.h 0.8).
    const bool fp32 = t.dtype.code == KEEL_DTYPE_FLOAT && t.dtype.bits == 32;
    const bool bf16 = t.dtype.code == KEEL_DTYPE_BFLOAT && t.dtype.bits == 16 && std::string(what) == "parameter";
    bool ok = t.data != nullptr && (fp32 || bf16) && t.ndim == spec.ndim;
    for (int d = 0; ok && d < spec.ndim; ++d) ok = t.shape[d] == spec.local_shape[d];
    if (!ok)
      throw keel_support::StatusError(
          KEEL_ERR_INTERNAL, std::string("the strategy's acquire returned a ") + what + " tensor for \"" +
                                 spec.name + "\" (layer " + std::to_string(layer_) +
                                 ") that is NULL, not of a compute type (fp32; bf16 for a parameter), or not of the "
                                 "declared local shape");
  }

  const keel_param_access* access_;
  int32_t layer_;
  int32_t phase_;
  size_t n_;
  bool held_ = false;
  // Sized per layer: a mixture-of-experts layer holds three tensors per expert.
  std::vector<keel_tensor> params_;
  std::vector<keel_tensor> grads_;
};

}  // namespace keel_support
