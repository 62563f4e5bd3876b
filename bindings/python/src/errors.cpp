// keel.Error: the one exception type of the binding, a RuntimeError whose message is the
// core's keel_last_error() text and whose `status` is the keel_status code (abi/keel/types.h).
#include "keel_python.hpp"

namespace keel_python {

namespace {
// Created once at import and kept for the process, like every exception type of an extension.
PyObject* error_type = nullptr;
}  // namespace

void bind_errors(py::module_& module) {
  error_type = PyErr_NewExceptionWithDoc(
      "keel.Error",
      "A Keel call failed. str(error) is the core's message (it names the JSON path of a bad\n"
      "config key, the plugin, the file); `status` is the keel_status code.",
      PyExc_RuntimeError, nullptr);
  if (!error_type) throw py::error_already_set();
  module.add_object("Error", py::reinterpret_borrow<py::object>(error_type));
  py::register_exception_translator([](std::exception_ptr raised) {
    try {
      if (raised) std::rethrow_exception(raised);
    } catch (const KeelError& e) {
      py::object error = py::reinterpret_borrow<py::object>(error_type)(e.what());
      error.attr("status") = e.status;
      PyErr_SetObject(error_type, error.ptr());
    }
  });
}

}  // namespace keel_python
