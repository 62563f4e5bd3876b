// Saving: every slice this rank owns (on one rank, each whole tensor; a tensor every rank holds
// whole is written by rank 0 only) into one safetensors file per rank; rank 0 writes a manifest
// describing the run, the mesh, every parameter and every slice, and each file's size and
// CRC-32C. The folder is built under .tmp-*, fsync'ed, renamed into place, and only then does
// `latest` move: a crash at any moment leaves the previous checkpoint intact.
// A save has two halves (checkpoint.h): the snapshot, on the training thread, and the writing,
// which an asynchronous save runs on a thread of its own over a communicator of its own.
#include <unistd.h>

#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>

#include <keel/version.h>

#include "checkpoint/checkpoint.h"
#include "checkpoint/checkpoint_paths.h"
#include "checkpoint/model_own_state.h"
#include "checkpoint/strategy_own_state.h"
#include "host/errors.h"
#include "mesh/topology.h"
#include "io/crc32c.h"
#include "io/durable_files.h"
#include "io/safetensors.h"
#include "mesh/collectives.h"
#include "train/run_state_view.h"

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

void require_finite(const float* values, size_t count, const std::string& what, int64_t step) {
  for (size_t i = 0; i < count; ++i)
    if (!std::isfinite(values[i]))
      throw KeelError(KEEL_ERR_NONFINITE, "checkpoint at step " + std::to_string(step) + " refused: " + what +
                                              " holds a non-finite value at element " + std::to_string(i) +
                                              "; the previous checkpoint is kept");
}

// What this rank writes: its file's entries (read from the strategy as the file is written) and
// the manifest records of its parameters and slices. `nonfinite` receives the first refusal
// found while the values are read.
struct RankPart {
  std::vector<std::vector<float>> buffers;  // the own arrays' values, alive until the file is written
  std::vector<SafetensorsEntry> entries;
  // For each entry read from the strategy (data NULL): fills the entry's floats and checks them.
  std::vector<std::pair<size_t, std::function<void(float*)>>> readers;
  nlohmann::json params = nlohmann::json::array(), slices = nlohmann::json::array(), own_state, model_state;
  std::string nonfinite;
};

std::string flag_key(const keel_param_spec& spec, int32_t kind) { return std::string(spec.name) + "#" + std::to_string(kind); }

int64_t local_numel(const keel_param_spec& spec) {
  int64_t n = 1;
  for (int32_t d = 0; d < spec.ndim; ++d) n *= spec.local_shape[d];
  return n;
}

// A tensor (or state slot) is replicated when every rank that holds it holds it whole (a ZeRO-3
// shard may hold a small tensor whole on one rank only; under pipeline parallelism each stage
// holds its own tensors): one gather of per-(tensor, kind) flags, keyed by name, decides it.
std::map<std::string, bool> replicated_tensors(const RunStateView& view) {
  const keel_model_info& info = view.model;
  nlohmann::json whole_here = nlohmann::json::object();
  for (size_t i = 0; i < info.n_params; ++i)
    for (int32_t kind = -1; kind < view.state_slots; ++kind) {
      const auto [begin, end] = view.strategy.owned_range(kind, i);
      whole_here[flag_key(info.params[i], kind)] = begin == 0 && end == local_numel(info.params[i]);
    }
  std::map<std::string, bool> replicated;
  for (const std::string& text : gather_strings(view.mesh.world, whole_here.dump())) {
    const nlohmann::json flags = nlohmann::json::parse(text);  // outlives the loop over its items
    for (const auto& [key, whole] : flags.items())
      replicated[key] = replicated.count(key) ? replicated[key] && whole.get<bool>() : whole.get<bool>();
  }
  return replicated;
}

// Of the data-parallel ranks holding a tensor whole, the first: dp rank 0, or for an expert's
// tensor (params.h KEEL_PARAM_EXPERT), held by its expert-data-parallel group, the first ep block.
bool first_whole_holder(const keel_param_spec& spec, const MeshLayout& layout, const MeshPosition& at) {
  return spec.flags & KEEL_PARAM_EXPERT ? layout.expert_dp_rank(at) == 0 : at.dp == 0;
}

