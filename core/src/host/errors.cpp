// Thread-local last error, shared by the host table (plugins) and the embedding API.
#include "host/errors.h"

namespace keel {
namespace {
thread_local std::string thread_last_error;
}

void set_last_error(const std::string& message) { thread_last_error = message; }
const char* last_error() { return thread_last_error.c_str(); }

void check_plugin(keel_status status, const std::string& doing) {
  if (status == KEEL_OK) return;
  std::string detail = thread_last_error.empty() ? "no message was given (status " + std::to_string(status) + ")"
                                                 : thread_last_error;
  throw KeelError(status, doing + " failed: " + detail);
}

}  // namespace keel
