// A model's activations and scratch carved out of one backend allocation (llm.c's "one malloc,
// structs of pointers"): one allocator call per batch shape instead of one per tensor, and one
// pass to size it that cannot disagree with the pass that hands out the pointers.
#pragma once

#include <cstddef>
#include <cstdint>

namespace keel_support {

// Carves one allocation into 64-byte-aligned pieces (llm.c's "one malloc, structs of pointers").
// First pass: take() with base == nullptr counts the bytes; second pass hands out pointers.
class Carver {
 public:
  explicit Carver(char* base) : base_(base) {}
  template <typename T>
  T* take(int64_t count) {
    size_t offset = used_;
    used_ += (static_cast<size_t>(count) * sizeof(T) + 63) / 64 * 64;
    return base_ ? reinterpret_cast<T*>(base_ + offset) : nullptr;
  }
  size_t used() const { return used_; }

 private:
  char* base_;
  size_t used_ = 0;
};

}  // namespace keel_support
