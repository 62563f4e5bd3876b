// model.init_from naming a Hugging Face checkpoint folder: its config.json gives the dimensions
// the model section leaves out, completed by the model plugin (model.h complete_config, 0.10)
// while the config is read, so every later step, checkpoints included, sees the whole section.
// It may also name a PEFT adapter folder (a LoRA run's; docs/finetuning.md): the base its
// adapter_config.json names is read as above, and the adapter's config completes model.lora.
#pragma once

#include <optional>
#include <string>

namespace keel {

// A PEFT adapter folder: adapter_config.json and adapter_model.safetensors directly inside it,
// the base model (a folder or a safetensors file) at the config's base_model_name_or_path, a
// local path (relative to the adapter folder when not absolute).
struct AdapterFolder {
  std::string config_text;   // adapter_config.json's contents
  std::string adapter_file;  // .../adapter_model.safetensors
  std::string base;          // the base model's folder or file
};

// The adapter folder `init_from` names, or nothing when it is not one (no adapter_config.json).
// Throws KeelError naming the file when the config is unreadable, names no local base, or the
// adapter file is missing.
std::optional<AdapterFolder> adapter_folder(const std::string& init_from);

// The model section `section_json` completed from a checkpoint folder's config.json by the model
// plugin when `init_from` names a folder; returned as is for a file. For an adapter folder, from
// its base's config.json and then its adapter_config.json. Throws KeelError naming the folder, or
// the key and both values that disagree.
std::string complete_model_config(const std::string& model_plugin, const std::string& init_from,
                                  const std::string& section_json, const std::string& json_path);

}  // namespace keel
