// A strategy's own per-rank state in checkpoints (strategy.h, ABI 0.5): named fp32 arrays such
// as local SGD's diverged parameters or an error-feedback residual. Each rank writes its arrays
// into its own safetensors file and the manifest lists them by rank under "strategy_own_state";
// a resume at the same data-parallel size with the same strategy hands each rank its arrays
// back, after the parameters and optimizer state; otherwise they are left out, with a note.
#pragma once

#include <nlohmann/json.hpp>

#include <functional>
#include <string>
#include <vector>

#include "io/safetensors.h"

namespace keel {

struct RunStateView;

// Reads this rank's arrays into `buffers` (kept alive by the caller until the file is written)
// and appends them to `entries`; returns their manifest records ({rank, name, count, file, key}).
nlohmann::json collect_strategy_own_state(const RunStateView& view, const std::string& rank_file,
                                          std::vector<std::vector<float>>& buffers,
                                          std::vector<SafetensorsEntry>& entries);

// Gives this rank its arrays back from `manifest` (verified) where the layout allows; `open`
// returns the checkpoint's safetensors file of that name. Returns whether the checkpoint's ranks
// are this run's (the same strategy, dp and tp): only then does per-rank state carry over.
bool restore_strategy_own_state(const RunStateView& view, const nlohmann::json& manifest, const std::string& where,
                                const std::function<const SafetensorsFile&(const std::string&)>& open);

}  // namespace keel
