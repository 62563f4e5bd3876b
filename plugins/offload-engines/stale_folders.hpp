// The nvme engine's folders outlive a process that dies without running its destroy (SIGKILL,
// a launcher ending a rank stuck in a collective, a machine that lost power). Each folder holds
// an owner file naming its host and pid, so a later engine in the same offload.path can tell
// whose it is: a folder whose process is gone from this host is removed at start-up, saying so;
// one it cannot place (another host's, or made before owner files) is only named, for a person
// to remove, since a shared filesystem may hold a live run of another machine.
#pragma once

#include <string>
#include <vector>

namespace keel_offload {

// The owner file's name inside an engine's folder.
inline constexpr const char* kOwnerFileName = ".keel-owner";

// Writes `files_folder`/.keel-owner ("host H\npid P\n"); throws StatusError (KEEL_ERR_IO).
void write_owner_file(const std::string& files_folder);

// Removes the keel-offload-* folders in `folder` left by processes of this host that are no
// longer running, and returns one line per folder removed or left in place (empty: none found).
// Never throws: a folder it cannot read or remove is reported in its line and left.
std::vector<std::string> remove_stale_folders(const std::string& folder);

}  // namespace keel_offload
