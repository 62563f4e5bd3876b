// Backend memory owned by a plugin (a model's activations, a strategy's flat parameter and
// gradient buffers): allocated through the backend's alloc (zero-filled) and returned through
// its free_memory on whatever path destroys the owner. The one allocator path of plugins.
#pragma once

#include <keel/backend.h>

#include <cstddef>
#include <utility>

#include "keel_support/common/abi_guard.hpp"

namespace keel_support {

class BackendBuffer {
 public:
  BackendBuffer() = default;
  BackendBuffer(const keel_backend_api* backend, void* backend_obj, size_t bytes)
      : backend_(backend), backend_obj_(backend_obj), bytes_(bytes) {
    if (bytes > 0) check_callee(backend->alloc(backend_obj, bytes, &data_), "backend alloc");
  }
  BackendBuffer(BackendBuffer&& other) noexcept { swap(other); }
  BackendBuffer& operator=(BackendBuffer&& other) noexcept {
    BackendBuffer(std::move(other)).swap(*this);
    return *this;
  }
  BackendBuffer(const BackendBuffer&) = delete;
  BackendBuffer& operator=(const BackendBuffer&) = delete;
  ~BackendBuffer() {
    if (data_) backend_->free_memory(backend_obj_, data_);
  }

  void* get() const { return data_; }
  float* floats() const { return static_cast<float*>(data_); }
  size_t bytes() const { return bytes_; }

 private:
  void swap(BackendBuffer& other) noexcept {
    std::swap(backend_, other.backend_);
    std::swap(backend_obj_, other.backend_obj_);
    std::swap(data_, other.data_);
    std::swap(bytes_, other.bytes_);
  }

  const keel_backend_api* backend_ = nullptr;
  void* backend_obj_ = nullptr;
  void* data_ = nullptr;
  size_t bytes_ = 0;
};

}  // namespace keel_support
