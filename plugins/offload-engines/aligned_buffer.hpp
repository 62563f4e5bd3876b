// A zero-filled host allocation aligned for O_DIRECT (the nvme engine's bounce-free buffers) or
// for vector copies (the cpu engine's extents). Move-only: it owns its memory.
#pragma once

#include <cstdint>

namespace keel_offload {

class AlignedBuffer {
 public:
  AlignedBuffer() = default;
  // Throws KEEL_ERR_OUT_OF_MEMORY (naming the size) if the allocation fails, and
  // KEEL_ERR_INVALID_ARGUMENT if `alignment_bytes` is not a power of two multiple of sizeof(void*).
  AlignedBuffer(uint64_t bytes, uint64_t alignment_bytes);
  AlignedBuffer(AlignedBuffer&& other) noexcept;
  AlignedBuffer& operator=(AlignedBuffer&& other) noexcept;
  AlignedBuffer(const AlignedBuffer&) = delete;
  AlignedBuffer& operator=(const AlignedBuffer&) = delete;
  ~AlignedBuffer();

  char* data() { return data_; }
  const char* data() const { return data_; }
  uint64_t bytes() const { return bytes_; }

 private:
  char* data_ = nullptr;
  uint64_t bytes_ = 0;
};

}  // namespace keel_offload
