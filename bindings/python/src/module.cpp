// The extension module keel._keel: each file adds its part; keel/__init__.py re-exports them.
#include <keel/version.h>

#include "keel_python.hpp"

PYBIND11_MODULE(_keel, module) {
  using namespace keel_python;
  module.doc() = "Keel's embedding API (abi/keel/embed.h) for Python";
  module.attr("ABI_VERSION") = std::to_string(KEEL_ABI_VERSION_MAJOR) + "." + std::to_string(KEEL_ABI_VERSION_MINOR);
  bind_errors(module);
  bind_tensor(module);
  bind_trainer(module);
  bind_plugin_list(module);
  bind_data_sources(module);
  bind_optimizers(module);
  bind_tokenizer(module);
}
