// The strategy's view of the offload tier (keel/offload.h) that the core hands it in the
// create args: the engine's table and object behind checked C++ calls (a failing call throws
// CalleeFailed, the engine's own message already set on the host), aligned host buffers that
// return themselves to where they came from, and the create-args fields read only when
// struct_size covers them (args from before ABI 0.7 have no tier).
// Where the backend is a device with alloc_host (0.8), the buffers every tier transfer passes
// through come from it, pinned, so the copies between them and the device run at full speed;
// elsewhere they come from the engine's alloc_buffer. Both meet the tier's alignment.
#pragma once

#include <keel/backend.h>
#include <keel/offload.h>
#include <keel/strategy.h>

#include <cstddef>
#include <cstdint>
#include <mutex>
#include <string>
#include <unordered_map>
#include <utility>

#include "keel_support/common/abi_guard.hpp"
#include "keel_support/common/backend_ops.hpp"

namespace keel_support {

// The tier and which arrays the config puts there; api NULL means none.
struct OffloadRequest {
  const keel_offload_api* api = nullptr;
  void* obj = nullptr;
  uint32_t arrays = 0;  // KEEL_OFFLOAD_*
  bool wants(uint32_t array) const { return api && (arrays & array) != 0; }
};

inline OffloadRequest offload_request(const keel_strategy_create_args& args) {
  OffloadRequest request;
  if (args.struct_size < offsetof(keel_strategy_create_args, offload_arrays) + sizeof(args.offload_arrays))
    return request;
  if (!args.offload || args.offload_arrays == 0) return request;
  request.api = args.offload;
  request.obj = args.offload_obj;
  request.arrays = args.offload_arrays;
  return request;
}

// The config key of one KEEL_OFFLOAD_* flag, for messages ("offload.params").
inline const char* offload_key(uint32_t array) {
  switch (array) {
    case KEEL_OFFLOAD_OPTIMIZER_STATE: return "offload.optimizer_state";
    case KEEL_OFFLOAD_PARAMS: return "offload.params";
    case KEEL_OFFLOAD_GRADIENTS: return "offload.gradients";
    default: return "offload";
  }
}

class OffloadTier;

// Host memory of the tier's alignment, zero-filled: pinned by a device backend, else the engine's
// alloc_buffer; returned where it came from.
class TierBuffer {
 public:
  TierBuffer() = default;
  TierBuffer(const OffloadTier& tier, uint64_t bytes);
  TierBuffer(TierBuffer&& other) noexcept { swap(other); }
  TierBuffer& operator=(TierBuffer&& other) noexcept {
    TierBuffer(std::move(other)).swap(*this);
    return *this;
  }
  TierBuffer(const TierBuffer&) = delete;
  TierBuffer& operator=(const TierBuffer&) = delete;
  ~TierBuffer();

  void* get() const { return data_; }
  float* floats() const { return static_cast<float*>(data_); }
  uint64_t bytes() const { return bytes_; }

 private:
  void swap(TierBuffer& other) noexcept {
    std::swap(tier_, other.tier_);
    std::swap(data_, other.data_);
    std::swap(bytes_, other.bytes_);
  }
  const OffloadTier* tier_ = nullptr;
  void* data_ = nullptr;
  uint64_t bytes_ = 0;
};

class OffloadTier {
 public:
  using Ticket = uint64_t;

  // `backend`: the strategy's; its alloc_host pins the buffers when its memory is a device's.
  OffloadTier(const OffloadRequest& request, BackendOps backend) : api_(request.api), obj_(request.obj) {
    if (!api_ || !api_->describe || !api_->add_extent || !api_->submit_read || !api_->submit_write || !api_->wait ||
        !api_->wait_all || !api_->alloc_buffer || !api_->free_buffer)
      throw StatusError(KEEL_ERR_INVALID_ARGUMENT, "create: the offload tier's table lacks a slot the strategy needs "
                                                   "(describe, add_extent, submit_read/write, wait, wait_all, "
                                                   "alloc_buffer, free_buffer)");
    info_.struct_size = sizeof(info_);
    check_callee(api_->describe(obj_, &info_), "offload describe");
    if (info_.alignment_bytes == 0 || info_.alignment_bytes % sizeof(float) != 0)
      throw StatusError(KEEL_ERR_INVALID_ARGUMENT, "create: the offload tier's alignment_bytes is " +
                                                       std::to_string(info_.alignment_bytes) +
                                                       "; expected a positive multiple of 4");
    if (KEEL_HAS_SLOT(backend.api, alloc_host) && KEEL_HAS_SLOT(backend.api, free_host) &&
        backend.device().device_type != KEEL_DEVICE_CPU)
      pinning_ = backend;
  }
  OffloadTier(const OffloadTier&) = delete;
  OffloadTier& operator=(const OffloadTier&) = delete;

