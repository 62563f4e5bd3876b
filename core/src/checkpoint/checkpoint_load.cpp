// Loading: the manifest is checked (format version, its whole structure, every file's size and
// CRC-32C) before any byte reaches the trainer, and each file is re-verified as it is parsed,
// with every slice it stores (checkpoint_files.h); each parameter and state tensor is assembled
// from the slices that cover it, so a checkpoint written by another layout loads the same way.
// A checkpoint is untrusted input throughout.
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <map>
#include <set>

#include <keel_support/common/json_parse.hpp>
#include <keel_support/common/piece_box.hpp>

#include "checkpoint/checkpoint.h"
#include "checkpoint/checkpoint_files.h"
#include "checkpoint/manifest_check.h"
#include "checkpoint/model_own_state.h"
#include "checkpoint/strategy_own_state.h"
#include "host/errors.h"
#include "host/log.h"
#include "io/crc32c.h"
#include "io/regular_file.h"
#include "train/run_state_view.h"

namespace keel {
namespace fs = std::filesystem;

namespace {

constexpr size_t kMaxManifestBytes = size_t(256) << 20;

// The CRC-32C and size of a checkpoint file, read in chunks (a rank file may be larger than
// memory allows twice). Symlinks are refused: a checkpoint's files are its own.
std::string crc_of_file(const std::string& path, uint64_t* bytes) {
  const int fd = open_regular_file(path, "checkpoint file (listed in the manifest)", Symlinks::refuse);
  std::vector<char> chunk(1 << 20);
  uint32_t crc = 0;
  *bytes = 0;
  for (;;) {
    const ssize_t n = ::read(fd, chunk.data(), chunk.size());
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      const int error = errno;
      ::close(fd);
      throw KeelError(KEEL_ERR_IO, path + ": read failed: " + std::strerror(error));
    }
    if (n == 0) break;
    crc = crc32c(chunk.data(), size_t(n), crc);
    *bytes += uint64_t(n);
  }
  ::close(fd);
  return crc32c_hex(crc);
}

nlohmann::json parse_manifest(const std::string& manifest_path) {
  const std::vector<unsigned char> text =
      read_regular_file(manifest_path, "checkpoint manifest", Symlinks::refuse, kMaxManifestBytes);
  try {
    return keel_support::parse_json(manifest_path, std::string(text.begin(), text.end()));  // depth-bounded
  } catch (const keel_support::ConfigError& e) {
    throw KeelError(KEEL_ERR_IO, e.what());
  }
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
  if (!fs::exists(fs::symlink_status(manifest_path)))
    throw KeelError(KEEL_ERR_IO, manifest_path + ": missing: not a complete checkpoint");
  nlohmann::json manifest = parse_manifest(manifest_path);
  const auto format = manifest.is_object() ? manifest.find("format") : manifest.end();
  if (format == manifest.end() || *format != "keel-checkpoint")
    throw KeelError(KEEL_ERR_IO, manifest_path + ": not a Keel checkpoint manifest (\"format\" is not \"keel-checkpoint\")");
  const auto version = manifest.find("format_version");
  if (version == manifest.end() || !version->is_number_integer() || *version < kOldestCheckpointFormatVersion ||
      *version > kCheckpointFormatVersion)
    throw KeelError(KEEL_ERR_IO, manifest_path + ": format_version " + (version == manifest.end() ? "(missing)" : version->dump()) +
                                     " is not one this Keel reads (it reads versions " +
                                     std::to_string(kOldestCheckpointFormatVersion) + " to " +
                                     std::to_string(kCheckpointFormatVersion) + ")");
  check_manifest_structure(manifest, manifest_path);
  for (const auto& file : manifest.at("files")) {
    const std::string path = (fs::path(checkpoint_dir) / file.at("name").get<std::string>()).string();
    uint64_t bytes = 0;
    const std::string crc = crc_of_file(path, &bytes);
    check_file_matches(path, bytes, crc, file);
  }
  return manifest;
}

nlohmann::json verify_checkpoint(const std::string& checkpoint_dir) {
  nlohmann::json manifest = read_verified_manifest(checkpoint_dir);
  // One file in memory at a time: a checkpoint of many ranks may not fit in memory whole.
  for (const auto& file : manifest.at("files"))
    CheckpointFiles(manifest, checkpoint_dir).open(file.at("name").get<std::string>());
  return manifest;
}

RunConfig config_from_checkpoint(const std::string& checkpoint_dir) {
  nlohmann::json manifest = read_verified_manifest(checkpoint_dir);
  nlohmann::json& config = manifest.at("config");
  // Plugin folders named by a checkpoint would let the checkpoint ship a library whose
  // constructor runs on load: plugins come from this process's own search path only.
  if (config.contains("plugin_path")) {
    log_warn(checkpoint_dir + "/manifest.json: config.plugin_path " + config.at("plugin_path").dump() +
             " is ignored: a checkpoint never chooses where plugins are loaded from (use KEEL_PLUGIN_PATH)");
    config.erase("plugin_path");
  }
  // The saved model section is already complete (a folder's config.json was read into it when the
  // run started); its weights are the checkpoint's, so init_from is not read again.
  if (config.contains("model") && config.at("model").is_object()) config.at("model").erase("init_from");
  return RunConfig::from_json_text(config.dump(), (fs::path(checkpoint_dir) / "manifest.json").string());
}

namespace {

int64_t global_numel(const keel_param_spec& spec) {
  int64_t n = 1;
  for (int32_t d = 0; d < spec.ndim; ++d) n *= spec.global_shape[d];
  return n;
}

// Refuses a checkpoint of another network: the model config (less init_from) and every
// parameter's element count must match this run's.
void check_same_model(const RunStateView& view, const nlohmann::json& manifest, const std::string& checkpoint_dir,
                      const std::string& where) {
  nlohmann::json saved_model = manifest.at("config").contains("model") ? manifest.at("config").at("model") : nlohmann::json();
  if (saved_model.is_object()) saved_model.erase("init_from");
  const std::string difference = first_difference(saved_model, view.config.model.json, "model");
  if (!difference.empty())
    throw KeelError(KEEL_ERR_INVALID_CONFIG, "cannot resume from " + checkpoint_dir + ": " + difference +
                                                 "; a checkpoint loads only into the model it was saved from");
  std::map<std::string, const nlohmann::json*> saved;
  for (const auto& param : manifest.at("params")) saved[param.at("name").get<std::string>()] = &param;
  const bool whole_slices = manifest.at("format_version").get<int64_t>() < 2;
  const keel_model_info& info = view.model;
  for (size_t i = 0; i < info.n_params; ++i) {
    const keel_param_spec& spec = info.params[i];
    auto found = saved.find(spec.name);
    if (found == saved.end())
      throw KeelError(KEEL_ERR_IO, where + ": params: no parameter \"" + std::string(spec.name) +
                                       "\", which model '" + view.config.model.plugin + "' has");
    const int64_t elements = manifest_param_elements(*found->second);
    if (elements != global_numel(info.params[i]))
      throw KeelError(KEEL_ERR_IO, where + ": params: \"" + found->first + "\" has " + std::to_string(elements) +
                                       " elements in the checkpoint, but " + std::to_string(global_numel(info.params[i])) +
                                       " in model '" + view.config.model.plugin + "'");
    // Boxes are read in the model's global shape. A format-1 checkpoint's slices are flat ranges
    // of the whole tensor, so a reshape that keeps the row-major order (GPT's qkv, (3C, C) before
    // 0.6 and (3, C, C) since) loads as it was; a format-2 box needs the same shape.
    const std::vector<int64_t> shape(spec.global_shape, spec.global_shape + spec.ndim);
    if (!whole_slices && found->second->at("shape").get<std::vector<int64_t>>() != shape)
      throw KeelError(KEEL_ERR_IO, where + ": params: \"" + found->first + "\" has shape " +
                                       found->second->at("shape").dump() + " in the checkpoint, but " +
                                       nlohmann::json(shape).dump() + " in model '" + view.config.model.plugin + "'");
  }
}

// The box a slice covers, in the model's global shape (format 1: the whole tensor).
keel_support::PieceBox slice_box(const nlohmann::json& slice, const keel_param_spec& spec, bool whole_slices) {
  keel_support::PieceBox box = keel_support::PieceBox::whole(spec.ndim, spec.global_shape);
  if (whole_slices) return box;
  const auto offset = slice.at("offset").get<std::vector<int64_t>>(), shape = slice.at("shape").get<std::vector<int64_t>>();
  for (int32_t d = 0; d < spec.ndim; ++d) box.offset[d] = offset[size_t(d)], box.shape[d] = shape[size_t(d)];
  return box;
}

// Fills the ranges this rank holds, for kinds -1 (parameters) up to last_kind, from whatever
// slices overlap them: the part a saved (box, range) shares with this rank's (piece, range), so
// a checkpoint saved at one (tp, dp) layout or ZeRO stage loads into any other.
void load_ranges(const RunStateView& view, const nlohmann::json& manifest, const std::string& where, int32_t last_kind,
                 const CheckpointFiles& files) {
  std::map<std::pair<std::string, std::string>, std::vector<nlohmann::json>> slices;
  for (const auto& slice : manifest.at("slices"))
    slices[{slice.at("tensor").get<std::string>(), slice.at("kind").get<std::string>()}].push_back(slice);
  auto file = [&](const std::string& name) -> const SafetensorsFile& { return files.open(name); };
  const bool whole_slices = manifest.at("format_version").get<int64_t>() < 2;

  const keel_model_info& info = view.model;
  for (size_t i = 0; i < info.n_params; ++i) {
    const std::string name = info.params[i].name;
    const keel_support::PieceBox piece = keel_support::PieceBox::of_spec(info.params[i]);
    for (int32_t kind = -1; kind <= last_kind; ++kind) {
      const std::string kind_name = kind < 0 ? "param" : "state" + std::to_string(kind);
      const auto [want_begin, want_end] = view.strategy.owned_range(kind, i);
      if (want_end <= want_begin) continue;
      auto found = slices.find({name, kind_name});
      if (found == slices.end())
        throw KeelError(KEEL_ERR_IO, where + ": no " + kind_name + " slices for parameter \"" + name + "\"");
      std::vector<float> values(static_cast<size_t>(want_end - want_begin));
      int64_t covered = 0;
      std::vector<float> saved;
      for (const auto& slice : found->second) {
        // In range and tiling the tensor exactly (check_manifest_structure), and its key holding
        // exactly end - begin finite values (CheckpointFiles, as the file is opened).
        const int64_t begin = slice.at("begin").get<int64_t>(), end = slice.at("end").get<int64_t>();
        const keel_support::PieceBox box = slice_box(slice, info.params[i], whole_slices);
        if (keel_support::same_box(box, piece)) {  // the common case: one memcpy-sized read
          const int64_t from = std::max(begin, want_begin), to = std::min(end, want_end);
          if (to <= from) continue;
          file(slice.at("file").get<std::string>()).read_f32(slice.at("key").get<std::string>(), from - begin, to - from,
                                                              values.data() + (from - want_begin));
          covered += to - from;
          continue;
        }
        if (!keel_support::boxes_meet(box, piece)) continue;
        saved.resize(size_t(end - begin));
        file(slice.at("file").get<std::string>()).read_f32(slice.at("key").get<std::string>(), 0, end - begin, saved.data());
        covered += keel_support::copy_overlap(box, begin, end, saved.data(), piece, want_begin, want_end, values.data());
      }
      if (covered != want_end - want_begin)
        throw KeelError(KEEL_ERR_IO, where + ": the " + kind_name + " slices of \"" + name + "\" cover " +
                                         std::to_string(covered) + " of the " + std::to_string(want_end - want_begin) +
                                         " elements this rank needs");
      view.strategy.write_range(kind, i, want_begin, values);
    }
  }
}

}  // namespace

SavedPosition load_checkpoint(const RunStateView& view, const std::string& checkpoint_dir) {
  const nlohmann::json manifest = read_verified_manifest(checkpoint_dir);
  const std::string where = (fs::path(checkpoint_dir) / "manifest.json").string();
  // The model must be the same network; everything else (steps, lr, data, strategy) may change.
  check_same_model(view, manifest, checkpoint_dir, where);
  const int32_t saved_slots = manifest.at("optimizer").at("n_state_slots").get<int32_t>();
  const int32_t slots = view.state_slots;
  // Each optimizer gives its state slots its own meaning (adamw's m and v, adafactor's row and
  // column statistics): another optimizer's state would be read as its own.
  const std::string saved_optimizer = manifest.at("optimizer").at("plugin").get<std::string>();
  if (saved_optimizer != view.config.optimizer.plugin)
    throw KeelError(KEEL_ERR_INVALID_CONFIG, "cannot resume from " + checkpoint_dir + ": its optimizer state was kept by '" +
                                                 saved_optimizer + "', and this run's " +
                                                 view.config.optimizer.json_path + ".plugin is '" +
                                                 view.config.optimizer.plugin + "' (expected '" + saved_optimizer +
                                                 "'; to start from its weights alone, keel export it and set "
                                                 "model.init_from to the export)");
  if (saved_slots != slots)
    throw KeelError(KEEL_ERR_INVALID_CONFIG, "cannot resume from " + checkpoint_dir + ": its optimizer '" +
                                                 manifest.at("optimizer").at("plugin").get<std::string>() + "' kept " +
                                                 std::to_string(saved_slots) + " state slots, this run's '" +
                                                 view.config.optimizer.plugin + "' keeps " + std::to_string(slots));
  const CheckpointFiles files(manifest, checkpoint_dir);
  load_ranges(view, manifest, where, slots - 1, files);
  const auto open = [&](const std::string& name) -> const SafetensorsFile& { return files.open(name); };
  const bool same_ranks = restore_strategy_own_state(view, manifest, where, open);
  restore_model_own_state(view, manifest, where, open);
  const nlohmann::json& mesh = manifest.at("mesh");  // an object (manifest_check); its fields as saved
  const auto saved_is = [&](const char* key, int64_t value) { return mesh.value(key, nlohmann::json()) == nlohmann::json(value); };
  SavedPosition position;
  position.where = where;
  position.step = manifest.at("step").get<int64_t>();
  position.tokens_seen = manifest.at("tokens_seen").get<int64_t>();
  position.data_state = manifest.at("data_state");
  position.replica_positions = manifest.value("replica_positions", nlohmann::json());
  position.same_ranks = same_ranks;
  position.data_positions = manifest.value("data_positions", nlohmann::json());
  position.same_layout = saved_is("dp", view.mesh.layout().dp) && saved_is("tp", view.config.tp) &&
                         saved_is("pp", view.config.pp) && saved_is("world_size", view.mesh.world.size) &&
                         mesh.value("ep", nlohmann::json(1)) == nlohmann::json(view.mesh.layout().ep);  // ep: 0.19
  position.statistics = manifest.value("statistics", nlohmann::json());
  return position;
}

int64_t load_checkpoint_parameters(const RunStateView& view, const std::string& checkpoint_dir) {
  const nlohmann::json manifest = read_verified_manifest(checkpoint_dir);
  const std::string where = (fs::path(checkpoint_dir) / "manifest.json").string();
  check_same_model(view, manifest, checkpoint_dir, where);
  load_ranges(view, manifest, where, -1, CheckpointFiles(manifest, checkpoint_dir));
  return manifest.at("step").get<int64_t>();
}

}  // namespace keel
