// Discovery folders and file naming for plugin libraries.
#include "loader/discovery.h"

#include <boost/dll/runtime_symbol_info.hpp>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <sstream>

#include "host/log.h"

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

// A file that cannot be examined (a symlink loop, no permission) is skipped with a warning:
// one broken entry in a plugin folder must not stop every command.
std::vector<std::string> plugin_files_in(const std::string& folder) {
  std::vector<std::string> files;
  std::error_code error;
  fs::directory_iterator it(folder, error), end;
  for (; !error && it != end; it.increment(error)) {
    const std::string name = it->path().filename().string();
    bool plugin_name = name.rfind("libkeel-", 0) == 0 && name.size() > 11 &&
                       name.compare(name.size() - 3, 3, ".so") == 0 && name != "libkeel-core.so";
    if (!plugin_name) continue;
    std::error_code status_error;
    const bool regular = it->is_regular_file(status_error);
    if (status_error)
      log_line(KEEL_LOG_WARN, "loader", "skipping " + it->path().string() + ": " + status_error.message());
    else if (regular)
      files.push_back(it->path().string());
  }
  if (error && error != std::errc::no_such_file_or_directory)
    log_line(KEEL_LOG_WARN, "loader", "plugin folder " + folder + ": cannot list it: " + error.message());
  std::sort(files.begin(), files.end());
  return files;
}

}  // namespace keel