  uint64_t alignment() const { return info_.alignment_bytes; }
  uint64_t ideal_request_bytes() const { return info_.ideal_request_bytes; }
  uint64_t round_up(uint64_t bytes) const { return (bytes + alignment() - 1) / alignment() * alignment(); }
  uint64_t round_down(uint64_t bytes) const { return bytes / alignment() * alignment(); }

  void add_extent(const std::string& name, uint64_t bytes) const {
    check_callee(api_->add_extent(obj_, name.c_str(), bytes), "offload add_extent");
  }
  Ticket submit_read(const std::string& name, uint64_t offset, void* dst, uint64_t bytes) const {
    Ticket ticket = 0;
    check_callee(api_->submit_read(obj_, name.c_str(), offset, dst, bytes, &ticket), "offload submit_read");
    return ticket;
  }
  Ticket submit_write(const std::string& name, uint64_t offset, const void* src, uint64_t bytes) const {
    Ticket ticket = 0;
    check_callee(api_->submit_write(obj_, name.c_str(), offset, src, bytes, &ticket), "offload submit_write");
    return ticket;
  }
  void wait(Ticket ticket) const {
    if (ticket != 0) check_callee(api_->wait(obj_, ticket), "offload wait");
  }
  // For error paths: nothing may still write into a buffer about to be freed.
  void wait_all_quietly() const noexcept { (void)api_->wait_all(obj_); }
  // Buffers for transfers (TierBuffer): thread-safe, since a communication thread may stage too.
  void* alloc(uint64_t bytes) const {
    void* data = nullptr;
    if (!pinning_.api) {
      check_callee(api_->alloc_buffer(obj_, bytes, &data), "offload alloc_buffer");
      return data;
    }
    // alloc_host promises 64-byte alignment; the tier may ask more (4096 for O_DIRECT), so the
    // block is over-allocated and the buffer starts at its first aligned byte.
    void* block = nullptr;
    check_callee(pinning_.api->alloc_host(pinning_.obj, bytes + alignment(), &block), "backend alloc_host");
    const uintptr_t start = (reinterpret_cast<uintptr_t>(block) + alignment() - 1) / alignment() * alignment();
    data = reinterpret_cast<void*>(start);
    std::lock_guard<std::mutex> lock(pinned_mutex_);
    pinned_blocks_.emplace(data, block);
    return data;
  }
  void free(void* data) const {
    if (!pinning_.api) return api_->free_buffer(obj_, data);
    void* block = nullptr;
    {
      std::lock_guard<std::mutex> lock(pinned_mutex_);
      auto found = pinned_blocks_.find(data);
      if (found == pinned_blocks_.end()) return;  // not ours: a caller bug, but never a bad free
      block = found->second;
      pinned_blocks_.erase(found);
    }
    pinning_.api->free_host(pinning_.obj, block);
  }
  bool pinned() const { return pinning_.api != nullptr; }
  const keel_offload_api* api() const { return api_; }
  void* obj() const { return obj_; }

 private:
  const keel_offload_api* api_;
  void* obj_;
  keel_offload_info info_{};
  BackendOps pinning_;  // api NULL: the engine's alloc_buffer
  mutable std::mutex pinned_mutex_;
  mutable std::unordered_map<void*, void*> pinned_blocks_;  // aligned buffer -> alloc_host block
};

inline TierBuffer::TierBuffer(const OffloadTier& tier, uint64_t bytes) : tier_(&tier), bytes_(bytes) {
  if (bytes > 0) data_ = tier.alloc(bytes);
}
inline TierBuffer::~TierBuffer() {
  if (data_) tier_->free(data_);
}

}  // namespace keel_support
