// posix_memalign plus a zero fill: the engines promise zeros for bytes never written.
#include "aligned_buffer.hpp"

#include <cstdlib>
#include <cstring>
#include <string>
#include <utility>

#include "keel_support/abi_guard.hpp"

namespace keel_offload {

using keel_support::StatusError;

AlignedBuffer::AlignedBuffer(uint64_t bytes, uint64_t alignment_bytes) {
  bool power_of_two = alignment_bytes != 0 && (alignment_bytes & (alignment_bytes - 1)) == 0;
  if (!power_of_two || alignment_bytes % sizeof(void*) != 0) {
    throw StatusError(KEEL_ERR_INVALID_ARGUMENT, "aligned buffer: alignment " + std::to_string(alignment_bytes) +
                                                     " is not a power of two multiple of " +
                                                     std::to_string(sizeof(void*)));
  }
  if (bytes == 0) return;
  void* memory = nullptr;
  if (posix_memalign(&memory, alignment_bytes, bytes) != 0) {
    throw StatusError(KEEL_ERR_OUT_OF_MEMORY, "aligned buffer: cannot allocate " + std::to_string(bytes) +
                                                  " bytes aligned to " + std::to_string(alignment_bytes));
  }
  std::memset(memory, 0, bytes);
  data_ = static_cast<char*>(memory);
  bytes_ = bytes;
}

AlignedBuffer::AlignedBuffer(AlignedBuffer&& other) noexcept
    : data_(std::exchange(other.data_, nullptr)), bytes_(std::exchange(other.bytes_, 0)) {}

AlignedBuffer& AlignedBuffer::operator=(AlignedBuffer&& other) noexcept {
  if (this != &other) {
    std::free(data_);
    data_ = std::exchange(other.data_, nullptr);
    bytes_ = std::exchange(other.bytes_, 0);
  }
  return *this;
}

AlignedBuffer::~AlignedBuffer() { std::free(data_); }

}  // namespace keel_offload
