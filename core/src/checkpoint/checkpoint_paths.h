// Names and discovery of checkpoints under a root folder: step-NNNNNNNN folders (complete by
// construction: renamed into place only after everything in them was fsync'ed), the `latest`
// pointer, and leftovers of interrupted saves (.tmp-*).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace keel {

std::string step_folder_name(int64_t step);          // "step-00000100"
// Complete checkpoints under root (folders step-* holding manifest.json; never symlinks), oldest
// first.
std::vector<std::string> complete_checkpoints(const std::string& root);
// Deletes complete checkpoints beyond `keep` (never `protect`) and any .tmp-* leftovers.
void prune_checkpoints(const std::string& root, int32_t keep, const std::string& protect);

}  // namespace keel
