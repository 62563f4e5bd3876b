// A checkpoint's data files, read only through the manifest that lists them and checked as
// they are opened: size and CRC-32C against the manifest, the safetensors structure, and every
// slice and strategy_own_state record stored in the file (its key present, F32, exactly as many
// elements as its range says; slice values finite). Resume, `keel export` and `keel inspect`
// all read checkpoint files through this, so none of them accepts what another refuses.
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <map>
#include <memory>
#include <string>

#include "io/safetensors.h"

namespace keel {

// Throws KeelError(KEEL_ERR_IO) when a file's size or CRC-32C differs from its manifest entry.
void check_file_matches(const std::string& path, uint64_t bytes, const std::string& crc, const nlohmann::json& entry);

class CheckpointFiles {
 public:
  // `manifest` has passed check_manifest_structure and outlives this.
  CheckpointFiles(const nlohmann::json& manifest, std::string checkpoint_dir);
  // A file listed in the manifest, read and checked when first asked for; only regular files
  // directly inside the folder are opened. Throws KeelError "<manifest path>: <JSON path>: what
  // is wrong; expected ...".
  const SafetensorsFile& open(const std::string& name) const;

 private:
  void check_slices_stored_in(const std::string& name, const SafetensorsFile& file) const;
  void check_own_state_stored_in(const std::string& name, const SafetensorsFile& file) const;
  // The F32 tensor `key` of `file`, holding `elements` values; `at` is the record's JSON path.
  const SafetensorsFile::Tensor& stored_values(const SafetensorsFile& file, const std::string& name, const std::string& key,
                                               int64_t elements, const std::string& at, const std::string& what) const;

  const nlohmann::json& manifest_;
  std::string checkpoint_dir_, manifest_path_;
  std::map<std::string, const nlohmann::json*> listed_;
  mutable std::map<std::string, std::unique_ptr<SafetensorsFile>> opened_;
};

}  // namespace keel
