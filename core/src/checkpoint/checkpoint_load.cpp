// Loading: the manifest is checked (format version, every file's size and CRC-32C) before any
// byte reaches the trainer; each parameter and state tensor is assembled from the slices that
// cover it, so a checkpoint written by another layout loads the same way.
#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <set>

#include "checkpoint/checkpoint.h"
#include "checkpoint/strategy_own_state.h"
#include "host/errors.h"
#include "io/crc32c.h"
#include "io/safetensors.h"
#include "train/trainer.h"

namespace keel {
namespace fs = std::filesystem;

namespace {

std::string crc_of_file(const std::string& path, uint64_t* bytes) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw KeelError(KEEL_ERR_IO, path + ": listed in the manifest but missing");
  std::vector<char> chunk(1 << 20);
  uint32_t crc = 0;
  *bytes = 0;
  while (in) {
    in.read(chunk.data(), std::streamsize(chunk.size()));
    crc = crc32c(chunk.data(), size_t(in.gcount()), crc);
    *bytes += uint64_t(in.gcount());
  }
  char text[16];
  std::snprintf(text, sizeof text, "%08x", crc);
  return text;
}

// "model.n_layer is 4 in the checkpoint but 6 in this config", for the first differing key.
std::string first_difference(const nlohmann::json& saved, const nlohmann::json& now, const std::string& path) {
  if (saved.is_object() && now.is_object()) {
    std::set<std::string> keys;
    for (auto it = saved.begin(); it != saved.end(); ++it) keys.insert(it.key());
    for (auto it = now.begin(); it != now.end(); ++it) keys.insert(it.key());
    for (const auto& key : keys) {
      const std::string where = path + "." + key;
      if (!saved.contains(key)) return where + " is absent from the checkpoint but " + now.at(key).dump() + " in this config";
      if (!now.contains(key)) return where + " is " + saved.at(key).dump() + " in the checkpoint but absent from this config";
      std::string inner = first_difference(saved.at(key), now.at(key), where);
      if (!inner.empty()) return inner;
    }
    return "";
  }
  return saved == now ? "" : path + " is " + saved.dump() + " in the checkpoint but " + now.dump() + " in this config";
}

}  // namespace

nlohmann::json read_verified_manifest(const std::string& checkpoint_dir) {
  const std::string manifest_path = (fs::path(checkpoint_dir) / "manifest.json").string();
  std::ifstream in(manifest_path);
  if (!in) throw KeelError(KEEL_ERR_IO, manifest_path + ": missing: not a complete checkpoint");
  nlohmann::json manifest;
  try {
    manifest = nlohmann::json::parse(in);
  } catch (const std::exception& e) {
    throw KeelError(KEEL_ERR_IO, manifest_path + ": not valid JSON: " + e.what());
  }
  if (manifest.value("format", "") != "keel-checkpoint")
    throw KeelError(KEEL_ERR_IO, manifest_path + ": not a Keel checkpoint manifest (\"format\" is not \"keel-checkpoint\")");
  const int version = manifest.value("format_version", -1);
  if (version != kCheckpointFormatVersion)
    throw KeelError(KEEL_ERR_IO, manifest_path + ": format_version " + std::to_string(version) +
                                     " is not one this Keel reads (it reads version " +
                                     std::to_string(kCheckpointFormatVersion) + ")");
  for (const auto& file : manifest.at("files")) {
    const std::string path = (fs::path(checkpoint_dir) / file.at("name").get<std::string>()).string();
    uint64_t bytes = 0;
    const std::string crc = crc_of_file(path, &bytes);
    if (bytes != file.at("bytes").get<uint64_t>())
      throw KeelError(KEEL_ERR_IO, path + ": truncated or altered: " + std::to_string(bytes) + " bytes, the manifest says " +
                                       std::to_string(file.at("bytes").get<uint64_t>()));
    if (crc != file.at("crc32c").get<std::string>())
      throw KeelError(KEEL_ERR_IO, path + ": checksum mismatch: CRC-32C " + crc + ", the manifest says " +
                                       file.at("crc32c").get<std::string>() + " (the file is corrupted)");
  }
  return manifest;
}

RunConfig config_from_checkpoint(const std::string& checkpoint_dir) {
  nlohmann::json manifest = read_verified_manifest(checkpoint_dir);
  return RunConfig::from_json_text(manifest.at("config").dump(), (fs::path(checkpoint_dir) / "manifest.json").string());
}