// The ranges this rank owns of its pieces (boxes of the tensors). A piece every rank holding it
// has whole is written by the first data-parallel rank holding it alone, a tensor replicated over tensor-parallel
// ranks by tp rank 0 alone, a pipeline stage's copy of a tied tensor (STAGE_COPY) not at
// all, and with the dp group's levels (parallel.dp_groups: the groups are replicas of each
// other, strategy.h) by the first group's ranks alone, so each element is saved once.
void collect_slices(const RunStateView& view, const std::string& rank_file, int64_t step, RankPart& part) {
  const keel_model_info& info = view.model;
  const std::map<std::string, bool> replicated = replicated_tensors(view);
  const MeshPosition& at = view.mesh.position();
  part.buffers.reserve(info.n_params * size_t(1 + view.state_slots));
  for (size_t i = 0; i < info.n_params; ++i) {
    const keel_param_spec& spec = info.params[i];
    if (spec.flags & KEEL_PARAM_STAGE_COPY) continue;  // the first stage saves the tied tensor
    part.params.push_back({{"name", spec.name},
                           {"shape", std::vector<int64_t>(spec.global_shape, spec.global_shape + spec.ndim)},
                           {"dtype", "F32"}, {"layer", spec.layer}});
    if (spec.flags & KEEL_PARAM_FROZEN) part.params.back()["frozen"] = true;  // no state slices
    for (int32_t kind = -1; kind < view.state_slots; ++kind) {
      const auto [begin, end] = view.strategy.owned_range(kind, i);
      if (end <= begin || (replicated.at(flag_key(spec, kind)) && !first_whole_holder(spec, view.mesh.layout(), at)) ||
          (spec.tp_dim < 0 && at.tp != 0) || view.mesh.strategy_dp_outer.rank != 0)
        continue;
      const std::string kind_name = kind < 0 ? "param" : "state" + std::to_string(kind);
      const std::string key = kind_name + "/" + spec.name + "/" + std::to_string(begin);
      // Read as the file is written, one range at a time (or all at once into a snapshot's
      // arena), and checked on the way.
      auto read_into = [&strategy = view.strategy, &nonfinite = part.nonfinite, kind, i, begin = begin, end = end,
                        what = kind_name + " of " + spec.name, step](float* out) {
        strategy.read_range_into(kind, i, begin, end, out);
        try {
          require_finite(out, size_t(end - begin), what, step);
        } catch (const KeelError& e) {
          if (nonfinite.empty()) nonfinite = e.what();
        }
      };
      auto produce = [read_into, count = size_t(end - begin)] {
        std::vector<float> values(count);
        read_into(values.data());
        return values;
      };
      part.readers.emplace_back(part.entries.size(), read_into);
      part.entries.push_back({key, "F32", {end - begin}, nullptr, size_t(end - begin) * sizeof(float), produce});
      part.slices.push_back({{"tensor", spec.name}, {"kind", kind_name},
                             {"offset", std::vector<int64_t>(spec.local_offset, spec.local_offset + spec.ndim)},
                             {"shape", std::vector<int64_t>(spec.local_shape, spec.local_shape + spec.ndim)},
                             {"begin", begin}, {"end", end}, {"file", rank_file}, {"key", key}});
    }
  }
  part.own_state = collect_strategy_own_state(view, rank_file, part.buffers, part.entries);
  part.model_state = collect_model_own_state(view, rank_file, part.buffers, part.entries);
}

// One temporary folder for all ranks, named after rank 0's process (`run_id`), made by rank 0
// before any rank writes into it.
std::string make_temporary_folder(const CommGroup& world, const std::string& root, const std::string& name,
                                  long run_id) {
  const std::string temporary = (fs::path(root) / (".tmp-" + name + "-" + std::to_string(run_id))).string();
  std::error_code error;
  if (world.rank == 0) {
    fs::create_directories(root, error);
    if (error) throw KeelError(KEEL_ERR_IO, root + ": cannot create the checkpoint folder: " + error.message());
    fs::remove_all(temporary, error);
    fs::create_directories(temporary, error);
    if (error) throw KeelError(KEEL_ERR_IO, temporary + ": cannot create: " + error.message());
  }
  barrier(world);
  return temporary;
}

