// The cpu backend plugin's table for unit tests of keel_support pieces that run on a real backend:
// opened once from KEEL_CPU_PLUGIN_PATH (the build's libkeel-cpu.so) and never closed, so the
// table stays valid for the process. NULL when the library or its "cpu" entry is missing.
#pragma once

#include <dlfcn.h>
#include <keel/backend.h>
#include <keel/plugin.h>

#include <string>

namespace keel_test {

inline const keel_backend_api* cpu_backend_api() {
  static const keel_backend_api* api = []() -> const keel_backend_api* {
    void* library = dlopen(KEEL_CPU_PLUGIN_PATH, RTLD_NOW | RTLD_LOCAL);
    if (!library) return nullptr;
    auto entry = reinterpret_cast<keel_plugin_entry_fn>(dlsym(library, KEEL_PLUGIN_ENTRY_SYMBOL));
    const keel_plugin_list* list = entry ? entry() : nullptr;
    for (size_t i = 0; list && i < list->count; ++i)
      if (list->plugins[i].kind == KEEL_KIND_BACKEND && std::string(list->plugins[i].name) == "cpu")
        return static_cast<const keel_backend_api*>(list->plugins[i].api);
    return nullptr;
  }();
  return api;
}

}  // namespace keel_test