void load_checkpoint(Trainer& trainer, const std::string& checkpoint_dir) {
  const nlohmann::json manifest = read_verified_manifest(checkpoint_dir);
  const std::string where = (fs::path(checkpoint_dir) / "manifest.json").string();

  // The model must be the same network; everything else (steps, lr, data, strategy) may change.
  nlohmann::json saved_model = manifest.at("config").at("model");
  saved_model.erase("init_from");
  const std::string difference = first_difference(saved_model, trainer.config().model.json, "model");
  if (!difference.empty())
    throw KeelError(KEEL_ERR_INVALID_CONFIG, "cannot resume from " + checkpoint_dir + ": " + difference +
                                                 "; a checkpoint loads only into the model it was saved from");
  const int32_t saved_slots = manifest.at("optimizer").at("n_state_slots").get<int32_t>();
  const int32_t slots = trainer.optimizer_info().n_state_slots;
  if (saved_slots != slots)
    throw KeelError(KEEL_ERR_INVALID_CONFIG, "cannot resume from " + checkpoint_dir + ": its optimizer '" +
                                                 manifest.at("optimizer").at("plugin").get<std::string>() + "' kept " +
                                                 std::to_string(saved_slots) + " state slots, this run's '" +
                                                 trainer.config().optimizer.plugin + "' keeps " + std::to_string(slots));

  // Index slices by (tensor, kind); open each file once.
  std::map<std::pair<std::string, std::string>, std::vector<nlohmann::json>> slices;
  for (const auto& slice : manifest.at("slices"))
    slices[{slice.at("tensor").get<std::string>(), slice.at("kind").get<std::string>()}].push_back(slice);
  std::map<std::string, std::unique_ptr<SafetensorsFile>> files;
  auto file = [&](const std::string& name) -> const SafetensorsFile& {
    auto& slot = files[name];
    if (!slot) slot = std::make_unique<SafetensorsFile>((fs::path(checkpoint_dir) / name).string());
    return *slot;
  };

  // Each rank fills the ranges it holds in this run's layout from whatever slices overlap them,
  // so a checkpoint saved at one data-parallel size or ZeRO stage loads into any other.
  const keel_model_info& info = trainer.model_info();
  for (size_t i = 0; i < info.n_params; ++i) {
    const std::string name = info.params[i].name;
    const int64_t numel = trainer.numel(i);
    for (int32_t kind = -1; kind < slots; ++kind) {
      const std::string kind_name = kind < 0 ? "param" : "state" + std::to_string(kind);
      const auto [want_begin, want_end] = trainer.owned_range(kind, i);
      if (want_end <= want_begin) continue;
      auto found = slices.find({name, kind_name});
      if (found == slices.end())
        throw KeelError(KEEL_ERR_IO, where + ": no " + kind_name + " slices for parameter \"" + name + "\"");
      std::vector<float> values(static_cast<size_t>(want_end - want_begin));
      int64_t covered = 0;
      for (const auto& slice : found->second) {
        const int64_t begin = slice.at("begin").get<int64_t>(), end = slice.at("end").get<int64_t>();
        if (begin < 0 || end > numel || begin > end)
          throw KeelError(KEEL_ERR_IO, where + ": slice [" + std::to_string(begin) + ", " + std::to_string(end) + ") of \"" +
                                           name + "\" lies outside its " + std::to_string(numel) + " elements");
        const int64_t from = std::max(begin, want_begin), to = std::min(end, want_end);
        if (to <= from) continue;
        file(slice.at("file").get<std::string>()).read_f32(slice.at("key").get<std::string>(), from - begin, to - from,
                                                            values.data() + (from - want_begin));
        covered += to - from;
      }
      if (covered != want_end - want_begin)
        throw KeelError(KEEL_ERR_IO, where + ": the " + kind_name + " slices of \"" + name + "\" cover " +
                                         std::to_string(covered) + " of the " + std::to_string(want_end - want_begin) +
                                         " elements this rank needs");
      trainer.write_range(kind, i, want_begin, values);
    }
  }
  restore_strategy_own_state(trainer, manifest, where, file);
  trainer.restore_position(manifest.at("step").get<int64_t>(), manifest.at("tokens_seen").get<int64_t>(),
                           manifest.at("data_state"));
}

}  // namespace keel