// Writes this rank's file; the values were checked as they were written. Every rank then learns
// whether any rank found non-finite values or could not write (a full disk, a failed read), and
// then every rank throws and the temporary folder goes, so nothing is left on disk and no rank
// waits in the gather for one that gave up. Returns this rank's manifest part.
nlohmann::json write_rank_file(const CommGroup& world, const std::string& temporary, const std::string& rank_file,
                               int64_t step, RankPart& part) {
  const std::string path = (fs::path(temporary) / rank_file).string();
  std::string write_failure;
  nlohmann::json file;
  try {
    write_safetensors(path, part.entries);
    uint64_t bytes = 0;
    const uint32_t crc = file_crc32c(path, &bytes);
    file = {{"name", rank_file}, {"bytes", bytes}, {"crc32c", crc32c_hex(crc)}};
  } catch (const std::exception& e) {
    write_failure = "checkpoint at step " + std::to_string(step) + ": rank " + std::to_string(world.rank) +
                    " could not write " + path + ": " + e.what() + "; the previous checkpoint is kept";
  }
  const bool failed_here = !write_failure.empty() || !part.nonfinite.empty();
  if (sum_in_rank_order(world, failed_here ? 1.0 : 0.0) > 0) {
    barrier(world);
    std::error_code error;
    if (world.rank == 0) fs::remove_all(temporary, error);
    if (!write_failure.empty()) throw KeelError(KEEL_ERR_IO, write_failure);
    if (!part.nonfinite.empty()) throw KeelError(KEEL_ERR_NONFINITE, part.nonfinite);
    throw KeelError(KEEL_ERR_IO, "checkpoint at step " + std::to_string(step) + " abandoned: another rank holds "
                                 "non-finite values or could not write its file (its message says which); the "
                                 "previous checkpoint is kept");
  }
  return {{"file", file}, {"params", part.params}, {"slices", part.slices}, {"own_state", part.own_state},
          {"model_state", part.model_state}};
}

// What the manifest says of the run, taken with the snapshot: the run, the mesh, the position.
nlohmann::json manifest_header(const RunStateView& view, const RunPosition& position) {
  const RunConfig& config = view.config;
  return {{"format", "keel-checkpoint"},
          {"format_version", kCheckpointFormatVersion},
          {"keel_abi", std::to_string(KEEL_ABI_VERSION_MAJOR) + "." + std::to_string(KEEL_ABI_VERSION_MINOR)},
          {"step", position.step},
          {"tokens_seen", position.tokens_seen},
          {"data_state", position.data_state},
          {"statistics", position.statistics},
          {"rng", {{"seed", config.train.seed}, {"note", "sampling order is a pure function of seed and data_state"}}},
          {"mesh", {{"dp", view.mesh.layout().dp}, {"tp", config.tp}, {"pp", config.pp},
                    {"virtual_stages", config.virtual_stages}, {"ep", view.mesh.layout().ep},
                    {"dp_groups", describe_dp_groups(config)}, {"dp_inner", view.mesh.strategy_dp_inner.size},
                    {"world_size", view.mesh.world.size}}},
          {"strategy", config.strategy.json},
          {"config", config.json},
          {"optimizer", {{"plugin", config.optimizer.plugin}, {"n_state_slots", view.state_slots}}}};
}

