// The bookkeeping every engine shares: which extents exist, how big each is, how much of the
// engine's capacity they use, and whether a request's range, buffer and sizes are acceptable.
// Pure bookkeeping, no memory or files: the engines keep their storage beside it, by index.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <unordered_map>
#include <vector>

namespace keel_offload {

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

}  // namespace keel_offload
