// Discovery folders and file naming for plugin libraries.
#include "loader/discovery.h"

#include <boost/dll/runtime_symbol_info.hpp>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <sstream>

namespace keel {
namespace fs = std::filesystem;

std::vector<std::string> plugin_search_folders(const std::vector<std::string>& config_folders) {
  std::vector<std::string> folders = config_folders;
  if (const char* env = std::getenv("KEEL_PLUGIN_PATH")) {
    std::stringstream list(env);
    std::string folder;
    while (std::getline(list, folder, ':'))
      if (!folder.empty()) folders.push_back(folder);
  }
  // The folder beside this library: build/lib/keel/plugins or <prefix>/lib/keel/plugins.
  fs::path core_library = boost::dll::this_line_location().string();
  folders.push_back((core_library.parent_path() / "keel" / "plugins").string());
  return folders;
}

std::vector<std::string> plugin_files_in(const std::string& folder) {
  std::vector<std::string> files;
  std::error_code error;
  for (const auto& entry : fs::directory_iterator(folder, error)) {
    const std::string name = entry.path().filename().string();
    bool plugin_name = name.rfind("libkeel-", 0) == 0 && name.size() > 11 &&
                       name.compare(name.size() - 3, 3, ".so") == 0 && name != "libkeel-core.so";
    if (plugin_name && entry.is_regular_file()) files.push_back(entry.path().string());
  }
  std::sort(files.begin(), files.end());
  return files;
}

}  // namespace keel
