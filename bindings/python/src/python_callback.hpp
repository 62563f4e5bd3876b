// How the core calls into Python through a plugin slot: take the GIL (the caller released it
// around the long call that led here), run the Python code, and turn any exception into a
// keel_status plus a message on the host. The Python exception itself is kept (keep_python_error)
// and re-raised, traceback and all, when the embedding-API call returns to Python (check() in
// keel_python.hpp). Nothing is thrown across the ABI.
#pragma once

#include <keel/host.h>
#include <pybind11/pybind11.h>

#include <new>
#include <string>

#include "keel_python.hpp"

namespace keel_python {

// "ValueError: bad batch" from the exception being handled.
inline std::string describe_python_error(const py::error_already_set& error) {
  std::string type = py::str(error.type().attr("__name__"));
  std::string text = py::str(error.value());
  return text.empty() ? type : type + ": " + text;
}

inline keel_status report(const keel_host* host, keel_status code, const std::string& message) {
  return host ? host->set_error(code, message.c_str()) : code;
}

// `source` names the plugin ("data source tiny_corpus"); `python_error_code` is the status a
// Python exception maps to (KEEL_ERR_INVALID_CONFIG while creating, KEEL_ERR_IO for data, ...).
template <typename Body>
keel_status call_python(const keel_host* host, const std::string& source, keel_status python_error_code,
                        Body&& body) noexcept {
  if (!Py_IsInitialized()) return report(host, KEEL_ERR_INTERNAL, source + ": the Python interpreter has exited");
  py::gil_scoped_acquire gil;
  try {
    body();
    return KEEL_OK;
  } catch (py::error_already_set& e) {
    const std::string message = source + ": " + describe_python_error(e);
    py::object exception = e.value();
    if (!e.trace().is_none()) PyException_SetTraceback(exception.ptr(), e.trace().ptr());
    keep_python_error(std::move(exception));
    // A KeyboardInterrupt stops the run like any failure, and is re-raised as itself.
    return report(host, python_error_code, message);
  } catch (const KeelError& e) {
    return report(host, e.status, source + ": " + e.what());
  } catch (const std::bad_alloc&) {
    return report(host, KEEL_ERR_OUT_OF_MEMORY, source + ": out of memory");
  } catch (const std::exception& e) {
    return report(host, KEEL_ERR_INTERNAL, source + ": " + e.what());
  }
}

// The plugin's config section as a new dict (the core hands it over as JSON text).
inline py::dict config_dict(const char* config_json) {
  return py::module_::import("json").attr("loads")(config_json ? config_json : "{}");
}

}  // namespace keel_python
