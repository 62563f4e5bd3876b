// Checkpoints (docs/architecture.md §6): a directory per save, written under a temporary name, fsync'ed and
// renamed into place; a `latest` pointer replaced atomically; the last N kept. Each rank writes
// the pieces it owns as (tensor, box, flat range in the box) slices, so a checkpoint loads into any layout; on
// one rank every slice is whole. Optimizer state is stored the same way.
#pragma once

#include <nlohmann/json.hpp>

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "config/run_config.h"
#include "train/run_position.h"

namespace keel {

struct RunStateView;
struct CommGroup;

// 2 (ABI 0.6): a slice is a flat range of a box (offset + shape) of its tensor. 1: of the whole
// tensor; still read, so checkpoints from before tensor parallelism keep loading.
constexpr int kCheckpointFormatVersion = 2;
constexpr int kOldestCheckpointFormatVersion = 1;

// Saves the run's state as <root>/step-NNNNNNNN and points <root>/latest at it; deletes the
// oldest complete checkpoints beyond `keep`, with `position` (the trainer's, taken just before) in the
// manifest. Returns the new checkpoint's folder. Refuses (throws KeelError, KEEL_ERR_NONFINITE)
// when a parameter or state value is not finite.
std::string save_checkpoint(const RunStateView& view, const RunPosition& position, const std::string& root,
                            int32_t keep);

// The same save in two halves, for asynchronous checkpoints (session/async_checkpoint.h).
// snapshot_checkpoint runs on the training thread, collective over view.mesh.world: it copies
// this rank's parameters and optimizer state to host memory, into `arena` (grown as needed; kept
// by the caller across saves, so later snapshots touch no new pages; it must outlive the write),
// and makes the temporary folder, so training may change the state as soon as it returns. write_checkpoint may run on another
// thread, collective over `group` (the same ranks as the world, on a communicator no other
// thread uses): it writes, fsyncs, gathers the manifest and publishes as save_checkpoint does.
// Returns the new checkpoint's folder; throws as save_checkpoint does, nothing published then.
struct CheckpointSnapshot;  // checkpoint_save.cpp's
struct PendingCheckpoint {
  explicit PendingCheckpoint(std::unique_ptr<CheckpointSnapshot> snapshot);
  PendingCheckpoint(PendingCheckpoint&&) noexcept;
  ~PendingCheckpoint();
  std::unique_ptr<CheckpointSnapshot> snapshot;
};
PendingCheckpoint snapshot_checkpoint(const RunStateView& view, const RunPosition& position, const std::string& root,
                                      int32_t keep, std::vector<float>& arena);
// `files_written`, when given, runs after this rank's file is written and fsync'ed and before the
// manifest is gathered: the window the fault tests kill a rank in.
std::string write_checkpoint(PendingCheckpoint& pending, const CommGroup& group,
                             const std::function<void()>& files_written = {});

// A checkpoint folder from what the user wrote: a step folder (it has manifest.json), or a root
// folder whose `latest` names one; when `latest` is missing or names no complete checkpoint, the
// newest step folder, unless the root holds a step-* symlink (refused, named). Throws KeelError
// naming the path when none of these.
std::string resolve_checkpoint(const std::string& path);

// The manifest, after checking its format version, its whole structure (checkpoint/
// manifest_check.h) and every listed file's size and checksum; only regular files (no FIFOs,
// devices or symlinks) directly inside the folder are ever opened.
nlohmann::json read_verified_manifest(const std::string& checkpoint_dir);

// Every check a resume makes short of comparing with a model: the verified manifest, then each
// listed file opened through CheckpointFiles (checkpoint_files.h: safetensors structure, every
// slice's key, dtype, size and finite values). `keel inspect` runs this. Returns the manifest.
nlohmann::json verify_checkpoint(const std::string& checkpoint_dir);

// The run config stored in a checkpoint (with the saved overrides applied), less its
// plugin_path: a checkpoint never chooses which libraries get loaded.
RunConfig config_from_checkpoint(const std::string& checkpoint_dir);

// Loads parameters, optimizer state and the strategy's own arrays into a run built from a
// compatible config, and returns the checkpoint's position (step, tokens seen, data position,
// statistics) for the trainer to apply (Trainer::resume_at). Refuses a model config that differs,
// naming the key, and any file that fails the checks of verify_checkpoint as it is opened.
SavedPosition load_checkpoint(const RunStateView& view, const std::string& checkpoint_dir);

// Loads the parameters alone (no optimizer state, no step or data position), for export.
// Returns the checkpoint's step.
int64_t load_checkpoint_parameters(const RunStateView& view, const std::string& checkpoint_dir);

}  // namespace keel
