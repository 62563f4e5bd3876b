// The plugin registry: finds libkeel-<name>.so files in the discovery order of docs/architecture.md §8
// rule 8, loads them with dlopen, checks each entry (ABI major, table size, required slots,
// names an earlier library already provides) and keeps every library loaded for the life of the process, so no object a
// plugin made can outlive its code.
#pragma once

#include <keel/plugin.h>

#include <string>
#include <vector>

namespace keel {

struct LoadedPlugin {
  keel_plugin_info info;  // copied from the library; strings and api point into it
  std::string path;       // the library file
};

struct RefusedLibrary {
  std::string path;
  std::string reason;     // names the file and why
  std::string plugin_name;  // when the refusal concerns one named plugin, else ""
};

// A later library's plugin whose kind and name an earlier one in the search order already
// provides: skipped alone, the rest of its library loads.
struct ShadowedPlugin {
  int32_t kind;
  std::string name;
  std::string path;  // the library whose plugin is skipped
  std::string by;    // the library that provides the name ("" for this process)
};

const char* kind_name(int32_t kind);
// "optimizer plugin 'x' of A is shadowed by the one in B ...": for the log and `keel plugins`.
std::string shadow_notice(const ShadowedPlugin& shadow);

class PluginRegistry {
 public:
  // The process-wide registry. Thread-safe.
  static PluginRegistry& instance();

  // Loads one library now, ahead of folder discovery; throws KeelError if it is refused.
  void register_library(const std::string& path);
  // Adds a plugin implemented in this process (a binding's); checked like a library's entry.
  // A name already taken (by a library or an earlier in-process plugin) is refused unless
  // `replace`, which puts this plugin in its place for trainers created afterwards.
  void register_in_process(const keel_plugin_info& info, bool replace = false);
  // Accepted plugins by position, after discovery; addresses stay valid for the process.
  size_t count();
  const LoadedPlugin& at(size_t index);
  // Adds folders (the config's plugin_path) searched after registered libraries.
  void add_search_folders(const std::vector<std::string>& folders);

  // The plugin of `kind` called `name`; throws KeelError naming what was searched and, when
  // the name matches a refused library, why that library was refused.
  const LoadedPlugin& find(int32_t kind, const std::string& name);

  // Every accepted plugin and every refusal, after discovering all folders.
  std::vector<LoadedPlugin> list();
  std::vector<RefusedLibrary> refusals();
  std::vector<ShadowedPlugin> shadowed();
  std::vector<std::string> search_folders();

 private:
  PluginRegistry() = default;
  void discover_locked();
  void load_library_locked(const std::string& path, bool must_succeed);
};

}  // namespace keel
