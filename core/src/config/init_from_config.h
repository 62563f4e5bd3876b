// model.init_from naming a Hugging Face checkpoint folder: its config.json gives the dimensions
// the model section leaves out, completed by the model plugin (model.h complete_config, 0.10)
// while the config is read, so every later step, checkpoints included, sees the whole section.
#pragma once

#include <string>

namespace keel {

// The model section `section_json` completed from a checkpoint folder's config.json by the model
// plugin when `init_from` names a folder; returned as is for a file. Throws KeelError naming the
// folder, or the key and both values that disagree.
std::string complete_model_config(const std::string& model_plugin, const std::string& init_from,
                                  const std::string& section_json, const std::string& json_path);

}  // namespace keel
