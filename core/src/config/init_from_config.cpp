// Completing the model section from model.init_from's config.json (init_from_config.h).
#include "config/init_from_config.h"

#include <keel/model.h>

#include <nlohmann/json.hpp>

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

bool exists(const std::string& path) {
  std::error_code error;
  return std::filesystem::exists(path, error);
}

std::string read_config(const std::string& path, const char* what) {
  try {
    const std::vector<unsigned char> bytes = read_regular_file(path, what, Symlinks::follow, kMaxConfigBytes);
    return std::string(bytes.begin(), bytes.end());
  } catch (const KeelError& e) {
    throw KeelError(e.code, std::string("model.init_from: ") + e.what());
  }
}

// The model plugin's complete_config for `format` over `external` (a config file's text).
std::string complete_with(const std::string& model_plugin, const char* format, const std::string& external,
                          const std::string& section_json, const std::string& json_path, const std::string& init_from) {
  const keel_plugin_info& info = PluginRegistry::instance().find(KEEL_KIND_MODEL, model_plugin).info;
  const auto* table = static_cast<const keel_model_api*>(info.api);
  if (info.abi_minor < 10 || !KEEL_HAS_SLOT(table, complete_config) || !table->complete_config)
    throw KeelError(KEEL_ERR_UNIMPLEMENTED, "model.init_from: " + init_from + " is a folder, but model '" + model_plugin +
                                                "' cannot read its config (complete_config, ABI 0.10): name the "
                                                "safetensors file and give every dimension in the model section");
  std::string out(4096, '\0');
  for (int attempt = 0; attempt < 2; ++attempt) {
    size_t length = 0;
    const keel_status status = table->complete_config(host_table(), format, external.c_str(), section_json.c_str(),
                                                      json_path.c_str(), out.data(), out.size(), &length);
    if (status != KEEL_OK)
      throw KeelError(status, "model.init_from " + init_from + ": " + last_error());
    if (length < out.size()) return out.substr(0, length);
    out.assign(length + 1, '\0');
  }
  throw KeelError(KEEL_ERR_INTERNAL, "model '" + model_plugin + "': complete_config's length changed between calls");
}

}  // namespace

std::optional<AdapterFolder> adapter_folder(const std::string& init_from) {
  if (!is_folder(init_from)) return std::nullopt;
  const std::filesystem::path folder(init_from);
  const std::string config_path = (folder / "adapter_config.json").string();
  if (!exists(config_path)) return std::nullopt;
  AdapterFolder out;
  out.config_text = read_config(config_path, "adapter config");
  nlohmann::json config;
  try {
    config = nlohmann::json::parse(out.config_text);
  } catch (const nlohmann::json::exception& e) {
    throw KeelError(KEEL_ERR_INVALID_CONFIG, "model.init_from: " + config_path + " is not JSON: " + e.what());
  }
  const nlohmann::json base = config.is_object() ? config.value("base_model_name_or_path", nlohmann::json()) : nlohmann::json();
  if (!base.is_string() || base.get<std::string>().empty())
    throw KeelError(KEEL_ERR_INVALID_CONFIG, "model.init_from: " + config_path + ": base_model_name_or_path is " +
                                                 base.dump() + "; expected the base model's local folder or file, "
                                                 "which the adapters were trained on");
  std::filesystem::path base_path(base.get<std::string>());
  if (base_path.is_relative()) base_path = folder / base_path;
  if (!exists(base_path.string()))
    throw KeelError(KEEL_ERR_MISSING_FILE, "model.init_from: " + config_path + ": base_model_name_or_path " +
                                               base.dump() + " is no local folder or file (" + base_path.string() +
                                               "); Keel reads no Hub ids: download the base and name its folder");
  if (exists((base_path / "adapter_config.json").string()))
    throw KeelError(KEEL_ERR_INVALID_CONFIG, "model.init_from: " + config_path + ": base_model_name_or_path " +
                                                 base.dump() + " is itself an adapter folder; name the base model");
  out.base = base_path.string();
  out.adapter_file = (folder / "adapter_model.safetensors").string();
  if (!exists(out.adapter_file))
    throw KeelError(KEEL_ERR_MISSING_FILE, "model.init_from: " + init_from + " holds adapter_config.json but no "
                                               "adapter_model.safetensors");
  return out;
}

std::string complete_model_config(const std::string& model_plugin, const std::string& init_from,
                                  const std::string& section_json, const std::string& json_path) {
  if (const std::optional<AdapterFolder> adapter = adapter_folder(init_from)) {
    const std::string with_base = complete_model_config(model_plugin, adapter->base, section_json, json_path);
    return complete_with(model_plugin, "peft", adapter->config_text, with_base, json_path, init_from);
  }
  if (!is_folder(init_from)) return section_json;  // a file: the config gives every dimension
  const std::string external = read_config((std::filesystem::path(init_from) / "config.json").string(), "config");
  return complete_with(model_plugin, "huggingface", external, section_json, json_path, init_from);
}

}  // namespace keel