// The manifest from every rank's part: the header, each parameter once (each stage lists its
// own), every slice, the strategy's own arrays and every file's size and checksum.
nlohmann::json manifest_of(nlohmann::json manifest, const std::vector<std::string>& everyone) {
  nlohmann::json files = nlohmann::json::array(), all_slices = nlohmann::json::array(),
                 all_own_state = nlohmann::json::array(), all_params = nlohmann::json::array(),
                 all_model_state = nlohmann::json::array();
  std::set<std::string> listed;
  std::vector<nlohmann::json> replica_positions;
  nlohmann::json data_positions = nlohmann::json::array();  // every rank's, in world-rank order
  for (const auto& text : everyone) {
    const nlohmann::json part = nlohmann::json::parse(text);
    files.push_back(part.at("file"));
    for (const auto& param : part.at("params"))
      if (listed.insert(param.at("name").get<std::string>()).second) all_params.push_back(param);
    for (const auto& slice : part.at("slices")) all_slices.push_back(slice);
    for (const auto& record : part.at("own_state")) all_own_state.push_back(record);
    for (const auto& record : part.at("model_state")) all_model_state.push_back(record);
    if (part.contains("replica_position")) {  // one per replica (its tp ranks say the same), in dp order
      const int64_t dp_rank = part["replica_position"].at("dp_rank").get<int64_t>();
      if (dp_rank >= int64_t(replica_positions.size())) replica_positions.resize(size_t(dp_rank) + 1);
      replica_positions[size_t(dp_rank)] = part["replica_position"];
    }
    if (part.contains("data_position")) data_positions.push_back(part["data_position"].at("text"));
  }
  if (!replica_positions.empty()) manifest["replica_positions"] = replica_positions;
  if (!data_positions.empty()) {
    if (data_positions.size() != everyone.size())
      throw KeelError(KEEL_ERR_INTERNAL, "only " + std::to_string(data_positions.size()) + " of " +
                                             std::to_string(everyone.size()) + " ranks saved a data position");
    manifest["data_positions"] = data_positions;
  }
  manifest["params"] = all_params;
  manifest["slices"] = all_slices;
  manifest["strategy_own_state"] = all_own_state;
  if (!all_model_state.empty()) manifest["model_state"] = all_model_state;
  manifest["files"] = files;
  return manifest;
}

// Puts back what a failed publish moved: the new folder to `temporary` (which the caller
// removes), an earlier run's folder of the same step to its place. Returns what it could not.
std::string undo_publish(const std::string& temporary, const std::string& final_folder, const std::string& old,
                         bool replaced_old) {
  std::string left;
  std::error_code error;
  if (!fs::exists(temporary, error) && std::rename(final_folder.c_str(), temporary.c_str()) != 0)
    left += "; " + final_folder + " could not be moved back (" + std::strerror(errno) + ")";
  if (replaced_old && std::rename(old.c_str(), final_folder.c_str()) != 0)
    left += "; the earlier " + final_folder + " could not be put back from " + old + " (" + std::strerror(errno) + ")";
  return left;
}

// Rank 0 moves the finished folder into place, then `latest`, then prunes beyond `keep`. A failure
// before `latest` names the new folder (a full disk) undoes the move, so the folders and `latest`
// agree on the previous checkpoint, as the failure's message says.
void publish(const std::string& temporary, const std::string& root, const std::string& name, long run_id,
             int32_t keep) {
  const std::string final_folder = (fs::path(root) / name).string();
  fsync_path(temporary);
  // The same step saved by an earlier run (a resume that retrained it) is moved aside first and
  // removed once `latest` names the new one; `latest` keeps naming a complete folder except
  // between the two renames, and resolve_checkpoint falls back to the newest complete one if a
  // crash lands there.
  const std::string old = (fs::path(root) / (".tmp-old-" + name + "-" + std::to_string(run_id))).string();
  const bool replaced_old = fs::exists(final_folder);
  if (replaced_old) rename_durably(final_folder, old);
  try {
    rename_durably(temporary, final_folder);
    write_file_atomically((fs::path(root) / "latest").string(), name + "\n");
  } catch (const std::exception& e) {
    throw KeelError(KEEL_ERR_IO, e.what() + undo_publish(temporary, final_folder, old, replaced_old));
  }
  std::error_code error;
  if (replaced_old) fs::remove_all(old, error);
  prune_checkpoints(root, keep, final_folder);
}


}  // namespace

// Everything a save needs once the training thread has let go: this rank's part (its values
// copied, or read from the strategy as the file is written), where it goes and the manifest's header.
struct CheckpointSnapshot {
  RankPart part;  // in place: its readers refer to part.nonfinite
  int64_t step = 0;
  std::string root, name, temporary, rank_file;
  long run_id = 0;
  int32_t keep = 0;
  nlohmann::json manifest;
  nlohmann::json replica_position;  // replicas stepping on their own: this one's (run_position.h)
  std::string data_position;        // a data plugin's place on this rank, or "" (run_position.h)
};

