// The core's error path: a KeelError carries a status code and a message a user can act on;
// at the ABI edge it becomes the thread's last error (keel_last_error).
#pragma once

#include <keel/types.h>

#include <stdexcept>
#include <string>

namespace keel {

struct KeelError : std::runtime_error {
  KeelError(keel_status code, const std::string& message) : std::runtime_error(message), code(code) {}
  keel_status code;
};

// Stores the calling thread's last error message.
void set_last_error(const std::string& message);
const char* last_error();

// Turns a failed plugin call into a KeelError whose message is the plugin's, prefixed by what
// the core was doing ("model gpt forward").
void check_plugin(keel_status status, const std::string& doing);

}  // namespace keel
