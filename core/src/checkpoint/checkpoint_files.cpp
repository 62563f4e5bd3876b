// Opening a checkpoint's files: read once (regular files only, no symlinks), compared with the
// manifest's size and CRC-32C, parsed, and then every record that points into the file checked
// against what the file holds. The checks run on the bytes that are then loaded, so what is
// loaded is exactly what was verified.
#include "checkpoint/checkpoint_files.h"

#include <cmath>
#include <cstring>
#include <filesystem>

#include "host/errors.h"
#include "io/crc32c.h"

namespace keel {
namespace fs = std::filesystem;

void check_file_matches(const std::string& path, uint64_t bytes, const std::string& crc, const nlohmann::json& entry) {
  const uint64_t listed_bytes = entry.at("bytes").get<uint64_t>();
  const std::string listed_crc = entry.at("crc32c").get<std::string>();
  if (bytes != listed_bytes)
    throw KeelError(KEEL_ERR_IO, path + ": truncated or altered: " + std::to_string(bytes) + " bytes, the manifest says " +
                                     std::to_string(listed_bytes));
  if (crc != listed_crc)
    throw KeelError(KEEL_ERR_IO, path + ": checksum mismatch: CRC-32C " + crc + ", the manifest says " + listed_crc +
                                     " (the file is corrupted)");
}

CheckpointFiles::CheckpointFiles(const nlohmann::json& manifest, std::string checkpoint_dir)
    : manifest_(manifest),
      checkpoint_dir_(std::move(checkpoint_dir)),
      manifest_path_((fs::path(checkpoint_dir_) / "manifest.json").string()) {
  for (const auto& file : manifest_.at("files")) listed_[file.at("name").get<std::string>()] = &file;
}

const SafetensorsFile& CheckpointFiles::open(const std::string& name) const {
  auto& slot = opened_[name];
  if (slot) return *slot;
  auto entry = listed_.find(name);
  if (entry == listed_.end())
    throw KeelError(KEEL_ERR_IO, manifest_path_ + ": \"" + name + "\" is not listed in \"files\"; only listed files are read");
  const std::string path = (fs::path(checkpoint_dir_) / name).string();
  auto file = std::make_unique<SafetensorsFile>(path, Symlinks::refuse);
  const std::vector<unsigned char>& bytes = file->file_bytes();
  check_file_matches(path, bytes.size(), crc32c_hex(crc32c(bytes.data(), bytes.size())), *entry->second);
  check_slices_stored_in(name, *file);
  check_own_state_stored_in(name, *file);
  slot = std::move(file);
  return *slot;
}

const SafetensorsFile::Tensor& CheckpointFiles::stored_values(const SafetensorsFile& file, const std::string& name,
                                                              const std::string& key, int64_t elements,
                                                              const std::string& at, const std::string& what) const {
  if (!file.has(key))
    throw KeelError(KEEL_ERR_IO, manifest_path_ + ": " + at + ".key: \"" + key + "\" is not in " + name +
                                     "; expected a tensor of " + std::to_string(elements) + " F32 values there");
  const SafetensorsFile::Tensor& tensor = file.tensor(key);
  const std::string stored = manifest_path_ + ": " + what + ": \"" + key + "\" in " + name;
  if (tensor.dtype != "F32") throw KeelError(KEEL_ERR_IO, stored + " is " + tensor.dtype + "; expected F32");
  if (int64_t(tensor.bytes / 4) != elements)
    throw KeelError(KEEL_ERR_IO, stored + " holds " + std::to_string(tensor.bytes / 4) + " elements; expected " +
                                     std::to_string(elements) + ", the size of its range (each record reads a tensor "
                                                                "of its own, whole)");
  return tensor;
}

void CheckpointFiles::check_slices_stored_in(const std::string& name, const SafetensorsFile& file) const {
  const nlohmann::json& slices = manifest_.at("slices");
  for (size_t i = 0; i < slices.size(); ++i) {
    const nlohmann::json& slice = slices[i];
    if (slice.at("file").get<std::string>() != name) continue;
    const int64_t begin = slice.at("begin").get<int64_t>(), end = slice.at("end").get<int64_t>();
    const std::string at = "slices[" + std::to_string(i) + "]", key = slice.at("key").get<std::string>();
    const std::string what = at + " (" + slice.at("kind").get<std::string>() + " of \"" +
                             slice.at("tensor").get<std::string>() + "\", range [" + std::to_string(begin) + ", " +
                             std::to_string(end) + "))";
    const SafetensorsFile::Tensor& tensor = stored_values(file, name, key, end - begin, at, what);
    // A checkpoint is never saved from non-finite values (checkpoint_save.cpp), so one found here
    // was put there afterwards; loading it would train from (or export) NaN weights.
    const unsigned char* values = tensor.data;
    for (int64_t e = 0; e < end - begin; ++e) {
      float value;
      std::memcpy(&value, values + size_t(e) * sizeof value, sizeof value);
      if (!std::isfinite(value))
        throw KeelError(KEEL_ERR_IO, manifest_path_ + ": " + what + ": \"" + key + "\" in " + name + " holds " +
                                         (std::isnan(value) ? "nan" : value > 0 ? "inf" : "-inf") + " at element " +
                                         std::to_string(e) + "; expected finite values (a checkpoint is never saved "
                                                             "with others)");
    }
  }
}

void CheckpointFiles::check_own_state_stored_in(const std::string& name, const SafetensorsFile& file) const {
  for (const char* section : {"strategy_own_state", "model_state"}) {
    const auto records = manifest_.find(section);
    if (records == manifest_.end()) continue;
    for (size_t i = 0; i < records->size(); ++i) {
      const nlohmann::json& record = (*records)[i];
      if (record.at("file").get<std::string>() != name) continue;
      const std::string at = std::string(section) + "[" + std::to_string(i) + "]";
      // A plugin's own arrays are its business: their values are not checked, their size is.
      stored_values(file, name, record.at("key").get<std::string>(), record.at("count").get<int64_t>(), at,
                    at + " (\"" + record.at("name").get<std::string>() + "\")");
    }
  }
}

}  // namespace keel
