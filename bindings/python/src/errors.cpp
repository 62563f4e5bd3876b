// keel.Error and its subclasses: every failure of a Keel call becomes one of them, chosen by the
// keel_status code (abi/keel/types.h) and, where the status alone is too coarse, by what the
// message names. Each also derives from the builtin a Python user would catch for that kind of
// failure (a bad config is a ValueError, a missing plugin a LookupError, a missing file a
// FileNotFoundError), so `except ValueError` and `except keel.Error` both work. Messages name
// the Python methods, not the C functions of abi/keel/embed.h behind them.
#include <sys/stat.h>

#include <cerrno>
#include <map>
#include <regex>
#include <string>
#include <vector>

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

// "keel_trainer_read_param" -> "Trainer.read_param": the C function behind each Python method,
// where the message names one (at its start, or after a space: never inside a path). C functions
// that no method stands for become "Trainer".
std::string python_names(const std::string& message) {
  static const std::regex c_function(R"((^|\s)keel_trainer_(\w+)\b(?!/))");
  static const std::map<std::string, std::string> methods = {
      {"step", "step"}, {"step_on", "step"}, {"train", "train"}, {"evaluate", "evaluate"}, {"save", "save"},
      {"load", "load"}, {"read_param", "read_param"}, {"gather_param", "read_param(name, gather=True)"},
      {"write_param", "write_param"}, {"read_grad", "grad"}, {"logits", "logits"}, {"generate", "generate"},
      {"generate_top", "generate"}, {"param_tensor", "tensor"}, {"last_metrics", "last_metrics"},
      {"forward_backward", "forward_backward"}, {"optimizer_step", "optimizer_step"}, {"export_hf", "export_hf"},
      {"load_hf", "load_hf"}};
  std::string out;
  auto last = message.cbegin();
  for (std::sregex_iterator it(message.begin(), message.end(), c_function), end; it != end; ++it) {
    const std::smatch& match = *it;
    out.append(last, match[0].first);
    const auto method = methods.find(match[2].str());
    out += match[1].str() + (method == methods.end() ? std::string("Trainer") : "Trainer." + method->second);
    last = match[0].second;
  }
  out.append(last, message.cend());
  return out;
}

// The segments of a message, split at ": " ("<json>: model gpt: model.n_layr: unknown key ...").
std::vector<std::string> segments(const std::string& message) {
  std::vector<std::string> parts;
  size_t begin = 0;
  for (size_t colon; (colon = message.find(": ", begin)) != std::string::npos; begin = colon + 2)
    parts.push_back(message.substr(begin, colon - begin));
  parts.push_back(message.substr(begin));
  return parts;
}

// Where the config came from ("<json>", "/x/run.json", "train.json"): a message's first segment
// may be its origin, which is not a key.
bool is_origin(const std::string& segment) {
  const bool json_file = segment.size() > 5 && segment.compare(segment.size() - 5, 5, ".json") == 0;
  return segment == "<json>" || segment.find('/') != std::string::npos || json_file;
}

// The config path a ConfigError names: past the config's origin and a plugin's "kind name"
// segment, the first segment that reads as a key path ("model.n_layr", "optimizer.betas[1]",
// "trian"); else None.
py::object config_path(const std::string& message) {
  static const std::regex key_path(R"(^(?:config )?([A-Za-z_]\w*(?:\.[A-Za-z_]\w*|\[\d+\])*)$)");
  const std::vector<std::string> parts = segments(message);
  for (size_t i = 0; i + 1 < parts.size(); ++i) {  // the last segment is the complaint itself
    if (i == 0 && is_origin(parts[i])) continue;
    std::smatch match;
    if (std::regex_match(parts[i], match, key_path)) return py::str(match[1].str());
  }
  return py::none();
}

// The key a "did you mean" names.
py::object suggestion(const std::string& message) {
  static const std::regex did_you_mean(R"(did you mean \\?"([^"\\]+)\\?")");
  std::smatch match;
  if (std::regex_search(message, match, did_you_mean)) return py::str(match[1].str());
  return py::none();
}

// The class comes from the status the core raised (a missing file has its own, 0.19); only a
// plugin-not-found is told from another not-found by its words.
PyObject* type_for(keel_status status, const std::string& message) {
  switch (status) {
    case KEEL_ERR_MISSING_FILE: return types.missing_file;
    case KEEL_ERR_INVALID_CONFIG: return types.config;
    case KEEL_ERR_INVALID_ARGUMENT: return types.invalid_argument;
    case KEEL_ERR_NOT_FOUND: {
      static const std::regex plugin(R"(\bno \w+ plugin named\b)");
      return std::regex_search(message, plugin) ? types.plugin_not_found : types.not_found;
    }
    case KEEL_ERR_IO: return types.io;
    case KEEL_ERR_UNIMPLEMENTED: return types.unsupported;
    case KEEL_ERR_OUT_OF_MEMORY: return types.out_of_memory;
    case KEEL_ERR_NONFINITE: return types.non_finite;
    default: return types.error;
  }
}

// keel.Status(status) when the package's enum is there (it is, once `import keel` ran), else
// the plain int.
py::object status_value(keel_status status) {
  try {
    return py::module_::import("keel").attr("Status")(static_cast<int>(status));
  } catch (const py::error_already_set&) {
    return py::int_(static_cast<int>(status));
  }
}

void raise_keel_error(keel_status status, const std::string& raw_message) {
  const std::string message = python_names(raw_message);
  PyObject* type = type_for(status, raw_message);
  // OSError's constructor reads (errno, strerror) from two arguments; one keeps it a message.
  py::object error = py::reinterpret_borrow<py::object>(type)(message);
  error.attr("status") = status_value(status);
  if (type == types.missing_file) error.attr("errno") = ENOENT;
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
                      {PyExc_OSError, types.error});
  types.missing_file =
      new_type(module, "MissingFile", "A file or folder Keel was pointed at does not exist or cannot be opened.",
               {PyExc_FileNotFoundError, types.io});
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
