// keel.plugins() and keel.register_plugin_library(): what the core's loader found, and adding a
// library by path ahead of every search folder.
#include <keel/plugin.h>

#include "keel_python.hpp"

namespace keel_python {

void bind_plugin_list(py::module_& module) {
  module.def(
      "plugins",
      [] {
        size_t count = 0;
        keel_status status;
        {
          py::gil_scoped_release no_gil;  // the first call scans the plugin folders
          status = keel_plugin_count(&count);
        }
        check(status);
        py::list plugins;
        for (size_t i = 0; i < count; ++i) {
          keel_plugin_description description{};
          description.struct_size = sizeof(description);
          check(keel_plugin_describe(i, &description));
          const keel_plugin_info& info = *description.info;
          py::dict entry;
          entry["kind"] = description.kind_name;
          entry["name"] = info.name;
          entry["version"] = info.version;
          entry["abi"] = std::to_string(info.abi_major) + "." + std::to_string(info.abi_minor);
          entry["path"] = description.path;
          entry["description"] = info.description ? info.description : "";
          plugins.append(entry);
        }
        return plugins;
      },
      "The plugins the core found (scanning the search folders on the first call), each a dict of\n"
      "kind, name, version, abi, path (\"\" for plugins registered from Python) and description.");
  module.def(
      "register_plugin_library",
      [](const py::object& path) {
        const std::string file = py::module_::import("os").attr("fspath")(path).cast<std::string>();
        check(keel_register_plugin_library(file.c_str()));
      },
      py::arg("path"), "Adds a plugin library (libkeel-NAME.so) by path, ahead of every search folder.");
}

}  // namespace keel_python
