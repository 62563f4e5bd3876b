// What the offload tests share: scratch folders on an O_DIRECT-capable filesystem, engines of
// either kind built small, random bytes, a way to catch an engine's error with its message, and
// a child process in a private mount namespace for the checks that need a mount of their own.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include <keel_support/common/abi_guard.hpp>
#include <keel_support/offload/aligned_buffer.hpp>
#include <keel_support/offload/offload_engine.hpp>

namespace offload_test {

// A new empty folder under the build folder, removed with its contents when destroyed.
class ScratchFolder {
 public:
  ScratchFolder();
  ~ScratchFolder();
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

// Fails the test loudly (not a skip) when the build folder's filesystem refuses O_DIRECT: the
// nvme tests would otherwise prove nothing.
void require_direct_io(const std::string& folder);

// "cpu" or "nvme", with `capacity_bytes`; the nvme engine keeps its files in `folder`.
std::unique_ptr<keel_support::OffloadEngine> make_engine(const std::string& kind, const std::string& folder,
                                                         uint64_t capacity_bytes, uint32_t queue_depth = 16,
                                                         uint64_t block_bytes = uint64_t(1) << 20);

// `bytes` random bytes from `seed`, in a buffer aligned for either engine.
keel_support::AlignedBuffer random_bytes(uint64_t bytes, uint32_t seed);

// The descriptor this process holds for `path` (found through /proc/self/fd), or -1.
int descriptor_of(const std::string& path);
// The path of the one extent file (*.extent) in `folder`, or "" when there are none or several.
std::string only_file_in(const std::string& folder);

// Runs `call` and returns the StatusError it throws; fails the test if it throws nothing.
struct CaughtError {
  keel_status code = KEEL_OK;
  std::string message;
};
CaughtError error_of(const std::function<void()>& call);

// Runs `check` in a forked child that has its own mount namespace (so mounts made there vanish
// with it) and returns the message `check` returned; `ran` is false when the child could not
// get a namespace (no CAP_SYS_ADMIN), and then the caller decides how else to test.
struct ChildResult {
  bool ran = false;
  std::string message;
};
ChildResult run_in_private_mount_namespace(const std::function<std::string()>& check);

}  // namespace offload_test
