// The "files" engine's storage: one ordinary file per extent, through the page cache, in a
// folder of its own that it removes when it goes. All it does is reserve, read and write,
// synchronously; keel_support::SyncOffloadEngine makes that the asynchronous offload kind.
#pragma once

#include <keel_support/offload/offload_engine_base.hpp>

#include <cstdint>
#include <string>
#include <vector>

namespace keel_files {

class FileExtents final : public keel_support::ExtentStore {
 public:
  // Makes a folder keel-files-XXXXXX inside `parent` (an existing, writable folder).
  explicit FileExtents(const std::string& parent);
  ~FileExtents() override;  // closes and removes the files and the folder

  void add_extent(size_t index, const std::string& name, uint64_t bytes) override;
  void write(size_t index, uint64_t offset, const void* src, uint64_t bytes) override;
  void read(size_t index, uint64_t offset, void* dst, uint64_t bytes) override;

 private:
  std::string folder_;
  std::vector<int> fds_;  // by extent index
  std::vector<std::string> paths_;
};

}  // namespace keel_files
