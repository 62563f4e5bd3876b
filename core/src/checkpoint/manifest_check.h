// A checkpoint's manifest is input from elsewhere: before any number in it is used, its whole
// structure is checked here (types, ranges, names, and that the slices tile every tensor
// exactly), so the loader and `keel inspect` can then read it without further doubt.
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <string>

namespace keel {

// Bounds on counts read from a manifest: far above any real run, far below int64 overflow.
constexpr int64_t kMaxManifestCount = int64_t(1) << 62;   // step, tokens_seen, file bytes
constexpr int64_t kMaxTensorElements = int64_t(1) << 48;  // one parameter's elements, and all of them
constexpr int64_t kMaxStateSlots = 64;
constexpr int kMaxTensorDims = 8;
constexpr int64_t kMaxBoxesPerTensor = 4096;  // distinct slice boxes of one tensor: one per tp rank

// Files of a checkpoint are plain names directly inside its folder ("rank00000.safetensors"):
// not empty, not "." or "..", no '/' (so neither absolute nor climbing out), no NUL.
bool is_plain_file_name(const std::string& name);

// Throws KeelError(KEEL_ERR_IO) "<manifest_path>: <json path>: <what is wrong>, expected ...".
// Checks: format and format_version; step and tokens_seen in [0, 2^62]; config (with a
// config.model object naming its plugin) and data_state objects; optimizer.n_state_slots; params (unique names, shapes of sizes >= 0 whose product
// fits); files (unique plain names, byte counts, 8-digit hex CRC-32C); slices (a known tensor,
// kind "param" or "stateK" below n_state_slots, 0 <= begin < end <= the tensor's elements, a
// file listed in files); strategy.plugin and mesh.dp; strategy_own_state records (rank, name,
// count, key, a listed file); and that the slices of every (tensor, kind) cover it with no gap
// and no overlap.
void check_manifest_structure(const nlohmann::json& manifest, const std::string& manifest_path);

// The elements of a checked manifest's params[i].shape.
int64_t manifest_param_elements(const nlohmann::json& param);

}  // namespace keel
