// The calling thread's last error, read through the host table (a comm call failing on the
// ddp communication thread leaves its message there; see thread_error.hpp).
#include "thread_error.hpp"

#include <keel/plugin.h>

namespace keel_ddp {

std::string this_thread_last_error(const keel_host* host) {
  const char* message = KEEL_HAS_SLOT(host, last_error) ? host->last_error() : nullptr;
  return message ? message : "";
}

}  // namespace keel_ddp
