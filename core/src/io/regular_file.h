// Opening files that came from elsewhere (checkpoints, shards, init_from): only regular files,
// and never an open that blocks. A FIFO or a device named where a file is expected would
// otherwise hang the run (open of a FIFO waits for a writer) or read forever (/dev/zero).
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <string>
#include <vector>

namespace keel {

enum class Symlinks { follow, refuse };

// A read-only descriptor of `path`, which must be a regular file; opened with O_NONBLOCK (so a
// FIFO cannot block the open) and switched back to blocking once fstat says it is regular.
// Symlinks::refuse fails on a symlink as the last component (O_NOFOLLOW). Throws KeelError
// (KEEL_ERR_IO) "<path>: <what> ...: not a regular file (a FIFO)" and the like.
int open_regular_file(const std::string& path, const std::string& what, Symlinks symlinks = Symlinks::follow);

// Owns a descriptor (from open_regular_file) and closes it.
struct FileDescriptor {
  int fd;
  explicit FileDescriptor(int descriptor) : fd(descriptor) {}
  FileDescriptor(const FileDescriptor&) = delete;
  FileDescriptor& operator=(const FileDescriptor&) = delete;
  ~FileDescriptor();
};

// The size fstat gives for the descriptor; throws KeelError naming `path` when it cannot.
uint64_t file_size(int fd, const std::string& path, const std::string& what);

// Reads exactly `bytes` bytes from the descriptor's position into `out`. A file that ends first
// is reported as having shrunk while being read.
void read_exactly(int fd, unsigned char* out, size_t bytes, const std::string& path, const std::string& what);

// The whole file, through open_regular_file; `max_bytes` bounds what a bogus file can make us
// allocate (the error names the size and the bound).
std::vector<unsigned char> read_regular_file(const std::string& path, const std::string& what,
                                             Symlinks symlinks = Symlinks::follow, size_t max_bytes = SIZE_MAX);

// "a character device", "a FIFO", "a folder" ...: what a path is instead of a regular file, for
// messages.
std::string file_type_name(mode_t mode);

}  // namespace keel
