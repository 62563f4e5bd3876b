// A fake backend for testing a strategy (or anything that only moves and sums fp32 arrays)
// without a real backend plugin: host memory, with the slots a strategy needs (device, alloc
// aligned and zero-filled, free_memory, copy, fill_zero, sum_squares, scale, accumulate,
// alloc_host/free_host); every compute op slot is NULL, so a test can also see how a plugin
// refuses a backend that lacks one. It counts live allocations of both kinds, so a test can see
// that destroy returned everything, and can be told to fail an allocation. Installed, so a third-party strategy's tests can use it too; Keel's
// own strategy, zero and pipeline tests all use this one table.
#pragma once

#include <keel/backend.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>

namespace keel_support::testing {

struct HostMemoryBackend {
  int live_allocations = 0;
  int live_host_allocations = 0;  // alloc_host's, not yet freed
  int host_allocations = 0;       // alloc_host calls ever made
  int allocations_before_failure = -1;  // -1: never fail; 0: the next alloc fails
  const keel_host* host = nullptr;      // for the failure's message

  static keel_status device(void*, keel_device* out) {
    *out = keel_device{KEEL_DEVICE_CPU, 0};
    return KEEL_OK;
  }
  static keel_status alloc(void* self, size_t bytes, void** out_ptr) {
    auto* backend = static_cast<HostMemoryBackend*>(self);
    if (backend->allocations_before_failure == 0)
      return backend->host->set_error(KEEL_ERR_OUT_OF_MEMORY, "backend test: out of memory (requested)");
    if (backend->allocations_before_failure > 0) --backend->allocations_before_failure;
    const size_t rounded = (bytes + 63) / 64 * 64;
    void* data = std::aligned_alloc(64, rounded == 0 ? 64 : rounded);
    std::memset(data, 0, rounded == 0 ? 64 : rounded);
    ++backend->live_allocations;
    *out_ptr = data;
    return KEEL_OK;
  }
  static void free_memory(void* self, void* ptr) {
    if (!ptr) return;
    --static_cast<HostMemoryBackend*>(self)->live_allocations;
    std::free(ptr);
  }
  // Pinned host memory where a real device backend gives it; plain host memory here.
  static keel_status alloc_host(void* self, size_t bytes, void** out_ptr) {
    auto* backend = static_cast<HostMemoryBackend*>(self);
    const size_t rounded = bytes == 0 ? 64 : (bytes + 63) / 64 * 64;
    void* data = std::aligned_alloc(64, rounded);
    std::memset(data, 0, rounded);
    ++backend->live_host_allocations;
    ++backend->host_allocations;
    *out_ptr = data;
    return KEEL_OK;
  }
  static void free_host(void* self, void* ptr) {
    if (!ptr) return;
    --static_cast<HostMemoryBackend*>(self)->live_host_allocations;
    std::free(ptr);
  }
  static keel_status copy(void*, void* dst, const void* src, size_t bytes, int32_t) {
    std::memcpy(dst, src, bytes);
    return KEEL_OK;
  }
  static keel_status fill_zero(void*, void* ptr, size_t bytes) {
    std::memset(ptr, 0, bytes);
    return KEEL_OK;
  }
  static keel_status sum_squares(void*, const float* x, int64_t n, double* out_host) {
    double sum = 0;
    for (int64_t i = 0; i < n; ++i) sum += static_cast<double>(x[i]) * x[i];
    *out_host = sum;
    return KEEL_OK;
  }

  static keel_status scale(void*, float* x, float alpha, int64_t n) {
    for (int64_t i = 0; i < n; ++i) x[i] *= alpha;
    return KEEL_OK;
  }
  static keel_status accumulate(void*, float* dst, const float* src, int64_t n) {
    for (int64_t i = 0; i < n; ++i) dst[i] += src[i];
    return KEEL_OK;
  }

  static keel_backend_api table() {
    keel_backend_api api{};
    api.struct_size = sizeof(api);
    api.device = device;
    api.alloc = alloc;
    api.free_memory = free_memory;
    api.copy = copy;
    api.fill_zero = fill_zero;
    api.sum_squares = sum_squares;
    api.scale = scale;
    api.accumulate = accumulate;
    api.alloc_host = alloc_host;
    api.free_host = free_host;
    return api;
  }
};

}  // namespace keel_support::testing
