// The bookkeeping every offload engine shares: which extents exist, how big each is, how much of
// the engine's capacity they use, and whether a request's range, buffer and sizes are
// acceptable. Pure bookkeeping, no memory or files: an engine keeps its storage beside it, by
// index. Its messages say which call, which extent and which number broke which rule, since the
// caller of an engine is another component, and its author reads them.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "keel_support/common/abi_guard.hpp"

namespace keel_support {

class ExtentTable {
 public:
  // `engine_kind` names the engine in messages ("nvme engine: ...").
  ExtentTable(std::string engine_kind, uint64_t capacity_bytes, uint64_t alignment_bytes);

  // Records a new extent and returns its index (0, 1, ... in the order added). Throws
  // KEEL_ERR_INVALID_ARGUMENT for an empty or repeated name or an unaligned or zero size, and
  // KEEL_ERR_OUT_OF_MEMORY when the extents together would exceed the capacity.
  size_t add(const std::string& name, uint64_t bytes);
  // Throws what add() would throw, and records nothing.
  void check_add(const std::string& name, uint64_t bytes) const;
  // Throws KEEL_ERR_NOT_FOUND if no extent is called `name`.
  size_t find(const std::string& name) const;
  uint64_t bytes_of(size_t index) const { return extents_[index].bytes; }
  const std::string& name_of(size_t index) const { return extents_[index].name; }
  size_t count() const { return extents_.size(); }
  uint64_t reserved_bytes() const { return reserved_bytes_; }

  // Throws KEEL_ERR_INVALID_ARGUMENT unless `buffer`, `offset` and `bytes` are multiples of the
  // alignment, `buffer` is not null, and [offset, offset + bytes) lies inside extent `index`.
  // `verb` is "submit_read" or "submit_write".
  void check_request(const char* verb, size_t index, uint64_t offset, const void* buffer, uint64_t bytes) const;

 private:
  struct Extent {
    std::string name;
    uint64_t bytes;
  };
  std::string engine_kind_;
  uint64_t capacity_bytes_;
  uint64_t alignment_bytes_;
  uint64_t reserved_bytes_ = 0;
  std::vector<Extent> extents_;
  std::unordered_map<std::string, size_t> index_of_;
};

inline ExtentTable::ExtentTable(std::string engine_kind, uint64_t capacity_bytes, uint64_t alignment_bytes)
    : engine_kind_(std::move(engine_kind)), capacity_bytes_(capacity_bytes), alignment_bytes_(alignment_bytes) {}

inline size_t ExtentTable::add(const std::string& name, uint64_t bytes) {
  check_add(name, bytes);
  index_of_.emplace(name, extents_.size());
  extents_.push_back({name, bytes});
  reserved_bytes_ += bytes;
  return extents_.size() - 1;
}

inline void ExtentTable::check_add(const std::string& name, uint64_t bytes) const {
  std::string where = engine_kind_ + " engine: add_extent \"" + name + "\" of " + std::to_string(bytes) + " bytes: ";
  if (name.empty()) throw StatusError(KEEL_ERR_INVALID_ARGUMENT, where + "the name is empty; expected a non-empty name");
  if (index_of_.count(name) != 0) {
    throw StatusError(KEEL_ERR_INVALID_ARGUMENT, where + "an extent of that name already exists; expected a new name");
  }
  if (bytes == 0 || bytes % alignment_bytes_ != 0) {
    throw StatusError(KEEL_ERR_INVALID_ARGUMENT, where + "expected a size that is a positive multiple of the "
                                                         "engine's alignment " + std::to_string(alignment_bytes_));
  }
  if (bytes > capacity_bytes_ - reserved_bytes_) {
    throw StatusError(KEEL_ERR_OUT_OF_MEMORY,
                      where + "the engine already holds " + std::to_string(reserved_bytes_) + " bytes in " +
                          std::to_string(extents_.size()) + " extents, and this one would exceed its capacity_bytes " +
                          std::to_string(capacity_bytes_) + "; raise capacity_bytes or offload less");
  }
}

inline size_t ExtentTable::find(const std::string& name) const {
  auto found = index_of_.find(name);
  if (found == index_of_.end()) {
    throw StatusError(KEEL_ERR_NOT_FOUND, engine_kind_ + " engine: no extent is called \"" + name + "\" (it has " +
                                              std::to_string(extents_.size()) + "); expected add_extent first");
  }
  return found->second;
}

inline void ExtentTable::check_request(const char* verb, size_t index, uint64_t offset, const void* buffer,
                                uint64_t bytes) const {
  const Extent& extent = extents_[index];
  std::string where = engine_kind_ + " engine: " + verb + " of extent \"" + extent.name + "\" at offset " +
                      std::to_string(offset) + ", " + std::to_string(bytes) + " bytes: ";
  std::string rule = " is not a multiple of the engine's alignment " + std::to_string(alignment_bytes_) +
                     " (align buffers, offsets and sizes to alignment_bytes())";
  if (buffer == nullptr) throw StatusError(KEEL_ERR_INVALID_ARGUMENT, where + "the buffer is null");
  if (reinterpret_cast<uintptr_t>(buffer) % alignment_bytes_ != 0) {
    throw StatusError(KEEL_ERR_INVALID_ARGUMENT, where + "the buffer address" + rule);
  }
  if (offset % alignment_bytes_ != 0) throw StatusError(KEEL_ERR_INVALID_ARGUMENT, where + "the offset" + rule);
  if (bytes % alignment_bytes_ != 0) throw StatusError(KEEL_ERR_INVALID_ARGUMENT, where + "the size" + rule);
  if (offset > extent.bytes || bytes > extent.bytes - offset) {
    throw StatusError(KEEL_ERR_INVALID_ARGUMENT, where + "the range ends past the extent's " +
                                                     std::to_string(extent.bytes) + " bytes");
  }
}

}  // namespace keel_support
