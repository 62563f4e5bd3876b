// How the nvme engine's messages say why a system call failed: the C library's words and the
// number ("No space left on device (errno 28)"), one spelling for every file of the engine.
#pragma once

#include <cstring>
#include <string>

namespace keel_offload {

inline std::string errno_text(int error) {
  return std::string(std::strerror(error)) + " (errno " + std::to_string(error) + ")";
}

}  // namespace keel_offload
