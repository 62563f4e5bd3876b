// A host table for testing a plugin without the core: set_error keeps the message per thread
// (as the core's does, so a test sees what reached the calling thread and nothing a worker set
// elsewhere), last_error returns it, and log lines are dropped.
#pragma once

#include <keel/host.h>
#include <keel/version.h>

#include <string>

namespace keel_support::testing {

// The calling thread's last message from set_error; a test may clear it before a call.
inline std::string& last_message() {
  thread_local std::string message;
  return message;
}

inline keel_host recording_host() {
  keel_host host{};
  host.struct_size = sizeof(host);
  host.abi_major = KEEL_ABI_VERSION_MAJOR;
  host.abi_minor = KEEL_ABI_VERSION_MINOR;
  host.set_error = [](keel_status code, const char* message) -> keel_status {
    last_message() = message ? message : "";
    return code;
  };
  host.log = [](int32_t, const char*, const char*) {};
  host.last_error = [] { return last_message().c_str(); };
  return host;
}

}  // namespace keel_support::testing
