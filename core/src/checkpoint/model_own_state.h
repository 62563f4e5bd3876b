// A model's rule-moved state in checkpoints (model.h 0.19 own_state_*: loss-free balancing's
// per-expert bias): named fp32 arrays, the same on every data-parallel and tensor-parallel rank,
// so each pipeline stage's rank at dp 0 and tp 0 writes its arrays into its own safetensors file
// and the manifest lists them once under "model_state"; a resume at any layout writes each array
// into every rank that holds one of that name.
#pragma once

#include <nlohmann/json.hpp>

#include <functional>
#include <string>
#include <vector>

#include "io/safetensors.h"

namespace keel {

struct RunStateView;

// Reads this rank's arrays into `buffers` (kept alive by the caller until the file is written)
// and appends them to `entries`, where this rank is the one to save them; returns their manifest
// records ({name, count, file, key}).
nlohmann::json collect_model_own_state(const RunStateView& view, const std::string& rank_file,
                                       std::vector<std::vector<float>>& buffers, std::vector<SafetensorsEntry>& entries);

// Writes every array the model keeps back from `manifest` (verified); `open` returns the
// checkpoint's safetensors file of that name. Throws KeelError (KEEL_ERR_IO) naming an array the
// checkpoint lacks, lists twice or sizes otherwise.
void restore_model_own_state(const RunStateView& view, const nlohmann::json& manifest, const std::string& where,
                             const std::function<const SafetensorsFile&(const std::string&)>& open);

}  // namespace keel
