// The caching allocator of caching_allocator.hpp.
#include "caching_allocator.hpp"

#include <keel/types.h>
#include <keel_support/common/abi_guard.hpp>

#include <string>

namespace keel_cuda {

size_t CachingAllocator::bucket_bytes(size_t bytes) {
  constexpr size_t kSmallest = 512, kLargeStep = size_t{2} << 20;
  if (bytes <= kSmallest) return kSmallest;
  if (bytes <= (size_t{1} << 20)) {
    size_t bucket = kSmallest;
    while (bucket < bytes) bucket <<= 1;
    return bucket;
  }
  return (bytes + kLargeStep - 1) / kLargeStep * kLargeStep;
}

void* CachingAllocator::allocate(size_t bytes, cudaStream_t stream) {
  const size_t bucket = bucket_bytes(bytes);
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = free_.find(bucket);
  if (it != free_.end() && !it->second.empty()) {
    void* ptr = it->second.back();
    it->second.pop_back();
    live_[ptr] = bucket;
    return ptr;
  }
  void* ptr = nullptr;
  cudaError_t status = cudaMalloc(&ptr, bucket);
  if (status == cudaErrorMemoryAllocation) {
    cudaGetLastError();  // clear the sticky-free error before trying again
    cudaStreamSynchronize(stream);
    free_cached_locked();
    status = cudaMalloc(&ptr, bucket);
  }
  if (status != cudaSuccess) {
    cudaGetLastError();
    size_t free_bytes = 0, total_bytes = 0;
    cudaMemGetInfo(&free_bytes, &total_bytes);
    throw keel_support::StatusError(
        status == cudaErrorMemoryAllocation ? KEEL_ERR_OUT_OF_MEMORY : KEEL_ERR_INTERNAL,
        "alloc: cudaMalloc of " + std::to_string(bucket) + " bytes failed: " + cudaGetErrorString(status) + " (" +
            std::to_string(free_bytes >> 20) + " MiB of " + std::to_string(total_bytes >> 20) + " MiB free)");
  }
  live_[ptr] = bucket;
  return ptr;
}

void CachingAllocator::release(void* ptr) {
  if (!ptr) return;
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = live_.find(ptr);
  if (it == live_.end())
    throw keel_support::StatusError(KEEL_ERR_INVALID_ARGUMENT,
                                    "free_memory: pointer was not allocated by this backend");
  free_[it->second].push_back(ptr);
  live_.erase(it);
}

void CachingAllocator::free_cached_locked() {
  for (auto& [bucket, blocks] : free_)
    for (void* ptr : blocks) cudaFree(ptr);
  free_.clear();
}

void CachingAllocator::release_all() {
  std::lock_guard<std::mutex> lock(mutex_);
  free_cached_locked();
  for (auto& [ptr, bucket] : live_) cudaFree(ptr);
  live_.clear();
}

}  // namespace keel_cuda
