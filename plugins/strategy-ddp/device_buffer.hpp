// One backend allocation owned for the life of the strategy: allocated through the backend's
// alloc (zero-filled) and returned through its free_memory, whatever path destroys it.
#pragma once

#include <keel/backend.h>

#include <cstdint>
#include <utility>

#include "nested_status.hpp"

namespace keel_ddp {

class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  DeviceBuffer(const keel_backend_api* backend, void* backend_obj, int64_t n_floats)
      : backend_(backend), backend_obj_(backend_obj) {
    if (n_floats > 0) {
      void* data = nullptr;
      check_nested(backend->alloc(backend_obj, static_cast<size_t>(n_floats) * sizeof(float), &data));
      data_ = static_cast<float*>(data);
    }
  }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  DeviceBuffer(DeviceBuffer&& other) noexcept { swap(other); }
  DeviceBuffer& operator=(DeviceBuffer&& other) noexcept {
    DeviceBuffer(std::move(other)).swap(*this);
    return *this;
  }
  ~DeviceBuffer() {
    if (data_) backend_->free_memory(backend_obj_, data_);
  }

  float* data() const { return data_; }

 private:
  void swap(DeviceBuffer& other) noexcept {
    std::swap(backend_, other.backend_);
    std::swap(backend_obj_, other.backend_obj_);
    std::swap(data_, other.data_);
  }

  const keel_backend_api* backend_ = nullptr;
  void* backend_obj_ = nullptr;
  float* data_ = nullptr;
};

}  // namespace keel_ddp
