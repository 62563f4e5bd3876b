// Loading and checking plugin libraries. A refused library is remembered with its reason, so
// `keel plugins` can show it and a config that names it gets the reason instead of "not found".
// A name is one plugin: the first library in the search order to provide it wins, and a later
// library's plugin of that name alone is shadowed (noted at start-up and by `keel plugins`),
// never the rest of that library.
#include "loader/plugin_registry.h"

#include <keel/version.h>
#include <keel_support/common/json_section.hpp>

#include <dlfcn.h>

#include <deque>
#include <filesystem>
#include <memory>
#include <mutex>
#include <set>
#include <utility>

#include "host/errors.h"
#include "host/log.h"
#include "loader/discovery.h"
#include "loader/entry_check.h"

namespace keel {
namespace {

// dlopen's handle; a refused library is closed again, an accepted one never is.
struct LibraryCloser {
  void operator()(void* handle) const { ::dlclose(handle); }
};
using LibraryHandle = std::unique_ptr<void, LibraryCloser>;

// dlerror()'s text: the loader's own reason (no such file, wrong ELF class, a missing
// dependency, an undefined symbol), which errno does not carry.
std::string last_dl_error() {
  const char* reason = ::dlerror();
  return reason ? reason : "unknown reason";
}

struct RegistryState {
  std::mutex mutex;
  std::vector<LibraryHandle> libraries;  // never unloaded
  std::deque<LoadedPlugin> plugins;  // a deque: entries never move, so their addresses can be handed out
  std::vector<RefusedLibrary> refused;
  std::vector<ShadowedPlugin> shadowed;
  std::set<std::string> seen_files;
  std::vector<std::string> config_folders;
  std::vector<std::string> searched_folders;
  bool discovered = false;
};

RegistryState& state() {
  static RegistryState s;
  return s;
}

std::string canonical_or_same(const std::string& path) {
  std::error_code error;
  auto canonical = std::filesystem::canonical(path, error);
  return error ? path : canonical.string();
}

std::string abi_text(uint32_t major, uint32_t minor) { return std::to_string(major) + "." + std::to_string(minor); }

// The handshake of docs/architecture.md §8, rule 2: the same major, and a minor no newer than the core's
// (minors only append, so an older plugin's shorter tables and structs still read correctly;
// the core checks KEEL_HAS_SLOT before any slot a later minor appended). "" when acceptable.
std::string abi_refusal(uint32_t major, uint32_t minor) {
  const std::string core = abi_text(KEEL_ABI_VERSION_MAJOR, KEEL_ABI_VERSION_MINOR);
  if (major != KEEL_ABI_VERSION_MAJOR)
    return "it was built for Keel ABI " + abi_text(major, minor) + " but this core speaks ABI " + core +
           "; rebuild it against this Keel's headers";
  if (minor > KEEL_ABI_VERSION_MINOR)
    return "it was built for Keel ABI " + abi_text(major, minor) + ", newer than this core's ABI " + core +
           "; update Keel or rebuild the plugin against this Keel's headers";
  return "";
}

// Where an accepted plugin of this kind and name comes from, or nullptr.
const LoadedPlugin* provider_locked(int32_t kind, const std::string& name) {
  for (const auto& plugin : state().plugins)
    if (plugin.info.kind == kind && name == plugin.info.name) return &plugin;
  return nullptr;
}

}  // namespace

const char* kind_name(int32_t kind) {
  switch (kind) {
    case KEEL_KIND_BACKEND: return "backend";
    case KEEL_KIND_MODEL: return "model";
    case KEEL_KIND_OPTIMIZER: return "optimizer";
    case KEEL_KIND_STRATEGY: return "strategy";
    case KEEL_KIND_DATA: return "data";
    case KEEL_KIND_COMM: return "comm";
    case KEEL_KIND_SCHEDULE: return "schedule";
    case KEEL_KIND_OFFLOAD: return "offload";
    default: return "unknown";
  }
}

PluginRegistry& PluginRegistry::instance() {
  static PluginRegistry registry;
  return registry;
}

void PluginRegistry::load_library_locked(const std::string& raw_path, bool must_succeed) {
  RegistryState& s = state();
  const std::string path = canonical_or_same(raw_path);
  if (!s.seen_files.insert(path).second) return;
  auto refuse = [&](const std::string& reason, const std::string& plugin_name = "") {
    std::string message = "plugin library " + path + " was refused: " + reason;
    if (must_succeed) throw KeelError(KEEL_ERR_ABI_MISMATCH, message);
    log_line(KEEL_LOG_DEBUG, "loader", message);
    s.refused.push_back({path, message, plugin_name});
  };

  ::dlerror();  // clears an earlier, unrelated error
  LibraryHandle library(::dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL));
  if (!library) return refuse("it could not be loaded (" + last_dl_error() + ")");
  void* entry_symbol = ::dlsym(library.get(), KEEL_PLUGIN_ENTRY_SYMBOL);
  if (!entry_symbol)
    return refuse("it exports no '" KEEL_PLUGIN_ENTRY_SYMBOL "' symbol, so it is not a Keel plugin "
                  "(define it with extern \"C\" KEEL_EXPORT)");
  auto entry = reinterpret_cast<const keel_plugin_list* (*)()>(entry_symbol);
  const keel_plugin_list* list = entry();
  if (!list || list->struct_size < sizeof(keel_plugin_list))
    return refuse(std::string(KEEL_PLUGIN_ENTRY_SYMBOL) + " returned " + (list ? "a list smaller than ABI 0.1's" : "NULL"));
  if (std::string why = abi_refusal(list->abi_major, list->abi_minor); !why.empty()) return refuse(why);
  if (std::string why = plugin_list_problem(*list); !why.empty()) return refuse(why);

