// keel.Error and its subclasses: every failure of a Keel call becomes one of them, chosen by the
// keel_status code (abi/keel/types.h) and, where the status alone is too coarse, by what the
// message names. Each also derives from the builtin a Python user would catch for that kind of
// failure (a bad config is a ValueError, a missing plugin a LookupError, a missing file a
// FileNotFoundError), so `except ValueError` and `except keel.Error` both work. Messages name
// the Python methods, not the C functions of abi/keel/embed.h behind them.
#include <sys/stat.h>

#include <regex>

#include "keel_python.hpp"

namespace keel_python {

namespace {

// Created once at import and kept for the process, like every exception type of an extension.
struct ErrorTypes {
  PyObject* error = nullptr;            // keel.Error(RuntimeError)
  PyObject* config = nullptr;           // keel.ConfigError(Error, ValueError)
  PyObject* invalid_argument = nullptr; // keel.InvalidArgument(Error, ValueError)
  PyObject* not_found = nullptr;        // keel.NotFoundError(Error, LookupError)
  PyObject* plugin_not_found = nullptr; // keel.PluginNotFound(NotFoundError)
  PyObject* io = nullptr;               // keel.IOFailure(Error, OSError)
  PyObject* missing_file = nullptr;     // keel.MissingFile(IOFailure, FileNotFoundError): a path that is not there
  PyObject* unsupported = nullptr;      // keel.Unsupported(Error, NotImplementedError)
  PyObject* out_of_memory = nullptr;    // keel.OutOfMemory(Error, MemoryError)
  PyObject* non_finite = nullptr;       // keel.NonFinite(Error, FloatingPointError)
};
ErrorTypes types;

PyObject* new_type(py::module_& module, const char* name, const char* doc, std::initializer_list<PyObject*> bases) {
  py::tuple base_tuple(bases.size());
  size_t i = 0;
  for (PyObject* base : bases) base_tuple[i++] = py::reinterpret_borrow<py::object>(base);
  const std::string qualified = std::string("keel.") + name;
  PyObject* type = PyErr_NewExceptionWithDoc(qualified.c_str(), doc, base_tuple.ptr(), nullptr);
  if (!type) throw py::error_already_set();
  module.add_object(name, py::reinterpret_borrow<py::object>(type));
  return type;
}

// "keel_trainer_read_param" -> "Trainer.read_param": the C function behind each Python method.
std::string python_names(const std::string& message) {
  static const std::regex c_function(R"(\bkeel_trainer_(\w+))");
  return std::regex_replace(message, c_function, "Trainer.$1");
}

// The config path a ConfigError names: the first dotted path that starts at a top-level section
// ("model.n_layr", "optimizer.betas[1]"), else a section named alone before a colon ("data:").
// A plugin's messages start with its kind and name ("model gpt: model.n_layr: ..."), which the
// first form skips.
py::object config_path(const std::string& message) {
  static const std::string sections = "(?:model|optimizer|lr_schedule|parallel|backend|data|train|offload|comm|"
                                      "tokenizer|plugin_path)";
  static const std::regex dotted("(?:^|[\\s'\"(])(" + sections + "(?:\\.[A-Za-z_]\\w*|\\[\\d+\\])+)");
  static const std::regex alone("(?:^|[\\s'\"(])(" + sections + "):");
  std::smatch match;
  if (std::regex_search(message, match, dotted) || std::regex_search(message, match, alone))
    return py::str(match[1].str());
  return py::none();
}

// The key a "did you mean" names.
py::object suggestion(const std::string& message) {
  static const std::regex did_you_mean(R"(did you mean \\?"([^"\\]+)\\?")");
  std::smatch match;
  if (std::regex_search(message, match, did_you_mean)) return py::str(match[1].str());
  return py::none();
}

// Whether the message starts with a filesystem path ("/x/y: ...", "runs/a.json: ...") that does
// not exist: what the core says about a file or folder it was pointed at and could not find.
bool names_a_missing_path(const std::string& message) {
  const size_t colon = message.find(": ");
  if (colon == std::string::npos || colon == 0) return false;
  const std::string path = message.substr(0, colon);
  if (path.find('/') == std::string::npos && path.find('.') == std::string::npos) return false;
  struct stat info;
  return ::stat(path.c_str(), &info) != 0;
}

PyObject* type_for(keel_status status, const std::string& message) {
  if ((status == KEEL_ERR_NOT_FOUND || status == KEEL_ERR_IO) && names_a_missing_path(message))
    return types.missing_file;
  switch (status) {
    case KEEL_ERR_INVALID_CONFIG: return types.config;
    case KEEL_ERR_INVALID_ARGUMENT: return types.invalid_argument;
    case KEEL_ERR_NOT_FOUND: {
      static const std::regex plugin(R"(\bno \w+ plugin named\b)");
      return std::regex_search(message, plugin) ? types.plugin_not_found : types.not_found;
    }
    case KEEL_ERR_IO: {
      static const std::regex missing(R"(cannot open|[Nn]o such file|does not exist|not a regular file)");
      return std::regex_search(message, missing) ? types.missing_file : types.io;
    }
    case KEEL_ERR_UNIMPLEMENTED: return types.unsupported;
    case KEEL_ERR_OUT_OF_MEMORY: return types.out_of_memory;
    case KEEL_ERR_NONFINITE: return types.non_finite;
    default: return types.error;
  }
}

void raise_keel_error(keel_status status, const std::string& raw_message) {
  const std::string message = python_names(raw_message);
  PyObject* type = type_for(status, raw_message);
  // OSError's constructor reads (errno, strerror) from two arguments; one keeps it a message.
  py::object error = py::reinterpret_borrow<py::object>(type)(message);
  error.attr("status") = static_cast<int>(status);
  if (type == types.config) {
    error.attr("path") = config_path(raw_message);
    error.attr("suggestion") = suggestion(raw_message);
  }
  PyErr_SetObject(type, error.ptr());
}

}  // namespace

void bind_errors(py::module_& module) {
  types.error = new_type(module, "Error",
                         "A Keel call failed. str(error) is the core's message (it names the JSON path of a bad\n"
                         "config key, the plugin, the file); `status` is the keel_status code (keel.Status).",
                         {PyExc_RuntimeError});
  types.config = new_type(module, "ConfigError",
                          "A config value is wrong. `path` is the JSON path it names (\"model.n_layr\"), or None;\n"
                          "`suggestion` the key a \"did you mean\" proposes, or None.",
                          {types.error, PyExc_ValueError});
  types.invalid_argument =
      new_type(module, "InvalidArgument", "A method was given a value it cannot take (a negative count, a bad shape).",
               {types.error, PyExc_ValueError});
  types.not_found = new_type(module, "NotFoundError", "A parameter, tensor or other named thing does not exist.",
                             {types.error, PyExc_LookupError});
  types.plugin_not_found =
      new_type(module, "PluginNotFound", "No plugin of that kind and name was found (keel.plugins() lists them).",
               {types.not_found});
  types.io = new_type(module, "IOFailure", "Reading or writing a file, shard or checkpoint failed.",
                      {types.error, PyExc_OSError});
  types.missing_file =
      new_type(module, "MissingFile", "A file or folder Keel was pointed at does not exist or cannot be opened.",
               {types.io, PyExc_FileNotFoundError});
  types.unsupported = new_type(module, "Unsupported", "This build, plugin or layout does not support what was asked.",
                               {types.error, PyExc_NotImplementedError});
  types.out_of_memory =
      new_type(module, "OutOfMemory", "An allocation failed.", {types.error, PyExc_MemoryError});
  types.non_finite = new_type(module, "NonFinite", "A NaN or infinity where a finite value was required.",
                              {types.error, PyExc_FloatingPointError});
  py::register_exception_translator([](std::exception_ptr raised) {
    try {
      if (raised) std::rethrow_exception(raised);
    } catch (const KeelError& e) {
      raise_keel_error(e.status, e.what());
    }
  });
}

}  // namespace keel_python
