// keel_support/common/launcher_env.hpp against environments as each launcher sets them (copied from
// what OpenMPI's mpirun, srun with and without --mpi=pmix, an sbatch script and MPICH's hydra
// export), and against malformed values, each of which must be refused naming the variable.
#include <gtest/gtest.h>
#include <keel_support/common/launcher_env.hpp>

#include <cstdlib>
#include <map>
#include <string>

namespace {

using keel_support::launcher_identity;
using keel_support::StatusError;

const char* const kAll[] = {"OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK",
                            "OMPI_COMM_WORLD_LOCAL_SIZE", "SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID",
                            "SLURM_TASKS_PER_NODE", "SLURM_NTASKS_PER_NODE", "SLURM_NODEID", "SLURM_STEP_ID",
                            "SLURM_STEPID", "SLURM_JOB_ID", "PMIX_RANK", "PMI_RANK", "PMI_SIZE", "MPI_LOCALRANKID",
                            "MPI_LOCALNRANKS"};

// Each test starts from an environment with none of the launchers' variables (ctest itself may
// run under a launcher) and puts back what was there.
class LauncherEnv : public ::testing::Test {
 protected:
  void SetUp() override {
    for (const char* name : kAll) {
      if (const char* value = std::getenv(name)) saved_[name] = value;
      unsetenv(name);
    }
  }
  void TearDown() override {
    for (const char* name : kAll) unsetenv(name);
    for (const auto& [name, value] : saved_) setenv(name.c_str(), value.c_str(), 1);
  }
  static void set(std::map<std::string, std::string> vars) {
    for (const auto& [name, value] : vars) setenv(name.c_str(), value.c_str(), 1);
  }
  // The message of the refusal launcher_identity() must make.
  static std::string refusal() {
    try {
      launcher_identity();
    } catch (const StatusError& e) {
      EXPECT_EQ(e.code, KEEL_ERR_INVALID_ARGUMENT);
      return e.what();
    }
    ADD_FAILURE() << "launcher_identity() accepted the environment";
    return "";
  }
  // srun's variables for task `rank` of `world` (one node), as srun --mpi=pmix sets them.
  static void srun_task(int rank, int world) {
    set({{"SLURM_STEP_ID", "0"}, {"SLURM_PROCID", std::to_string(rank)}, {"SLURM_NTASKS", std::to_string(world)},
         {"SLURM_LOCALID", std::to_string(rank)}, {"SLURM_TASKS_PER_NODE", std::to_string(world)},
         {"SLURM_NODEID", "0"}, {"SLURM_JOB_ID", "7"}, {"PMIX_RANK", std::to_string(rank)}});
  }

