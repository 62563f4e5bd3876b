// Completing the model section from model.init_from's config.json (init_from_config.h).
#include "config/init_from_config.h"

#include <keel/model.h>

#include <filesystem>
#include <system_error>
#include <vector>

#include "host/errors.h"
#include "host/host_table.h"
#include "io/regular_file.h"
#include "loader/plugin_registry.h"

namespace keel {

namespace {

constexpr size_t kMaxConfigBytes = size_t(1) << 20;  // config.json is a few KB

bool is_folder(const std::string& path) {
  std::error_code error;
  return std::filesystem::is_directory(path, error);
}

}  // namespace

std::string complete_model_config(const std::string& model_plugin, const std::string& init_from,
                                  const std::string& section_json, const std::string& json_path) {
  if (!is_folder(init_from)) return section_json;  // a file: the config gives every dimension
  const std::string config_path = (std::filesystem::path(init_from) / "config.json").string();
  std::string external;
  try {
    const std::vector<unsigned char> bytes = read_regular_file(config_path, "config", Symlinks::follow, kMaxConfigBytes);
    external.assign(bytes.begin(), bytes.end());
  } catch (const KeelError& e) {
    throw KeelError(e.code, std::string("model.init_from: ") + e.what());
  }
  const keel_plugin_info& info = PluginRegistry::instance().find(KEEL_KIND_MODEL, model_plugin).info;
  const auto* table = static_cast<const keel_model_api*>(info.api);
  if (info.abi_minor < 10 || !KEEL_HAS_SLOT(table, complete_config) || !table->complete_config)
    throw KeelError(KEEL_ERR_UNIMPLEMENTED, "model.init_from: " + init_from + " is a folder, but model '" + model_plugin +
                                                "' cannot read its config.json (complete_config, ABI 0.10): name the "
                                                "safetensors file and give every dimension in the model section");
  std::string out(4096, '\0');
  for (int attempt = 0; attempt < 2; ++attempt) {
    size_t length = 0;
    const keel_status status = table->complete_config(host_table(), "huggingface", external.c_str(), section_json.c_str(),
                                                      json_path.c_str(), out.data(), out.size(), &length);
    if (status != KEEL_OK)
      throw KeelError(status, "model.init_from " + init_from + ": " + last_error());
    if (length < out.size()) return out.substr(0, length);
    out.assign(length + 1, '\0');
  }
  throw KeelError(KEEL_ERR_INTERNAL, "model '" + model_plugin + "': complete_config's length changed between calls");
}

}  // namespace keel
