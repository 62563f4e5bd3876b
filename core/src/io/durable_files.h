// What makes a write survive a crash: fsync of a file and of the folder that names it, and a
// rename that replaces a file atomically. Used by checkpoints and by anything that must never
// leave a half-written file behind.
#pragma once

#include <string>

namespace keel {

void fsync_path(const std::string& path);         // a file or a folder; throws KeelError on failure
void rename_durably(const std::string& from, const std::string& to);  // rename, then fsync the parent
// Writes text to `path` through a temporary file (path.tmp-<pid>) and an atomic rename; on any
// failure the temporary is removed before the KeelError is thrown.
void write_file_atomically(const std::string& path, const std::string& text);

}  // namespace keel
