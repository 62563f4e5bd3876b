// The seam for WHERE a parameter store's flat array lives. The store asks a HomeFactory for
// each array (parameters, gradients, every optimizer state slot) and reaches it only through
// ShardHome, so a later tier (pinned CPU memory, NVMe) can live behind the same interface and
// bring its elements into backend memory when the store asks. Today there is one: resident
// backend memory, allocated through the backend's alloc (the one allocator path of plugins);
// the offload tier's is TierHome (tier_home.hpp), which has no backend address.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>

#include "keel_support/common/backend_ops.hpp"

namespace keel_support {

// Which array of the store a home holds (a tier may treat them differently: state is touched
// only by the optimizer step, parameters by every forward).
enum class StoreArray { kParams, kGrads, kState };

class TierHome;

class ShardHome {
 public:
  virtual ~ShardHome() = default;
  virtual int64_t elements() const = 0;
  // The array in backend memory, valid until the home is destroyed (a non-resident tier
  // makes it resident here).
  virtual float* data() = 0;
  // Bytes this home keeps in backend memory for the run's whole life (describe's figures).
  virtual uint64_t backend_bytes() const = 0;
  // The tier's home when the array lives in the offload tier (data() then throws); else NULL.
  virtual TierHome* tiered() { return nullptr; }
};

class ResidentHome final : public ShardHome {
 public:
  ResidentHome(const BackendOps& backend, int64_t elements) : elements_(elements), buffer_(backend.alloc_floats(elements)) {}
  int64_t elements() const override { return elements_; }
  float* data() override { return buffer_.floats(); }
  uint64_t backend_bytes() const override { return buffer_.bytes(); }

 private:
  int64_t elements_;
  BackendBuffer buffer_;  // zero-filled
};

// Makes the home of one array of `elements` fp32 values, zero-filled.
using HomeFactory = std::function<std::unique_ptr<ShardHome>(StoreArray array, int64_t elements)>;

inline HomeFactory resident_homes(const BackendOps& backend) {
  return [backend](StoreArray, int64_t elements) { return std::make_unique<ResidentHome>(backend, elements); };
}

}  // namespace keel_support
