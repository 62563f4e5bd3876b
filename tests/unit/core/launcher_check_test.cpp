// mesh/launcher_check.h: the launcher's world against the comm plugin's. A mismatch (srun
// without --mpi=pmix: every task alone in a world of one) and a renumbered rank are refused,
// naming the launcher's variable and what to do; matching worlds and no launcher pass.
#include <gtest/gtest.h>

#include <string>

#include "host/errors.h"
#include "mesh/launcher_check.h"

namespace {

keel_support::LauncherIdentity srun(int rank, int world) {
  keel_support::LauncherIdentity id;
  id.launcher = "srun";
  id.rank = rank;
  id.world = world;
  id.rank_from = "SLURM_PROCID=" + std::to_string(rank);
  id.world_from = "SLURM_NTASKS=" + std::to_string(world);
  return id;
}

std::string refusal(const keel_support::LauncherIdentity& id, int rank, int size, const std::string& comm) {
  try {
    keel::check_launched_world(id, rank, size, comm);
  } catch (const keel::KeelError& e) {
    EXPECT_EQ(e.code, KEEL_ERR_INVALID_ARGUMENT);
    return e.what();
  }
  ADD_FAILURE() << "accepted a world of " << size << " (rank " << rank << ") under " << id.world_from;
  return "";
}

TEST(LauncherCheck, MatchingWorldsAndNoLauncherPass) {
  EXPECT_NO_THROW(keel::check_launched_world(std::nullopt, 0, 1, "mpi"));
  EXPECT_NO_THROW(keel::check_launched_world(srun(1, 2), 1, 2, "mpi"));
  EXPECT_NO_THROW(keel::check_launched_world(srun(0, 1), 0, 1, "mpi"));
  EXPECT_NO_THROW(keel::check_launched_world(srun(0, 1), 0, 1, ""));
  keel_support::LauncherIdentity pmix;  // the world unstated: nothing to compare
  pmix.launcher = "PMIx";
  pmix.rank = 3;
  EXPECT_NO_THROW(keel::check_launched_world(pmix, 0, 1, "mpi"));
}

TEST(LauncherCheck, SrunWithoutMpiIsRefused) {
  EXPECT_EQ(refusal(srun(1, 2), 0, 1, "mpi"),
            "srun started 2 tasks (SLURM_NTASKS=2) but comm 'mpi' joined a world of 1: each task would train alone "
            "and overwrite the others' checkpoints; run srun with --mpi=pmix (srun --mpi=list shows what this Slurm "
            "offers)");
}

TEST(LauncherCheck, OtherLaunchersAndNoCommPlugin) {
  keel_support::LauncherIdentity ompi;
  ompi.launcher = "mpirun (OpenMPI)";
  ompi.rank = 0;
  ompi.world = 4;
  ompi.rank_from = "OMPI_COMM_WORLD_RANK=0";
  ompi.world_from = "OMPI_COMM_WORLD_SIZE=4";
  EXPECT_EQ(refusal(ompi, 0, 2, "mpi"),
            "mpirun (OpenMPI) started 4 processes (OMPI_COMM_WORLD_SIZE=4) but comm 'mpi' joined a world of 2: each "
            "process would train alone and overwrite the others' checkpoints; start it with the launcher of the MPI "
            "that comm 'mpi' was built with");
  const std::string none = refusal(srun(0, 3), 0, 1, "");
  EXPECT_NE(none.find("srun started 3 tasks (SLURM_NTASKS=3) but no comm plugin is installed"), std::string::npos) << none;
  EXPECT_NE(none.find("install a comm plugin"), std::string::npos) << none;
}

TEST(LauncherCheck, RenumberedRankIsRefused) {
  const std::string message = refusal(srun(1, 2), 0, 2, "mpi");
  EXPECT_NE(message.find("numbered this one 1 (SLURM_PROCID=1), but comm 'mpi' numbered it 0 of 2"), std::string::npos)
      << message;
}

}  // namespace
