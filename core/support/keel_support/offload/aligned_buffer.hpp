// A zero-filled host allocation aligned for O_DIRECT or for vector copies: an offload engine's
// extents in memory, the I/O buffers its alloc_buffer hands out, a test's source bytes.
// Move-only: it owns its memory.
#pragma once

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>
#include <utility>

#include "keel_support/common/abi_guard.hpp"

namespace keel_support {

class AlignedBuffer {
 public:
  AlignedBuffer() = default;
  // Throws KEEL_ERR_OUT_OF_MEMORY (naming the size) if the allocation fails, and
  // KEEL_ERR_INVALID_ARGUMENT if `alignment_bytes` is not a power of two multiple of sizeof(void*).
  AlignedBuffer(uint64_t bytes, uint64_t alignment_bytes) {
    const bool power_of_two = alignment_bytes != 0 && (alignment_bytes & (alignment_bytes - 1)) == 0;
    if (!power_of_two || alignment_bytes % sizeof(void*) != 0)
      throw StatusError(KEEL_ERR_INVALID_ARGUMENT, "aligned buffer: alignment " + std::to_string(alignment_bytes) +
                                                       " is not a power of two multiple of " +
                                                       std::to_string(sizeof(void*)));
    if (bytes == 0) return;
    void* memory = nullptr;
    if (posix_memalign(&memory, alignment_bytes, bytes) != 0)
      throw StatusError(KEEL_ERR_OUT_OF_MEMORY, "aligned buffer: cannot allocate " + std::to_string(bytes) +
                                                    " bytes aligned to " + std::to_string(alignment_bytes));
    std::memset(memory, 0, bytes);  // engines promise zeros for bytes never written
    data_ = static_cast<char*>(memory);
    bytes_ = bytes;
  }
  AlignedBuffer(AlignedBuffer&& other) noexcept
      : data_(std::exchange(other.data_, nullptr)), bytes_(std::exchange(other.bytes_, 0)) {}
  AlignedBuffer& operator=(AlignedBuffer&& other) noexcept {
    if (this != &other) {
      std::free(data_);
      data_ = std::exchange(other.data_, nullptr);
      bytes_ = std::exchange(other.bytes_, 0);
    }
    return *this;
  }
  AlignedBuffer(const AlignedBuffer&) = delete;
  AlignedBuffer& operator=(const AlignedBuffer&) = delete;
  ~AlignedBuffer() { std::free(data_); }

  char* data() { return data_; }
  const char* data() const { return data_; }
  uint64_t bytes() const { return bytes_; }

 private:
  char* data_ = nullptr;
  uint64_t bytes_ = 0;
};

}  // namespace keel_support
