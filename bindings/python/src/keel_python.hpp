// What the extension's files share: the keel.Error path (a failed embedding-API call becomes a
// Python exception carrying keel_last_error()), and the one function each file exports to
// module.cpp to add its part of the `keel._keel` module.
#pragma once

#include <keel/embed.h>
#include <pybind11/pybind11.h>

#include <stdexcept>
#include <string>

namespace keel_python {
namespace py = pybind11;

// Thrown by the extension's C++ code; translated into keel.Error with `.status` set.
struct KeelError : std::runtime_error {
  KeelError(keel_status status, const std::string& message) : std::runtime_error(message), status(status) {}
  keel_status status;
};

// Turns a failed call's status into KeelError with the calling thread's message. Call it on
// the thread that made the call (the message is thread-local), GIL held or not.
inline void check(keel_status status) {
  if (status != KEEL_OK) {
    std::string message = keel_last_error();
    if (message.empty()) message = "Keel call failed with status " + std::to_string(status);
    throw KeelError(status, message);
  }
}

void bind_errors(py::module_& module);
void bind_tensor(py::module_& module);
void bind_trainer(py::module_& module);
void bind_plugin_list(py::module_& module);
void bind_data_sources(py::module_& module);
void bind_optimizers(py::module_& module);

}  // namespace keel_python
