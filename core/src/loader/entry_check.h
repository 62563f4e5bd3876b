// What makes a library's plugin list, and each entry in it, safe to read: an array that exists for
// the count the list claims, a count no real library comes near, and entries with a name, a
// version and a kind table (table_check.h). A plugin is untrusted input until these pass: the
// loader reads nothing past the first problem, so a broken library is refused, never a crash.
// Each returns "" or the reason, which the loader prefixes with the library's path.
#pragma once

#include <keel/plugin.h>

#include <cstddef>
#include <string>

namespace keel {

// More than any library holds; a larger count is a corrupt or uninitialised list.
inline constexpr size_t kMaxPluginsPerLibrary = 1024;

std::string plugin_list_problem(const keel_plugin_list& list);

// Before the entry's ABI version is checked: what identifies it (struct_size, name).
std::string plugin_entry_identity_problem(const keel_plugin_info& info, size_t index);

// After the ABI check: the version string and the kind table.
std::string plugin_entry_contents_problem(const keel_plugin_info& info);

}  // namespace keel