namespace {

// `arena` NULL: the values are read as the file is written. Else they are copied into it now.
std::unique_ptr<CheckpointSnapshot> take_snapshot(const RunStateView& view, const RunPosition& position,
                                                  const std::string& root, int32_t keep, std::vector<float>* arena) {
  auto snapshot = std::make_unique<CheckpointSnapshot>();
  const CommGroup& world = view.mesh.world;
  snapshot->data_position = position.data_position;
  snapshot->step = position.step;
  char rank_file_name[32];
  std::snprintf(rank_file_name, sizeof rank_file_name, "rank%05d.safetensors", world.rank);
  snapshot->rank_file = rank_file_name;
  collect_slices(view, snapshot->rank_file, snapshot->step, snapshot->part);
  if (arena) {
    RankPart& part = snapshot->part;
    size_t total = 0;
    for (const auto& [entry, read_into] : part.readers) total += part.entries[entry].bytes / sizeof(float);
    if (arena->size() < total) arena->resize(total);  // grows once; later snapshots fault no new pages
    float* next = arena->data();
    for (const auto& [entry, read_into] : part.readers) {
      read_into(next);
      part.entries[entry].data = next;
      part.entries[entry].produce = nullptr;
      next += part.entries[entry].bytes / sizeof(float);
    }
  }
  snapshot->root = root;
  snapshot->keep = keep;
  snapshot->name = step_folder_name(snapshot->step);
  snapshot->run_id = long(broadcast_int64(world, int64_t(::getpid()), 0));
  snapshot->temporary = make_temporary_folder(world, root, snapshot->name, snapshot->run_id);
  snapshot->manifest = manifest_header(view, position);
  snapshot->replica_position = position.replica_position;
  return snapshot;
}

}  // namespace

PendingCheckpoint::PendingCheckpoint(std::unique_ptr<CheckpointSnapshot> snapshot) : snapshot(std::move(snapshot)) {}
PendingCheckpoint::PendingCheckpoint(PendingCheckpoint&&) noexcept = default;
PendingCheckpoint::~PendingCheckpoint() = default;

PendingCheckpoint snapshot_checkpoint(const RunStateView& view, const RunPosition& position, const std::string& root,
                                      int32_t keep, std::vector<float>& arena) {
  return PendingCheckpoint(take_snapshot(view, position, root, keep, &arena));
}

std::string write_checkpoint(PendingCheckpoint& pending, const CommGroup& group,
                             const std::function<void()>& files_written) {
  CheckpointSnapshot& s = *pending.snapshot;
  nlohmann::json mine = write_rank_file(group, s.temporary, s.rank_file, s.step, s.part);
  if (!s.replica_position.is_null()) mine["replica_position"] = s.replica_position;
  if (!s.data_position.empty()) mine["data_position"] = {{"rank", group.rank}, {"text", s.data_position}};
  if (files_written) files_written();
  const std::vector<std::string> everyone = gather_strings(group, mine.dump());
  std::string publish_failure;
  if (group.rank == 0) {
    try {
      write_file_atomically((fs::path(s.temporary) / "manifest.json").string(),
                            manifest_of(s.manifest, everyone).dump(1));
      publish(s.temporary, s.root, s.name, s.run_id, s.keep);
    } catch (const std::exception& e) {
      publish_failure = e.what();
      std::error_code ignored;
      fs::remove_all(s.temporary, ignored);  // the ranks' files, and the new folder a failed publish moved back
    }
  }
  // Rank 0's outcome reaches every rank (nobody goes on, or reads the checkpoint, before it is
  // complete), so a failed publish fails the save everywhere.
  if (broadcast_int64(group, publish_failure.empty() ? 0 : 1, 0) != 0)
    throw KeelError(KEEL_ERR_IO, "checkpoint at step " + std::to_string(s.step) + " not published" +
                                     (group.rank == 0 ? ": " + publish_failure : " (rank 0's message says why)") +
                                     "; the previous checkpoint is kept");
  return (fs::path(s.root) / s.name).string();
}

std::string save_checkpoint(const RunStateView& view, const RunPosition& position, const std::string& root,
                            int32_t keep) {
  // A refusal (non-finite values) on any rank must leave nothing on disk: the values are checked
  // as they are written, and write_rank_file removes the folder when any rank found one.
  PendingCheckpoint pending{take_snapshot(view, position, root, keep, nullptr)};
  return write_checkpoint(pending, view.mesh.world);
}

}  // namespace keel
