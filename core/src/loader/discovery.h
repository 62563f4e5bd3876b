// Where plugin libraries are looked for, in order: the config's plugin_path folders, the
// KEEL_PLUGIN_PATH variable (':'-separated), then the plugin folder beside the core library
// (<libdir>/keel/plugins, true both in the build tree and in an install).
#pragma once

#include <string>
#include <vector>

namespace keel {

std::vector<std::string> plugin_search_folders(const std::vector<std::string>& config_folders);
// libkeel-*.so files of one folder, sorted by name; libkeel-core.so excluded.
std::vector<std::string> plugin_files_in(const std::string& folder);

}  // namespace keel
