// Saving: every slice this rank owns (on one rank, each whole tensor) into one safetensors file
// per rank, a manifest describing the run, the mesh, every parameter and every slice, and each
// file's size and CRC-32C. The folder is built under .tmp-*, fsync'ed, renamed into place, and
// only then does `latest` move: a crash at any moment leaves the previous checkpoint intact.
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>

#include <keel/version.h>

#include "checkpoint/checkpoint.h"
#include "checkpoint/checkpoint_paths.h"
#include "host/errors.h"
#include "io/crc32c.h"
#include "io/durable_files.h"
#include "io/safetensors.h"
#include "train/trainer.h"

namespace keel {
namespace fs = std::filesystem;

namespace {

uint32_t file_crc32c(const std::string& path, uint64_t* bytes) {
  std::ifstream in(path, std::ios::binary);
  std::vector<char> chunk(1 << 20);
  uint32_t crc = 0;
  *bytes = 0;
  while (in) {
    in.read(chunk.data(), std::streamsize(chunk.size()));
    const std::streamsize n = in.gcount();
    crc = crc32c(chunk.data(), size_t(n), crc);
    *bytes += uint64_t(n);
  }
  return crc;
}

std::string hex32(uint32_t v) {
  char text[16];
  std::snprintf(text, sizeof text, "%08x", v);
  return text;
}

void require_finite(const std::vector<float>& values, const std::string& what, int64_t step) {
  for (size_t i = 0; i < values.size(); ++i)
    if (!std::isfinite(values[i]))
      throw KeelError(KEEL_ERR_NONFINITE, "checkpoint at step " + std::to_string(step) + " refused: " + what +
                                              " holds a non-finite value at element " + std::to_string(i) +
                                              "; the previous checkpoint is kept");
}

}  // namespace

std::string save_checkpoint(Trainer& trainer, const std::string& root, int32_t keep) {
  const int64_t step = trainer.step();
  const keel_model_info& info = trainer.model_info();
  const int32_t slots = trainer.optimizer_info().n_state_slots;
  const std::string rank_file = "rank00000.safetensors";

  // Gather every slice first: a refusal (non-finite values) must not leave anything on disk.
  std::vector<std::vector<float>> buffers;
  std::vector<SafetensorsEntry> entries;
  nlohmann::json params = nlohmann::json::array(), slices = nlohmann::json::array();
  buffers.reserve(info.n_params * size_t(1 + slots));
  for (size_t i = 0; i < info.n_params; ++i) {
    const keel_param_spec& spec = info.params[i];
    const int64_t numel = trainer.numel(i);
    params.push_back({{"name", spec.name}, {"shape", std::vector<int64_t>(spec.global_shape, spec.global_shape + spec.ndim)},
                      {"dtype", "F32"}, {"layer", spec.layer}});
    for (int32_t kind = -1; kind < slots; ++kind) {
      const std::string kind_name = kind < 0 ? "param" : "state" + std::to_string(kind);
      buffers.push_back(kind < 0 ? trainer.read_param(i) : trainer.read_state(kind, i));
      require_finite(buffers.back(), kind_name + " of " + spec.name, step);
      const std::string key = kind_name + "/" + spec.name + "/0";
      entries.push_back({key, "F32", {numel}, buffers.back().data(), size_t(numel) * sizeof(float)});
      slices.push_back({{"tensor", spec.name}, {"kind", kind_name}, {"begin", 0}, {"end", numel},
                        {"file", rank_file}, {"key", key}});
    }
  }

  std::error_code error;
  fs::create_directories(root, error);
  if (error) throw KeelError(KEEL_ERR_IO, root + ": cannot create the checkpoint folder: " + error.message());
  const std::string name = step_folder_name(step);
  const std::string temporary = (fs::path(root) / (".tmp-" + name + "-" + std::to_string(::getpid()))).string();
  fs::remove_all(temporary, error);
  fs::create_directories(temporary, error);
  if (error) throw KeelError(KEEL_ERR_IO, temporary + ": cannot create: " + error.message());

  write_safetensors((fs::path(temporary) / rank_file).string(), entries);
  uint64_t bytes = 0;
  const uint32_t crc = file_crc32c((fs::path(temporary) / rank_file).string(), &bytes);

  const RunConfig& config = trainer.config();
  nlohmann::json manifest = {
      {"format", "keel-checkpoint"},
      {"format_version", kCheckpointFormatVersion},
      {"keel_abi", std::to_string(KEEL_ABI_VERSION_MAJOR) + "." + std::to_string(KEEL_ABI_VERSION_MINOR)},
      {"step", step},
      {"tokens_seen", trainer.tokens_seen()},
      {"data_state", trainer.data_state()},
      {"rng", {{"seed", config.train.seed}, {"note", "sampling order is a pure function of seed and data_state"}}},
      {"mesh", {{"dp", 1}, {"tp", 1}, {"pp", 1}, {"world_size", 1}}},
      {"config", config.json},
      {"optimizer", {{"plugin", config.optimizer.plugin}, {"n_state_slots", slots}}},
      {"params", params},
      {"slices", slices},
      {"files", {{{"name", rank_file}, {"bytes", bytes}, {"crc32c", hex32(crc)}}}}};
  write_file_atomically((fs::path(temporary) / "manifest.json").string(), manifest.dump(1));
  fsync_path(temporary);

  const std::string final_folder = (fs::path(root) / name).string();
  if (fs::exists(final_folder)) {
    // The same step saved by an earlier run (a resume that retrained it): move the old one aside
    // first; `latest` keeps naming a complete folder except between these two renames, and
    // resolve_checkpoint falls back to the newest complete one if a crash lands there.
    const std::string old = (fs::path(root) / (".tmp-old-" + name + "-" + std::to_string(::getpid()))).string();
    rename_durably(final_folder, old);
    rename_durably(temporary, final_folder);
    fs::remove_all(old, error);
  } else {
    rename_durably(temporary, final_folder);
  }
  write_file_atomically((fs::path(root) / "latest").string(), name + "\n");
  prune_checkpoints(root, keep, final_folder);
  return final_folder;
}

}  // namespace keel
