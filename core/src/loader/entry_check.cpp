// The checks of entry_check.h, each naming the field that is wrong and what was expected.
#include "loader/entry_check.h"

#include "loader/table_check.h"

namespace keel {

std::string plugin_list_problem(const keel_plugin_list& list) {
  if (list.count > 0 && !list.plugins)
    return "its plugin list has count " + std::to_string(list.count) + " but no array (plugins is NULL)";
  if (list.count > kMaxPluginsPerLibrary)
    return "its plugin list claims " + std::to_string(list.count) + " plugins; a library may hold at most " +
           std::to_string(kMaxPluginsPerLibrary);
  return "";
}

std::string plugin_entry_identity_problem(const keel_plugin_info& info, size_t index) {
  const std::string entry = "plugin entry " + std::to_string(index);
  if (info.struct_size < sizeof(keel_plugin_info))
    return entry + " has struct_size " + std::to_string(info.struct_size) + ", smaller than keel_plugin_info (" +
           std::to_string(sizeof(keel_plugin_info)) + " bytes)";
  if (!info.name) return entry + " has no name (name is NULL)";
  if (!*info.name) return entry + " has an empty name";
  return "";
}

std::string plugin_entry_contents_problem(const keel_plugin_info& info) {
  if (!info.version) return "its entry has no version (version is NULL)";
  return check_kind_table(info);
}

}  // namespace keel