 private:
  std::map<std::string, std::string> saved_;
};

TEST_F(LauncherEnv, NoLauncherIsNone) { EXPECT_FALSE(launcher_identity().has_value()); }

TEST_F(LauncherEnv, OpenMpi) {
  set({{"OMPI_COMM_WORLD_RANK", "5"}, {"OMPI_COMM_WORLD_SIZE", "8"}, {"OMPI_COMM_WORLD_LOCAL_RANK", "1"},
       {"OMPI_COMM_WORLD_LOCAL_SIZE", "4"}});
  const auto id = launcher_identity();
  ASSERT_TRUE(id);
  EXPECT_EQ(id->launcher, "mpirun (OpenMPI)");
  EXPECT_EQ(id->rank, 5);
  EXPECT_EQ(id->world, 8);
  EXPECT_EQ(id->local_rank, 1);
  EXPECT_EQ(id->local_world, 4);
  EXPECT_EQ(id->world_from, "OMPI_COMM_WORLD_SIZE=8");
  EXPECT_EQ(keel_support::describe_launcher(*id),
            "mpirun (OpenMPI): rank 5 of 8 (OMPI_COMM_WORLD_RANK=5, OMPI_COMM_WORLD_SIZE=8), local rank 1 of 4");
}

TEST_F(LauncherEnv, OpenMpiComesBeforeSlurm) {  // mpirun inside an srun step or allocation
  srun_task(0, 1);
  set({{"OMPI_COMM_WORLD_RANK", "3"}, {"OMPI_COMM_WORLD_SIZE", "4"}});
  const auto id = launcher_identity();
  ASSERT_TRUE(id);
  EXPECT_EQ(id->launcher, "mpirun (OpenMPI)");
  EXPECT_EQ(id->rank, 3);
  EXPECT_EQ(id->world, 4);
  EXPECT_EQ(id->local_rank, -1);  // not said
  EXPECT_EQ(id->local_world, -1);
}

TEST_F(LauncherEnv, SrunStep) {
  srun_task(1, 2);
  const auto id = launcher_identity();
  ASSERT_TRUE(id);
  EXPECT_EQ(id->launcher, "srun");
  EXPECT_EQ(id->rank, 1);
  EXPECT_EQ(id->world, 2);
  EXPECT_EQ(id->local_rank, 1);
  EXPECT_EQ(id->local_world, 2);
  EXPECT_EQ(id->rank_from, "SLURM_PROCID=1");
  EXPECT_EQ(id->world_from, "SLURM_NTASKS=2");
}

TEST_F(LauncherEnv, SrunAcrossNodes) {  // 10 tasks as 4, 4, 2: the third node has 2
  set({{"SLURM_STEP_ID", "3"}, {"SLURM_PROCID", "9"}, {"SLURM_NTASKS", "10"}, {"SLURM_LOCALID", "1"},
       {"SLURM_TASKS_PER_NODE", "4(x2),2"}, {"SLURM_NODEID", "2"}});
  auto id = launcher_identity();
  ASSERT_TRUE(id);
  EXPECT_EQ(id->rank, 9);
  EXPECT_EQ(id->local_rank, 1);
  EXPECT_EQ(id->local_world, 2);
  setenv("SLURM_NODEID", "0", 1);
  setenv("SLURM_LOCALID", "3", 1);
  EXPECT_EQ(launcher_identity()->local_world, 4);
  unsetenv("SLURM_NODEID");  // uneven and which node unknown: not said
  EXPECT_EQ(launcher_identity()->local_world, -1);
  setenv("SLURM_TASKS_PER_NODE", "5(x2)", 1);  // even: no node id needed
  EXPECT_EQ(launcher_identity()->local_world, 5);
  unsetenv("SLURM_TASKS_PER_NODE");
  setenv("SLURM_NTASKS_PER_NODE", "5", 1);
  EXPECT_EQ(launcher_identity()->local_world, 5);
}

// The batch script (and an salloc shell) carries the job's task count and SLURM_PROCID=0 but no
// step: one process, no launcher; batch_script_tasks() reports the job's tasks.
TEST_F(LauncherEnv, SbatchScriptIsNoLauncher) {
  set({{"SLURM_JOB_ID", "7"}, {"SLURM_PROCID", "0"}, {"SLURM_NTASKS", "2"}, {"SLURM_LOCALID", "0"},
       {"SLURM_TASKS_PER_NODE", "2"}});
  EXPECT_FALSE(launcher_identity().has_value());
  EXPECT_EQ(keel_support::batch_script_tasks(), 2);
  setenv("SLURM_STEP_ID", "4294967291", 1);  // SLURM_BATCH_SCRIPT, should a Slurm export it
  EXPECT_FALSE(launcher_identity().has_value());
  EXPECT_EQ(keel_support::batch_script_tasks(), 2);
  setenv("SLURM_STEP_ID", "0", 1);  // an srun step: a launcher, and no batch script
  EXPECT_TRUE(launcher_identity().has_value());
  EXPECT_EQ(keel_support::batch_script_tasks(), 0);
}

TEST_F(LauncherEnv, PmixWithoutSlurmStep) {
  set({{"PMIX_RANK", "3"}});
  auto id = launcher_identity();
  ASSERT_TRUE(id);
  EXPECT_EQ(id->launcher, "PMIx");
  EXPECT_EQ(id->rank, 3);
  EXPECT_EQ(id->world, -1);  // PMIx keeps it in its server
  EXPECT_EQ(keel_support::describe_launcher(*id), "PMIx: rank 3 of an unstated world (PMIX_RANK=3)");
}

TEST_F(LauncherEnv, PmixTakesSlurmSizesInAStep) {  // a step whose SLURM_PROCID is missing
  set({{"PMIX_RANK", "1"}, {"SLURM_STEP_ID", "0"}, {"SLURM_NTASKS", "4"}, {"SLURM_LOCALID", "1"},
       {"SLURM_TASKS_PER_NODE", "2(x2)"}});
  const auto id = launcher_identity();
  ASSERT_TRUE(id);
  EXPECT_EQ(id->launcher, "PMIx");
  EXPECT_EQ(id->world, 4);
  EXPECT_EQ(id->local_rank, 1);
  EXPECT_EQ(id->local_world, 2);
}

TEST_F(LauncherEnv, MpichHydra) {
  set({{"PMI_RANK", "2"}, {"PMI_SIZE", "3"}, {"MPI_LOCALRANKID", "0"}, {"MPI_LOCALNRANKS", "1"}});
  const auto id = launcher_identity();
  ASSERT_TRUE(id);
  EXPECT_EQ(id->launcher, "mpiexec (MPICH hydra)");
  EXPECT_EQ(id->rank, 2);
  EXPECT_EQ(id->world, 3);
  EXPECT_EQ(id->local_rank, 0);
  EXPECT_EQ(id->local_world, 1);
}

TEST_F(LauncherEnv, RefusesGarbageNamingTheVariable) {
  struct Case {
    std::map<std::string, std::string> vars;
    std::string message;
  };
  const Case cases[] = {
      {{{"OMPI_COMM_WORLD_RANK", "0"}, {"OMPI_COMM_WORLD_SIZE", "two"}}, "OMPI_COMM_WORLD_SIZE='two' is not a whole number from 1 to 16777216"},
      {{{"OMPI_COMM_WORLD_RANK", "0"}, {"OMPI_COMM_WORLD_SIZE", "0"}}, "OMPI_COMM_WORLD_SIZE='0' is not a whole number from 1"},
      {{{"OMPI_COMM_WORLD_RANK", "4"}, {"OMPI_COMM_WORLD_SIZE", "4"}}, "OMPI_COMM_WORLD_RANK='4' is not a whole number from 0 to 3"},
      {{{"OMPI_COMM_WORLD_RANK", "-1"}, {"OMPI_COMM_WORLD_SIZE", "4"}}, "OMPI_COMM_WORLD_RANK='-1'"},
      {{{"OMPI_COMM_WORLD_RANK", " 1"}, {"OMPI_COMM_WORLD_SIZE", "4"}}, "OMPI_COMM_WORLD_RANK=' 1'"},
      {{{"OMPI_COMM_WORLD_RANK", "1"}, {"OMPI_COMM_WORLD_SIZE", "99999999999999999999"}}, "OMPI_COMM_WORLD_SIZE='99999999999999999999'"},
      {{{"OMPI_COMM_WORLD_RANK", "1"}, {"OMPI_COMM_WORLD_SIZE", "16777217"}}, "OMPI_COMM_WORLD_SIZE='16777217'"},
      {{{"OMPI_COMM_WORLD_RANK", "1"}}, "OpenMPI set OMPI_COMM_WORLD_RANK=1 but not OMPI_COMM_WORLD_SIZE"},
      {{{"OMPI_COMM_WORLD_SIZE", "2"}}, "set OMPI_COMM_WORLD_SIZE=2 but not OMPI_COMM_WORLD_RANK"},
      {{{"OMPI_COMM_WORLD_RANK", "1"}, {"OMPI_COMM_WORLD_SIZE", "4"}, {"OMPI_COMM_WORLD_LOCAL_RANK", "2"},
        {"OMPI_COMM_WORLD_LOCAL_SIZE", "2"}}, "OMPI_COMM_WORLD_LOCAL_RANK=2 is not below this node's 2 processes"},
      {{{"OMPI_COMM_WORLD_RANK", "1"}, {"OMPI_COMM_WORLD_SIZE", "4"}, {"OMPI_COMM_WORLD_LOCAL_SIZE", "5"}},
       "OMPI_COMM_WORLD_LOCAL_SIZE 5 exceeds the world of 4"},
      {{{"SLURM_STEP_ID", "0"}, {"SLURM_PROCID", "2"}, {"SLURM_NTASKS", "2"}}, "SLURM_PROCID='2' is not a whole number from 0 to 1"},
      {{{"SLURM_STEP_ID", "0"}, {"SLURM_PROCID", "0"}}, "srun set SLURM_PROCID=0 but not SLURM_NTASKS"},
      {{{"SLURM_STEP_ID", "zero"}, {"SLURM_PROCID", "0"}, {"SLURM_NTASKS", "2"}}, "SLURM_STEP_ID='zero'"},
      {{{"SLURM_STEP_ID", "0"}, {"SLURM_PROCID", "0"}, {"SLURM_NTASKS", "2"}, {"SLURM_TASKS_PER_NODE", "2(x"}},
       "SLURM_TASKS_PER_NODE='2(x' is not a list of task counts from 1 to 2"},
      {{{"SLURM_STEP_ID", "0"}, {"SLURM_PROCID", "0"}, {"SLURM_NTASKS", "2"}, {"SLURM_TASKS_PER_NODE", "2,"}},
       "SLURM_TASKS_PER_NODE='2,'"},
      {{{"SLURM_STEP_ID", "0"}, {"SLURM_PROCID", "0"}, {"SLURM_NTASKS", "2"}, {"SLURM_TASKS_PER_NODE", "3"}},
       "SLURM_TASKS_PER_NODE='3' is not a list of task counts from 1 to 2"},
      {{{"SLURM_STEP_ID", "0"}, {"SLURM_PROCID", "0"}, {"SLURM_NTASKS", "4"}, {"SLURM_TASKS_PER_NODE", "2,1,1"},
        {"SLURM_NODEID", "3"}}, "SLURM_NODEID='3' is not a whole number from 0 to 2"},
      {{{"SLURM_STEP_ID", "0"}, {"SLURM_PROCID", "0"}, {"SLURM_NTASKS", "4"}, {"SLURM_LOCALID", "2"},
        {"SLURM_TASKS_PER_NODE", "2(x2)"}}, "SLURM_LOCALID=2 is not below this node's 2 processes"},
      {{{"SLURM_STEP_ID", "0"}, {"SLURM_PROCID", "0"}, {"SLURM_NTASKS", "4"}, {"SLURM_NTASKS_PER_NODE", "8"}},
       "SLURM_NTASKS_PER_NODE='8' is not a whole number from 1 to 4"},
      {{{"PMIX_RANK", "x"}}, "PMIX_RANK='x'"},
      {{{"PMI_SIZE", "2"}}, "set PMI_SIZE=2 but not PMI_RANK"},
      {{{"PMI_RANK", "1"}, {"PMI_SIZE", "1"}}, "PMI_RANK='1' is not a whole number from 0 to 0"},
      {{{"PMI_RANK", "0"}, {"PMI_SIZE", "2"}, {"MPI_LOCALRANKID", "1e3"}}, "MPI_LOCALRANKID='1e3'"},
  };
  for (const Case& c : cases) {
    for (const char* name : kAll) unsetenv(name);
    set(c.vars);
    const std::string message = refusal();
    EXPECT_NE(message.find(c.message), std::string::npos) << "expected '" << c.message << "' in: " << message;
    EXPECT_EQ(message.rfind("launcher environment: ", 0), 0u) << message;
  }
}

TEST_F(LauncherEnv, LongGarbageIsShortenedInTheMessage) {
  set({{"PMIX_RANK", std::string(500, '7')}});
  const std::string message = refusal();
  EXPECT_NE(message.find("PMIX_RANK='" + std::string(40, '7') + "...'"), std::string::npos) << message;
  EXPECT_LT(message.size(), 200u);
}

TEST_F(LauncherEnv, BatchScriptTasksRefusesGarbage) {
  set({{"SLURM_JOB_ID", "7"}, {"SLURM_NTASKS", "many"}});
  try {
    keel_support::batch_script_tasks();
    ADD_FAILURE() << "SLURM_NTASKS='many' accepted";
  } catch (const StatusError& e) {
    EXPECT_NE(std::string(e.what()).find("SLURM_NTASKS='many'"), std::string::npos) << e.what();
  }
}

}  // namespace
