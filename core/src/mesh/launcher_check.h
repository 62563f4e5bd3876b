// The world a launcher (mpirun, srun, hydra) started against the world the comm plugin joined.
// `srun -n 2 keel run` without --mpi=pmix starts two processes that each find no PMI, so the mpi
// plugin gives each a world of one: both would train alone, on the same samples, and overwrite
// each other's checkpoints. Nothing else in a run notices, so the core compares the two right after
// the world exists and refuses a mismatch, saying how to launch instead.
#pragma once

#include <keel_support/common/launcher_env.hpp>

#include <cstdint>
#include <optional>
#include <string>

namespace keel {

// keel_support::launcher_identity(), its refusals of malformed variables as KeelError
// (KEEL_ERR_INVALID_ARGUMENT).
std::optional<keel_support::LauncherIdentity> launcher();

// Throws KeelError (KEEL_ERR_INVALID_ARGUMENT) when `launcher` started more than one process and
// the comm plugin `comm` (its name; "" when no comm plugin is installed) joined a world of
// another size, or numbered this process otherwise than the launcher did.
void check_launched_world(const std::optional<keel_support::LauncherIdentity>& launcher, int32_t rank, int32_t size,
                          const std::string& comm);

// Rank 0's start-up line naming the launcher (info); or, in a Slurm job's batch script where
// the job has several tasks but no srun started this process, a warning that it runs as one.
void log_launcher(const std::optional<keel_support::LauncherIdentity>& launcher, int32_t rank);

}  // namespace keel
