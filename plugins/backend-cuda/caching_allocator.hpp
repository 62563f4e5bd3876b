// The cuda backend's device memory: a caching allocator in the manner of PyTorch's, much
// simplified. cudaMalloc and cudaFree synchronise the device and cost tens of microseconds, and a
// training step frees and asks again for the same sizes every step, so freed blocks go to a
// free list per size bucket and are handed out again; everything returns to the driver at
// destroy. One stream uses the memory, so a block freed while ops that read it are still queued
// can be reused at once: the next op that writes it is queued after them.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <map>
#include <mutex>
#include <unordered_map>
#include <vector>

namespace keel_cuda {

class CachingAllocator {
 public:
  CachingAllocator() = default;
  CachingAllocator(const CachingAllocator&) = delete;
  CachingAllocator& operator=(const CachingAllocator&) = delete;
  ~CachingAllocator() { release_all(); }

  // At least `bytes` of device memory (256-byte aligned, contents undefined). When cudaMalloc
  // fails, the cached blocks are returned to the driver (after `stream` has drained) and it is
  // tried once more; then it throws keel_support::StatusError(KEEL_ERR_OUT_OF_MEMORY).
  void* allocate(size_t bytes, cudaStream_t stream);
  // Back to its bucket's free list. Throws for a pointer this allocator did not hand out.
  void release(void* ptr);
  // Every block, cached or live, back to the driver. The caller has synchronised the device.
  void release_all();

  // Bucket sizes: powers of two from 512 bytes up to 1 MiB, then multiples of 2 MiB.
  static size_t bucket_bytes(size_t bytes);

 private:
  void free_cached_locked();

  std::mutex mutex_;
  std::map<size_t, std::vector<void*>> free_;  // bucket bytes -> blocks ready for reuse
  std::unordered_map<void*, size_t> live_;     // handed-out block -> its bucket bytes
};

}  // namespace keel_cuda