  std::vector<LoadedPlugin> accepted;
  std::vector<ShadowedPlugin> shadowed;  // kept only once the whole list is accepted
  std::set<std::pair<int32_t, std::string>> listed;
  for (size_t i = 0; i < list->count; ++i) {
    const keel_plugin_info& info = list->plugins[i];
    if (std::string why = plugin_entry_identity_problem(info, i); !why.empty()) return refuse(why);
    const std::string name = info.name;
    if (std::string why = abi_refusal(info.abi_major, info.abi_minor); !why.empty())
      return refuse("plugin '" + name + "': " + why, name);
    if (std::string why = plugin_entry_contents_problem(info); !why.empty())
      return refuse(std::string(kind_name(info.kind)) + " plugin '" + name + "': " + why, name);
    if (!listed.insert({info.kind, name}).second)
      return refuse("it lists " + std::string(kind_name(info.kind)) + " plugin '" + name + "' twice", name);
    if (const LoadedPlugin* earlier = provider_locked(info.kind, name)) {
      // Registered by name (keel_register_plugin_library): the caller meant this one, so say who
      // holds the name rather than load the library without it.
      if (must_succeed)
        return refuse(std::string(kind_name(info.kind)) + " plugin '" + name + "' is already provided by " +
                          (earlier->path.empty() ? std::string("this process") : earlier->path) +
                          ", found earlier in the search order",
                      name);
      shadowed.push_back({info.kind, name, path, earlier->path});
      continue;
    }
    accepted.push_back({info, path});
  }
  for (const auto& shadow : shadowed) {
    log_line(KEEL_LOG_INFO, "loader", shadow_notice(shadow));
    s.shadowed.push_back(shadow);
  }
  for (auto& plugin : accepted) {
    log_line(KEEL_LOG_DEBUG, "loader", std::string("loaded ") + kind_name(plugin.info.kind) + " plugin '" +
                                           plugin.info.name + "' from " + path);
    s.plugins.push_back(plugin);
  }
  s.libraries.push_back(std::move(library));
}

void PluginRegistry::register_library(const std::string& path) {
  std::lock_guard<std::mutex> lock(state().mutex);
  if (!std::filesystem::exists(path)) throw KeelError(KEEL_ERR_MISSING_FILE, "plugin library " + path + " does not exist");
  load_library_locked(path, true);
}

void PluginRegistry::register_in_process(const keel_plugin_info& info, bool replace) {
  std::lock_guard<std::mutex> lock(state().mutex);
  // Discovered first, so a name a library already provides is seen now, not by a later discovery
  // that would quietly drop the library in favour of the in-process plugin.
  discover_locked();
  RegistryState& s = state();
  const std::string name = info.name ? info.name : "";
  auto refuse = [&](const std::string& why) {
    throw KeelError(KEEL_ERR_ABI_MISMATCH, "in-process plugin '" + name + "' was refused: " + why);
  };
  if (std::string why = plugin_entry_identity_problem(info, 0); !why.empty()) refuse(why);
  if (std::string why = abi_refusal(info.abi_major, info.abi_minor); !why.empty()) refuse(why);
  if (std::string why = plugin_entry_contents_problem(info); !why.empty()) refuse(why);
  for (auto& other : s.plugins) {
    if (other.info.kind != info.kind || name != other.info.name) continue;
    if (!replace)
      refuse(std::string("a ") + kind_name(info.kind) + " plugin with this name is already provided by " +
             (other.path.empty() ? std::string("this process") : other.path) + "; replace it explicitly");
    // Trainers made earlier keep the table they were made with; later ones get this one.
    other = {info, ""};
    return;
  }
  s.plugins.push_back({info, ""});
}

