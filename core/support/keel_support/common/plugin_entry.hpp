// What a plugin library's entry symbol returns, filled once: each plugin's info and the list,
// both stamped with the ABI version of the headers the library is compiled against (which is
// what the loader compares with its own). A library then writes
//
//   const keel_plugin_info kInfos[] = {keel_support::plugin_info(KEEL_KIND_OPTIMIZER, "adamw", "0.1.0", &kApi,
//                                                                "AdamW ...")};
//   const keel_plugin_list kList = keel_support::plugin_list(kInfos);
//   extern "C" KEEL_EXPORT const keel_plugin_list* keel_plugin_entry(void) { return &kList; }
#pragma once

#include <keel/plugin.h>
#include <keel/version.h>

#include <cstddef>
#include <cstdint>

namespace keel_support {

// `api` is the kind's table; `name` is the config's "plugin" value; all must outlive the library.
constexpr keel_plugin_info plugin_info(int32_t kind, const char* name, const char* version, const void* api,
                                       const char* description) {
  return keel_plugin_info{sizeof(keel_plugin_info), kind, name, version, KEEL_ABI_VERSION_MAJOR,
                          KEEL_ABI_VERSION_MINOR, api, description};
}

template <size_t N>
constexpr keel_plugin_list plugin_list(const keel_plugin_info (&plugins)[N]) {
  return keel_plugin_list{sizeof(keel_plugin_list), KEEL_ABI_VERSION_MAJOR, KEEL_ABI_VERSION_MINOR, N, plugins};
}

}  // namespace keel_support
