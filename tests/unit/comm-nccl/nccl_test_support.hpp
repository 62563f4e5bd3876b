// What the nccl plugin's tests share: a minimal host table, loading the plugin with dlopen as
// the core does, CHECK macros that name the mismatch and exit 1, and a fake backend table whose
// device and queue the test chooses (the nccl comm reads nothing else of its backend).
// Plain programs rather than gtest: the device bundle (scripts/device-check.sh) runs them alone.
#pragma once

#include <dlfcn.h>
#include <keel/comm.h>
#include <keel/plugin.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

namespace nccl_test {

inline std::string g_last_error;

inline keel_status record_error(keel_status code, const char* message) {
  g_last_error = message ? message : "";
  return code;
}

inline void print_log(int32_t level, const char* source, const char* message) {
  std::fprintf(stderr, "[log %d] %s: %s\n", level, source, message);
}

inline const char* last_error() { return g_last_error.c_str(); }

inline const keel_host kHost = {sizeof(keel_host), KEEL_ABI_VERSION_MAJOR, KEEL_ABI_VERSION_MINOR,
                                record_error,      print_log,              /*init_param*/ nullptr,
                                last_error,        /*init_piece*/ nullptr};

[[noreturn]] inline void fail(const char* file, int line, const std::string& what) {
  std::fprintf(stderr, "FAILED at %s:%d: %s\n", file, line, what.c_str());
  std::exit(1);
}

#define CHECK(cond) \
  do { if (!(cond)) ::nccl_test::fail(__FILE__, __LINE__, "CHECK(" #cond ")"); } while (0)
#define CHECK_OK(call)                                                                                   \
  do {                                                                                                   \
    keel_status status_ = (call);                                                                        \
    if (status_ != KEEL_OK)                                                                              \
      ::nccl_test::fail(__FILE__, __LINE__,                                                              \
                        std::string(#call) + " returned " + std::to_string(status_) + ": " + ::nccl_test::g_last_error); \
  } while (0)
// The call fails with `expected` and a message containing `needle`.
#define CHECK_REFUSED(call, expected, needle)                                                           \
  do {                                                                                                  \
    ::nccl_test::g_last_error.clear();                                                                  \
    keel_status status_ = (call);                                                                       \
    if (status_ != (expected) || ::nccl_test::g_last_error.find(needle) == std::string::npos)           \
      ::nccl_test::fail(__FILE__, __LINE__, std::string(#call) + " returned " + std::to_string(status_) + \
                                                " with \"" + ::nccl_test::g_last_error + "\", expected " #expected \
                                                " with \"" + (needle) + "\"");                          \
  } while (0)

// The comm table of the library at `path`, checked as the core's loader checks it: one comm
// plugin named nccl, at this ABI (its comm table is 0.8's), a table long enough for 0.8's slots and
// every slot filled.
inline const keel_comm_api* load_nccl_plugin(const char* path) {
  void* library = dlopen(path, RTLD_NOW | RTLD_LOCAL);
  if (!library) fail(__FILE__, __LINE__, std::string("dlopen: ") + dlerror());
  auto entry = reinterpret_cast<keel_plugin_entry_fn>(dlsym(library, KEEL_PLUGIN_ENTRY_SYMBOL));
  if (!entry) fail(__FILE__, __LINE__, std::string("no ") + KEEL_PLUGIN_ENTRY_SYMBOL + " in " + path);
  const keel_plugin_list* list = entry();
  CHECK(list && list->abi_major == KEEL_ABI_VERSION_MAJOR && list->abi_minor == KEEL_ABI_VERSION_MINOR);
  CHECK(list->count == 1);
  const keel_plugin_info& info = list->plugins[0];
  CHECK(info.kind == KEEL_KIND_COMM && std::strcmp(info.name, "nccl") == 0);
  CHECK(info.abi_major == KEEL_ABI_VERSION_MAJOR && info.abi_minor == KEEL_ABI_VERSION_MINOR);
  CHECK(std::strstr(info.description, "verified on one NVIDIA H200") != nullptr);
  auto api = static_cast<const keel_comm_api*>(info.api);
  CHECK(api->struct_size == sizeof(keel_comm_api));
  CHECK(KEEL_HAS_SLOT(api, create_world_on) && KEEL_HAS_SLOT(api, reaches));
  const void* const* slots = reinterpret_cast<const void* const*>(reinterpret_cast<const char*>(api) + sizeof(size_t));
  for (size_t i = 0; i < (sizeof(keel_comm_api) - sizeof(size_t)) / sizeof(void*); ++i) CHECK(slots[i] != nullptr);
  return api;
}

// A backend that is only a device and a queue: what a device communicator takes from it.
struct FakeBackend {
  keel_device device;
  void* queue;
};

inline keel_status fake_device(void* backend, keel_device* out) {
  *out = static_cast<FakeBackend*>(backend)->device;
  return KEEL_OK;
}

inline keel_status fake_queue(void* backend, void** out) {
  *out = static_cast<FakeBackend*>(backend)->queue;
  return KEEL_OK;
}

inline keel_backend_api fake_backend_api() {
  keel_backend_api api{};
  api.struct_size = sizeof api;
  api.device = fake_device;
  api.queue = fake_queue;
  return api;
}

inline keel_dtype fp32() { return keel_dtype{KEEL_DTYPE_FLOAT, 32, 1}; }
inline keel_dtype fp64() { return keel_dtype{KEEL_DTYPE_FLOAT, 64, 1}; }
inline keel_dtype int32() { return keel_dtype{KEEL_DTYPE_INT, 32, 1}; }
inline keel_dtype int64() { return keel_dtype{KEEL_DTYPE_INT, 64, 1}; }
inline keel_dtype bf16() { return keel_dtype{KEEL_DTYPE_BFLOAT, 16, 1}; }

}  // namespace nccl_test
