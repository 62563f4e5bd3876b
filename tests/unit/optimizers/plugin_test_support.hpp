// What a plugin unit test needs to stand in for the core: dlopen a built plugin library and
// find one plugin in its entry, and a host table that records the last error message.
// Shared by tests/unit/optimizers and tests/unit/strategy.
#pragma once

#include <dlfcn.h>
#include <keel/host.h>
#include <keel/plugin.h>

#include <cstring>
#include <stdexcept>
#include <string>

namespace keel_test {

// The library stays loaded for the object's life; tables and infos it returned die with it.
class LoadedPlugin {
 public:
  LoadedPlugin(const char* library_path, int32_t kind, const char* name) {
    handle_ = dlopen(library_path, RTLD_NOW | RTLD_LOCAL);
    if (!handle_) throw std::runtime_error(std::string("dlopen failed: ") + dlerror());
    auto entry = reinterpret_cast<keel_plugin_entry_fn>(dlsym(handle_, KEEL_PLUGIN_ENTRY_SYMBOL));
    if (!entry) throw std::runtime_error(std::string(library_path) + " exports no " + KEEL_PLUGIN_ENTRY_SYMBOL);
    list_ = entry();
    for (size_t i = 0; list_ && i < list_->count; ++i)
      if (list_->plugins[i].kind == kind && std::strcmp(list_->plugins[i].name, name) == 0) info_ = &list_->plugins[i];
    if (!info_) throw std::runtime_error(std::string(library_path) + " holds no plugin named " + name);
  }
  LoadedPlugin(const LoadedPlugin&) = delete;
  LoadedPlugin& operator=(const LoadedPlugin&) = delete;
  ~LoadedPlugin() { dlclose(handle_); }

  const keel_plugin_list& list() const { return *list_; }
  const keel_plugin_info& info() const { return *info_; }
  template <typename Api>
  const Api& api() const { return *static_cast<const Api*>(info_->api); }

 private:
  void* handle_ = nullptr;
  const keel_plugin_list* list_ = nullptr;
  const keel_plugin_info* info_ = nullptr;
};

// The message of the last set_error on any thread (tests call plugins from one thread).
inline std::string& last_error() {
  static std::string message;
  return message;
}

inline keel_status record_error(keel_status code, const char* message) {
  last_error() = message ? message : "";
  return code;
}

inline void discard_log(int32_t, const char*, const char*) {}

inline keel_host make_test_host(decltype(keel_host::init_param) init_param = nullptr) {
  return keel_host{sizeof(keel_host), KEEL_ABI_VERSION_MAJOR, KEEL_ABI_VERSION_MINOR, record_error, discard_log,
                   init_param};
}

}  // namespace keel_test
