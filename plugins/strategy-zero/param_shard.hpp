// Where stage 3 finds a layer's own parameter chunk to all_gather from: the store's resident
// shard, or (ZeRO-Infinity, offload.params) the offload tier, read into an aligned host buffer
// (and a backend buffer on a device backend) that lives until the gather is done. A read-ahead
// starts the tier read of the layer the model acquires next, so the read runs while the
// current layer computes.
#pragma once

#include <cstdint>
#include <vector>

#include <keel_support/common/backend_ops.hpp>
#include <keel_support/strategy/store_layout.hpp>
#include <keel_support/strategy/tier_home.hpp>

namespace keel_zero {

class ParamShard {
 public:
  // `resident` is the store's shard array (NULL when `tier` holds it); both outlive this object.
  ParamShard(const keel_support::StoreLayout& layout, keel_support::BackendOps backend, keel_device device,
             const float* resident, const keel_support::TierHome* tier);
  ~ParamShard();  // waits for the reads in flight
  ParamShard(const ParamShard&) = delete;
  ParamShard& operator=(const ParamShard&) = delete;

  bool tiered() const { return tier_ != nullptr; }
  // The layer's chunk in backend memory, valid until release(layer).
  const float* chunk(int32_t layer);
  // Starts reading the layer's chunk from the tier; nothing when resident, out of range, empty
  // or already read or reading.
  void read_ahead(int32_t layer);
  // The layer's staged chunk is no longer needed (its gather is done, or it went stale).
  void release(int32_t layer);
  void release_all();

 private:
  struct Staged {
    keel_support::TierBuffer host;
    keel_support::BackendBuffer device;  // a device backend's copy
    uint64_t ticket = 0;                 // the read in flight, 0 once waited
    uint64_t skip = 0;                   // bytes from the buffer's start to the chunk
    bool copied = false;
  };
  void start_read(int32_t layer);

  const keel_support::StoreLayout& layout_;
  keel_support::BackendOps backend_;
  keel_device device_;
  const float* resident_;
  const keel_support::TierHome* tier_;
  std::vector<Staged> staged_;
};

}  // namespace keel_zero
