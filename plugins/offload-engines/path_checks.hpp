// Start-up checks of the folder an nvme engine keeps its files in. They run when the engine is
// created, so a wrong path fails before training starts rather than at the first step's I/O.
#pragma once

#include <cstdint>
#include <string>

namespace keel_offload {

// Throws keel_support::StatusError naming `folder` and what is expected when it is missing, is
// not a directory, is not writable (a probe file cannot be created and removed), refuses
// O_DIRECT (tmpfs does), or has fewer than `reserve_bytes` free (statvfs).
void check_offload_folder(const std::string& folder, uint64_t reserve_bytes);

// The filesystem type of `path` in words ("tmpfs", "ext4", ...), or its magic number in hex.
std::string filesystem_type_name(const std::string& path);

}  // namespace keel_offload
