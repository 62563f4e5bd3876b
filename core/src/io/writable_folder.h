// A start-up check that an output folder can be created and written, so a run whose
// checkpoint folder is unwritable stops before its first step instead of at its first save
// (for `every: 0`, after the whole run).
#pragma once

#include <string>

namespace keel {

// Creates `folder` (and its parents) if missing, then creates, writes and removes a small probe
// file in it. Throws KeelError(KEEL_ERR_IO) "<json_path>: cannot write <folder>: <reason>".
void require_writable_folder(const std::string& folder, const std::string& json_path);

}  // namespace keel
