// What the extension's files share: the error path (a failed embedding-API call becomes the
// Python exception a Python plugin raised during it, or else keel.Error carrying
// keel_last_error()), and the one function each file exports to module.cpp to add its part of
// the `keel._keel` module.
#pragma once

#include <keel/embed.h>
#include <pybind11/pybind11.h>

#include <stdexcept>
#include <string>
#include <utility>

namespace keel_python {
namespace py = pybind11;

// Thrown by the extension's C++ code; translated into keel.Error with `.status` set.
struct KeelError : std::runtime_error {
  KeelError(keel_status status, const std::string& message) : std::runtime_error(message), status(status) {}
  keel_status status;
};

// The exception a Python plugin (data source, optimizer) raised during the current Keel call on
// this thread, kept by call_python (python_callback.hpp) until the call returns: the core calls
// plugins on the thread that called it. A raw reference, touched only with the GIL held, so no
// destructor runs at thread exit without it.
inline thread_local PyObject* pending_python_error = nullptr;

inline void keep_python_error(py::object exception) {
  Py_XDECREF(pending_python_error);
  pending_python_error = exception.release().ptr();
}

inline py::object take_python_error() {
  return py::reinterpret_steal<py::object>(std::exchange(pending_python_error, nullptr));
}

// Turns a failed call's status into an exception: the Python exception a Python plugin raised
// during the call, its type and traceback intact (the core's message added as a note), or
// KeelError with the calling thread's message. Call it on the thread that made the call (the
// message is thread-local), with the GIL held.
inline void check(keel_status status) {
  py::object python_error = take_python_error();
  if (status == KEEL_OK) return;
  std::string message = keel_last_error();
  if (message.empty()) message = "Keel call failed with status " + std::to_string(status);
  if (python_error) {
    if (py::hasattr(python_error, "add_note")) python_error.attr("add_note")("keel: " + message);
    PyErr_SetObject(reinterpret_cast<PyObject*>(Py_TYPE(python_error.ptr())), python_error.ptr());
    throw py::error_already_set();
  }
  throw KeelError(status, message);
}

void bind_errors(py::module_& module);
void bind_tensor(py::module_& module);
void bind_trainer(py::module_& module);
void bind_plugin_list(py::module_& module);
void bind_data_sources(py::module_& module);
void bind_optimizers(py::module_& module);
void bind_tokenizer(py::module_& module);

}  // namespace keel_python
