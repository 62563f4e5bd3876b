// What both mpi test programs share: a minimal host table, loading the mpi plugin with dlopen
// as the core does, and CHECK macros that name the rank and the mismatch, then exit non-zero
// (mpirun then ends the other ranks). Plain C++: gtest's output interleaves badly across ranks.
#pragma once

#include <dlfcn.h>
#include <keel/comm.h>
#include <keel/plugin.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

namespace comm_test {

inline thread_local std::string g_last_error;
inline int g_rank = -1, g_size = -1;  // set once the world exists, for failure messages

inline keel_status record_error(keel_status code, const char* message) {
  g_last_error = message ? message : "";
  return code;
}

inline void print_log(int32_t level, const char* source, const char* message) {
  std::fprintf(stderr, "[log %d] %s: %s\n", level, source, message);
}

inline const keel_host kHost = {sizeof(keel_host), KEEL_ABI_VERSION_MAJOR, KEEL_ABI_VERSION_MINOR,
                                record_error,      print_log,              nullptr};

[[noreturn]] inline void fail(const char* file, int line, const std::string& what) {
  std::fprintf(stderr, "FAILED rank %d of %d at %s:%d: %s\n", g_rank, g_size, file, line, what.c_str());
  std::fflush(stderr);
  std::exit(1);
}

#define CHECK(cond) \
  do { if (!(cond)) ::comm_test::fail(__FILE__, __LINE__, "CHECK(" #cond ")"); } while (0)
#define CHECK_OK(call)                                                                                  \
  do {                                                                                                  \
    keel_status status_ = (call);                                                                       \
    if (status_ != KEEL_OK)                                                                             \
      ::comm_test::fail(__FILE__, __LINE__,                                                             \
                        std::string(#call) + " returned " + std::to_string(status_) + ": " + ::comm_test::g_last_error); \
  } while (0)
#define CHECK_STATUS(call, expected)                                                                        \
  do {                                                                                                      \
    keel_status status_ = (call);                                                                           \
    if (status_ != (expected))                                                                              \
      ::comm_test::fail(__FILE__, __LINE__, std::string(#call) + " returned " + std::to_string(status_) + \
                                                ", expected " #expected " (message: " + ::comm_test::g_last_error + ")"); \
  } while (0)

// The comm table of the plugin at `path` (libkeel-mpi.so), checked like the core's loader does.
inline const keel_comm_api* load_comm_plugin(const char* path) {
  void* library = dlopen(path, RTLD_NOW | RTLD_LOCAL);
  if (!library) fail(__FILE__, __LINE__, std::string("dlopen: ") + dlerror());
  auto entry = reinterpret_cast<keel_plugin_entry_fn>(dlsym(library, KEEL_PLUGIN_ENTRY_SYMBOL));
  if (!entry) fail(__FILE__, __LINE__, std::string("no ") + KEEL_PLUGIN_ENTRY_SYMBOL + " in " + path);
  const keel_plugin_list* list = entry();
  CHECK(list && list->abi_major == KEEL_ABI_VERSION_MAJOR && list->abi_minor == KEEL_ABI_VERSION_MINOR);
  CHECK(list->count == 1);
  const keel_plugin_info& info = list->plugins[0];
  CHECK(info.kind == KEEL_KIND_COMM && std::strcmp(info.name, "mpi") == 0 && std::strcmp(info.version, "0.1.0") == 0);
  auto api = static_cast<const keel_comm_api*>(info.api);
  CHECK(api->struct_size == sizeof(keel_comm_api));
  // Every slot is filled.
  const void* const* slots = reinterpret_cast<const void* const*>(reinterpret_cast<const char*>(api) + sizeof(size_t));
  for (size_t i = 0; i < (sizeof(keel_comm_api) - sizeof(size_t)) / sizeof(void*); ++i) CHECK(slots[i] != nullptr);
  return api;
}

inline keel_dtype fp32() { return keel_dtype{KEEL_DTYPE_FLOAT, 32, 1}; }
inline keel_dtype fp64() { return keel_dtype{KEEL_DTYPE_FLOAT, 64, 1}; }
inline keel_dtype int32() { return keel_dtype{KEEL_DTYPE_INT, 32, 1}; }
inline keel_dtype bf16() { return keel_dtype{KEEL_DTYPE_BFLOAT, 16, 1}; }

}  // namespace comm_test