size_t PluginRegistry::count() {
  std::lock_guard<std::mutex> lock(state().mutex);
  discover_locked();
  return state().plugins.size();
}

const LoadedPlugin& PluginRegistry::at(size_t index) {
  std::lock_guard<std::mutex> lock(state().mutex);
  discover_locked();
  if (index >= state().plugins.size())
    throw KeelError(KEEL_ERR_INVALID_ARGUMENT, "plugin index " + std::to_string(index) + " is outside [0, " +
                                                   std::to_string(state().plugins.size()) + ")");
  return state().plugins[index];
}

void PluginRegistry::add_search_folders(const std::vector<std::string>& folders) {
  std::lock_guard<std::mutex> lock(state().mutex);
  RegistryState& s = state();
  for (const auto& folder : folders) s.config_folders.push_back(folder);
  if (s.discovered) {  // a late plugin_path: search those folders too, still ahead of none already loaded
    for (const auto& folder : folders) {
      s.searched_folders.push_back(folder);
      for (const auto& file : plugin_files_in(folder)) load_library_locked(file, false);
    }
  }
}

void PluginRegistry::discover_locked() {
  RegistryState& s = state();
  if (s.discovered) return;
  s.discovered = true;
  s.searched_folders = plugin_search_folders(s.config_folders);
  for (const auto& folder : s.searched_folders)
    for (const auto& file : plugin_files_in(folder)) load_library_locked(file, false);
}

const LoadedPlugin& PluginRegistry::find(int32_t kind, const std::string& name) {
  std::lock_guard<std::mutex> lock(state().mutex);
  RegistryState& s = state();
  discover_locked();
  for (const auto& plugin : s.plugins)
    if (plugin.info.kind == kind && name == plugin.info.name) return plugin;

  for (const auto& refusal : s.refused)
    if (refusal.plugin_name == name ||
        std::filesystem::path(refusal.path).filename().string() == "libkeel-" + name + ".so")
      throw KeelError(KEEL_ERR_ABI_MISMATCH, refusal.reason);

  std::vector<std::string> same_kind;
  for (const auto& plugin : s.plugins)
    if (plugin.info.kind == kind) same_kind.push_back(plugin.info.name);
  std::string hint = keel_support::closest_match(name, same_kind);
  std::string available, folders;
  for (const auto& n : same_kind) available += (available.empty() ? "" : ", ") + n;
  for (const auto& f : s.searched_folders) folders += (folders.empty() ? "" : ", ") + f;
  // A refused library may be the one the user meant (a wrong major is refused before its
  // plugin names can be read safely), so every refusal is part of the answer.
  std::string refused;
  for (const auto& refusal : s.refused) refused += "\n  " + refusal.reason;
  throw KeelError(KEEL_ERR_NOT_FOUND,
                  std::string("no ") + kind_name(kind) + " plugin named '" + name + "'" +
                      (hint.empty() ? "" : " (did you mean '" + hint + "'?)") + "; available: " +
                      (available.empty() ? "none" : available) + "; searched: " + folders +
                      " (add folders with plugin_path or KEEL_PLUGIN_PATH)" +
                      (refused.empty() ? "" : "; refused:" + refused));
}

std::vector<LoadedPlugin> PluginRegistry::list() {
  std::lock_guard<std::mutex> lock(state().mutex);
  discover_locked();
  return {state().plugins.begin(), state().plugins.end()};
}

std::vector<RefusedLibrary> PluginRegistry::refusals() {
  std::lock_guard<std::mutex> lock(state().mutex);
  discover_locked();
  return state().refused;
}

std::vector<ShadowedPlugin> PluginRegistry::shadowed() {
  std::lock_guard<std::mutex> lock(state().mutex);
  discover_locked();
  return state().shadowed;
}

std::string shadow_notice(const ShadowedPlugin& shadow) {
  return std::string(kind_name(shadow.kind)) + " plugin '" + shadow.name + "' of " + shadow.path +
         " is shadowed by the one in " + (shadow.by.empty() ? std::string("this process") : shadow.by) +
         " (earlier in the search order); that library's other plugins are loaded";
}

std::vector<std::string> PluginRegistry::search_folders() {
  std::lock_guard<std::mutex> lock(state().mutex);
  discover_locked();
  return state().searched_folders;
}

}  // namespace keel
