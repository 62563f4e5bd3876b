// Opening files that came from elsewhere (checkpoints, shards, init_from): only regular files,
// and never an open that blocks. A FIFO or a device named where a file is expected would
// otherwise hang the run (open of a FIFO waits for a writer) or read forever (/dev/zero).
#pragma once

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

// The whole file, through open_regular_file; `max_bytes` bounds what a bogus file can make us
// allocate (the error names the size and the bound).
std::vector<unsigned char> read_regular_file(const std::string& path, const std::string& what,
                                             Symlinks symlinks = Symlinks::follow, size_t max_bytes = SIZE_MAX);

}  // namespace keel
