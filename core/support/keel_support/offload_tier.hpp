// The strategy's view of the offload tier (keel/offload.h) that the core hands it in the
// create args: the engine's table and object behind checked C++ calls (a failing call throws
// CalleeFailed, the engine's own message already set on the host), aligned host buffers that
// return themselves to the engine, and the create-args fields read only when struct_size
// covers them (args from before ABI 0.7 have no tier).
#pragma once

#include <keel/offload.h>
#include <keel/strategy.h>

#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>

#include "keel_support/abi_guard.hpp"

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

// Host memory from the engine's alloc_buffer (aligned, pinned where the backend is a device),
// freed through its free_buffer.
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
    std::swap(api_, other.api_);
    std::swap(obj_, other.obj_);
    std::swap(data_, other.data_);
    std::swap(bytes_, other.bytes_);
  }
  const keel_offload_api* api_ = nullptr;
  void* obj_ = nullptr;
  void* data_ = nullptr;
  uint64_t bytes_ = 0;
};

class OffloadTier {
 public:
  using Ticket = uint64_t;

  explicit OffloadTier(const OffloadRequest& request) : api_(request.api), obj_(request.obj) {
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
  }

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
  void* alloc(uint64_t bytes) const {
    void* data = nullptr;
    check_callee(api_->alloc_buffer(obj_, bytes, &data), "offload alloc_buffer");
    return data;
  }
  void free(void* data) const { api_->free_buffer(obj_, data); }
  const keel_offload_api* api() const { return api_; }
  void* obj() const { return obj_; }

 private:
  const keel_offload_api* api_;
  void* obj_;
  keel_offload_info info_{};
};

inline TierBuffer::TierBuffer(const OffloadTier& tier, uint64_t bytes)
    : api_(tier.api()), obj_(tier.obj()), bytes_(bytes) {
  if (bytes > 0) data_ = tier.alloc(bytes);
}
inline TierBuffer::~TierBuffer() {
  if (data_) api_->free_buffer(obj_, data_);
}

}  // namespace keel_support
