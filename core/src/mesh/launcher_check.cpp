// The launcher's world against the comm plugin's (launcher_check.h).
#include "mesh/launcher_check.h"

#include "host/errors.h"
#include "host/log.h"

namespace keel {
namespace {

// What to do instead, by launcher.
std::string advice(const keel_support::LauncherIdentity& id, const std::string& comm) {
  if (comm.empty()) return "install a comm plugin (mpi) or start one process";
  if (id.launcher == "srun")
    return "run srun with --mpi=pmix (srun --mpi=list shows what this Slurm offers)";
  return "start it with the launcher of the MPI that comm '" + comm + "' was built with";
}

}  // namespace

std::optional<keel_support::LauncherIdentity> launcher() {
  try {
    return keel_support::launcher_identity();
  } catch (const keel_support::StatusError& e) {
    throw KeelError(e.code, e.what());
  }
}

void check_launched_world(const std::optional<keel_support::LauncherIdentity>& launcher, int32_t rank, int32_t size,
                          const std::string& comm) {
  if (!launcher || launcher->world <= 1) return;
  const keel_support::LauncherIdentity& id = *launcher;
  const bool srun = id.launcher == "srun";
  const std::string task = srun ? "task" : "process";
  const std::string started =
      id.launcher + " started " + std::to_string(id.world) + (srun ? " tasks (" : " processes (") + id.world_from + ")";
  if (size != id.world) {
    const std::string joined =
        comm.empty() ? "no comm plugin is installed, so this one is" : "comm '" + comm + "' joined";
    throw KeelError(KEEL_ERR_INVALID_ARGUMENT, started + " but " + joined + " a world of " + std::to_string(size) +
                                                   ": each " + task + " would train alone and overwrite the others' "
                                                   "checkpoints; " + advice(id, comm));
  }
  if (rank != id.rank)
    throw KeelError(KEEL_ERR_INVALID_ARGUMENT, started + " and numbered this one " + std::to_string(id.rank) + " (" +
                                                   id.rank_from + "), but comm '" + comm + "' numbered it " +
                                                   std::to_string(rank) + " of " + std::to_string(size) +
                                                   ": the comm plugin's world is not the launcher's; " +
                                                   advice(id, comm));
}

void log_launcher(const std::optional<keel_support::LauncherIdentity>& launcher, int32_t rank) {
  if (rank != 0) return;
  if (launcher) {
    log_info("launched by " + keel_support::describe_launcher(*launcher));
    return;
  }
  // A batch script's SLURM_NTASKS is the job's, with no srun step around this process: one
  // process training is legitimate (sbatch -n 1), so this only warns when the job has more.
  int tasks = 0;
  try {
    tasks = keel_support::batch_script_tasks();
  } catch (const keel_support::StatusError& e) {
    throw KeelError(e.code, e.what());
  }
  if (tasks > 1)
    log_warn("this Slurm job has " + std::to_string(tasks) + " tasks (SLURM_NTASKS), but keel runs as one process in " +
             "its batch script; start it with `srun --mpi=pmix keel run ...` to train on all of them");
}

}  // namespace keel
