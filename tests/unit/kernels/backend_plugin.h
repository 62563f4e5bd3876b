// The `cpu` backend as the core sees it, for the plugin tests: libkeel-cpu.so loaded with dlopen,
// a host that records the last error and the log, and a backend made from a config section.
#pragma once

#include <dlfcn.h>
#include <gtest/gtest.h>
#include <keel/backend.h>
#include <keel/plugin.h>

#include <string>
#include <vector>

namespace keel_test {

inline std::string g_last_error;
inline std::vector<std::string> g_log;
inline keel_status set_error(keel_status code, const char* message) {
  g_last_error = message;
  return code;
}
inline void log_line(int32_t, const char* source, const char* message) {
  g_log.push_back(std::string(source) + ": " + message);
}
inline const keel_host kHost = {sizeof(keel_host), KEEL_ABI_VERSION_MAJOR, KEEL_ABI_VERSION_MINOR, set_error, log_line,
                                nullptr};

// The one plugin a library at `path` lists, or NULL with a test failure saying why.
inline const keel_plugin_info* load_plugin(const char* path) {
  void* library = dlopen(path, RTLD_NOW | RTLD_LOCAL);  // kept open: the process ends first
  if (!library) {
    ADD_FAILURE() << "dlopen " << path << ": " << dlerror();
    return nullptr;
  }
  auto entry = reinterpret_cast<keel_plugin_entry_fn>(dlsym(library, KEEL_PLUGIN_ENTRY_SYMBOL));
  if (!entry) {
    ADD_FAILURE() << "no " << KEEL_PLUGIN_ENTRY_SYMBOL << " in " << path;
    return nullptr;
  }
  const keel_plugin_list* list = entry();
  if (!list || list->count != 1) {
    ADD_FAILURE() << "expected one plugin in " << path;
    return nullptr;
  }
  return &list->plugins[0];
}

inline const keel_plugin_info* load_entry() {
  static const keel_plugin_info* info = load_plugin(KEEL_CPU_PLUGIN_PATH);
  return info;
}

inline const keel_backend_api* api() {
  const keel_plugin_info* info = load_entry();
  return info ? static_cast<const keel_backend_api*>(info->api) : nullptr;
}

// A backend made from `config`, destroyed at scope exit.
struct Backend {
  explicit Backend(const char* config) {
    keel_backend_create_args args{sizeof(args), config, "backend"};
    status = api()->create(&kHost, &args, &handle);
  }
  ~Backend() {
    if (handle) api()->destroy(handle);
  }
  Backend(const Backend&) = delete;
  Backend& operator=(const Backend&) = delete;
  keel_status status;
  void* handle = nullptr;
};

}  // namespace keel_test
