// Who started this process, read from the environment the launcher sets: its rank, the world it
// started and where the process sits on its node. Each launcher spells this differently, and the
// core (checking the comm plugin joined the world the launcher started; `keel validate`'s default
// world), backends (which GPU a process takes by default) and plugins should not each guess, so
// they all ask here. Header-only because plugins share it without linking the core.
//
// Read in order, the first present wins:
//   OpenMPI (mpirun, mpiexec, prterun)  OMPI_COMM_WORLD_RANK, _SIZE, _LOCAL_RANK, _LOCAL_SIZE
//   Slurm (an srun step)                SLURM_PROCID, SLURM_NTASKS, SLURM_LOCALID, and this node's
//                                       task count from SLURM_TASKS_PER_NODE (else
//                                       SLURM_NTASKS_PER_NODE)
//   PMIx (srun --mpi=pmix elsewhere)    PMIX_RANK; sizes from the Slurm variables when present
//   MPICH's hydra (mpiexec)             PMI_RANK, PMI_SIZE, MPI_LOCALRANKID, MPI_LOCALNRANKS
// Slurm counts only inside a step that srun started (SLURM_STEP_ID set and not one of Slurm's
// special steps): a batch script or an salloc shell also carries SLURM_PROCID=0 and the job's
// SLURM_NTASKS, but there one process runs with no world around it, as the mpi comm plugin
// also decides. batch_script_tasks() tells that case apart.
//
// Every number is bounded: garbage throws StatusError(KEEL_ERR_INVALID_ARGUMENT) naming the
// variable and its value, since a wrong rank or world would silently corrupt a run.
#pragma once

#include <cstdint>
#include <cstdlib>
#include <optional>
#include <string>
#include <vector>

#include "keel_support/common/abi_guard.hpp"  // defines: StatusError

namespace keel_support {

// Larger than any real job, small enough that products of it stay in an int64.
constexpr int kMaxLauncherWorld = 1 << 24;

struct LauncherIdentity {
  std::string launcher;  // "mpirun (OpenMPI)", "srun", "PMIx", "mpiexec (MPICH hydra)"
  int rank = 0;
  int world = -1;        // -1: the launcher did not say
  int local_rank = -1;   // this process's index on its node; -1: not said
  int local_world = -1;  // processes the launcher started on this node; -1: not said (or uneven)
  std::string rank_from, world_from;  // what was read, as NAME=value ("SLURM_NTASKS=2")
};

namespace launcher_detail {

inline const char* get(const char* name) {
  const char* value = std::getenv(name);
  return value && *value ? value : nullptr;
}

inline std::string shown(const char* name, const char* value) {
  std::string v(value ? value : "");
  if (v.size() > 40) v = v.substr(0, 40) + "...";
  return std::string(name) + "='" + v + "'";
}

// A whole decimal number in [lo, hi]: digits only (no sign, spaces or suffix).
inline int64_t parse_bounded(const char* name, const char* value, int64_t lo, int64_t hi) {
  std::string s(value ? value : "");
  bool digits = !s.empty() && s.size() <= 18;
  for (char c : s) digits = digits && c >= '0' && c <= '9';
  const int64_t n = digits ? std::strtoll(s.c_str(), nullptr, 10) : -1;
  if (!digits || n < lo || n > hi)
    throw StatusError(KEEL_ERR_INVALID_ARGUMENT, "launcher environment: " + shown(name, value) +
                                                     " is not a whole number from " + std::to_string(lo) + " to " +
                                                     std::to_string(hi));
  return n;
}

inline int read_int(const char* name, int64_t lo, int64_t hi) { return int(parse_bounded(name, get(name), lo, hi)); }

inline std::string named(const char* name) { return std::string(name) + "=" + (get(name) ? get(name) : "(unset)"); }

// Slurm's compressed per-node counts ("4", "2(x3),1"), expanded, or empty when malformed.
inline std::vector<int64_t> expand_tasks_per_node(const std::string& text) {
  std::vector<int64_t> counts;
  size_t i = 0;
  auto number = [&](int64_t& out) {
    const size_t start = i;
    while (i < text.size() && text[i] >= '0' && text[i] <= '9' && i - start < 9) ++i;
    if (i == start || (i < text.size() && text[i] >= '0' && text[i] <= '9')) return false;
    out = std::strtoll(text.substr(start, i - start).c_str(), nullptr, 10);
    return true;
  };
  while (i < text.size()) {
    int64_t count = 0, repeat = 1;
    if (!number(count)) return {};
    if (text.compare(i, 2, "(x") == 0) {
      i += 2;
      if (!number(repeat) || i >= text.size() || text[i] != ')' || repeat < 1 || repeat > kMaxLauncherWorld) return {};
      ++i;
    }
    if (int64_t(counts.size()) + repeat > kMaxLauncherWorld) return {};
    counts.insert(counts.end(), size_t(repeat), count);
    if (i < text.size() && text[i++] != ',') return {};
    if (i == text.size() && text.back() == ',') return {};
  }
  return counts;
}

// This node's task count from Slurm's variables, bounded by the world; -1 when none is set, or
// when the nodes' counts differ and SLURM_NODEID does not say which is this one.
inline int slurm_tasks_on_node(int world) {
  if (const char* value = get("SLURM_TASKS_PER_NODE")) {
    const std::vector<int64_t> counts = expand_tasks_per_node(value);
    bool fits = !counts.empty();
    for (int64_t c : counts) fits = fits && c >= 1 && c <= world;
    if (!fits)
      throw StatusError(KEEL_ERR_INVALID_ARGUMENT, "launcher environment: " + shown("SLURM_TASKS_PER_NODE", value) +
                                                       " is not a list of task counts from 1 to " +
                                                       std::to_string(world) + " such as '4' or '2(x3),1'");
    bool even = true;
    for (int64_t c : counts) even = even && c == counts[0];
    if (even) return int(counts[0]);
    if (!get("SLURM_NODEID")) return -1;
    return int(counts[size_t(read_int("SLURM_NODEID", 0, int64_t(counts.size()) - 1))]);
  }
  if (get("SLURM_NTASKS_PER_NODE")) return read_int("SLURM_NTASKS_PER_NODE", 1, world);
  return -1;
}

// Slurm's special step ids (batch script, interactive shell, extern container) are 0xfffffff0
// and above; an srun step's id counts up from 0.
constexpr int64_t kFirstSpecialSlurmStep = 0xfffffff0LL;

inline bool in_srun_step() {
  for (const char* name : {"SLURM_STEP_ID", "SLURM_STEPID"})
    if (const char* step = get(name)) return parse_bounded(name, step, 0, 0xffffffffLL) < kFirstSpecialSlurmStep;
  return false;
}

// The local rank and node size checked against each other and the world.
inline void check_local(LauncherIdentity& id, const char* local_name, const char* size_name) {
  const std::string where = id.launcher + ": ";
  const int world = id.world > 0 ? id.world : kMaxLauncherWorld;
  if (id.local_world > world)
    throw StatusError(KEEL_ERR_INVALID_ARGUMENT, "launcher environment: " + where + std::string(size_name) + " " +
                                                     std::to_string(id.local_world) + " exceeds the world of " +
                                                     std::to_string(id.world));
  if (id.local_rank >= 0 && id.local_world > 0 && id.local_rank >= id.local_world)
    throw StatusError(KEEL_ERR_INVALID_ARGUMENT, "launcher environment: " + where + named(local_name) +
                                                     " is not below this node's " + std::to_string(id.local_world) +
                                                     " processes (" + std::string(size_name) + ")");
  if (id.local_rank >= world)
    throw StatusError(KEEL_ERR_INVALID_ARGUMENT, "launcher environment: " + where + named(local_name) +
                                                     " is not below the world of " + std::to_string(world));
}

inline LauncherIdentity ranked(const char* launcher, const char* rank_name, const char* world_name) {
  LauncherIdentity id;
  id.launcher = launcher;
  if (world_name && get(world_name)) {
    id.world = read_int(world_name, 1, kMaxLauncherWorld);
    id.world_from = named(world_name);
  }
  if (!get(rank_name))
    throw StatusError(KEEL_ERR_INVALID_ARGUMENT, "launcher environment: " + std::string(launcher) + " set " +
                                                     id.world_from + " but not " + rank_name);
  id.rank = read_int(rank_name, 0, (id.world > 0 ? id.world : kMaxLauncherWorld) - 1);
  id.rank_from = named(rank_name);
  return id;
}

inline int optional_int(const char* name, int64_t lo, int64_t hi) {
  return get(name) ? read_int(name, lo, hi) : -1;
}

}  // namespace launcher_detail

// The launcher that started this process, or nullopt when none did (a plain `keel run`, or the
// batch script of a Slurm job). Throws StatusError naming the variable when one is malformed.
inline std::optional<LauncherIdentity> launcher_identity() {
  using namespace launcher_detail;
  if (get("OMPI_COMM_WORLD_RANK") || get("OMPI_COMM_WORLD_SIZE")) {
    if (!get("OMPI_COMM_WORLD_SIZE"))
      throw StatusError(KEEL_ERR_INVALID_ARGUMENT,
                        "launcher environment: OpenMPI set " + named("OMPI_COMM_WORLD_RANK") + " but not OMPI_COMM_WORLD_SIZE");
    LauncherIdentity id = ranked("mpirun (OpenMPI)", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE");
    id.local_world = optional_int("OMPI_COMM_WORLD_LOCAL_SIZE", 1, kMaxLauncherWorld);
    id.local_rank = optional_int("OMPI_COMM_WORLD_LOCAL_RANK", 0, kMaxLauncherWorld - 1);
    check_local(id, "OMPI_COMM_WORLD_LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_SIZE");
    return id;
  }
  const bool slurm_step = in_srun_step();
  if (slurm_step && get("SLURM_PROCID")) {
    if (!get("SLURM_NTASKS"))
      throw StatusError(KEEL_ERR_INVALID_ARGUMENT,
                        "launcher environment: srun set " + named("SLURM_PROCID") + " but not SLURM_NTASKS");
    LauncherIdentity id = ranked("srun", "SLURM_PROCID", "SLURM_NTASKS");
    id.local_world = slurm_tasks_on_node(id.world);
    id.local_rank = optional_int("SLURM_LOCALID", 0, kMaxLauncherWorld - 1);
    check_local(id, "SLURM_LOCALID", "SLURM_TASKS_PER_NODE");
    return id;
  }
  if (get("PMIX_RANK")) {
    // PMIx keeps the sizes in its server, not the environment; under srun they are Slurm's.
    LauncherIdentity id = ranked("PMIx", "PMIX_RANK", slurm_step ? "SLURM_NTASKS" : nullptr);
    if (slurm_step) {
      id.local_world = slurm_tasks_on_node(id.world);
      id.local_rank = optional_int("SLURM_LOCALID", 0, kMaxLauncherWorld - 1);
      check_local(id, "SLURM_LOCALID", "SLURM_TASKS_PER_NODE");
    }
    return id;
  }
  if (get("PMI_RANK") || get("PMI_SIZE")) {
    if (!get("PMI_RANK"))
      throw StatusError(KEEL_ERR_INVALID_ARGUMENT,
                        "launcher environment: the PMI launcher set " + named("PMI_SIZE") + " but not PMI_RANK");
    LauncherIdentity id = ranked("mpiexec (MPICH hydra)", "PMI_RANK", "PMI_SIZE");
    id.local_world = optional_int("MPI_LOCALNRANKS", 1, kMaxLauncherWorld);
    id.local_rank = optional_int("MPI_LOCALRANKID", 0, kMaxLauncherWorld - 1);
    check_local(id, "MPI_LOCALRANKID", "MPI_LOCALNRANKS");
    return id;
  }
  return std::nullopt;
}

// In a Slurm job's batch script or salloc shell (a job, but no srun step): the job's task count
// (SLURM_NTASKS), so a process run there directly can say it uses one of them; else 0.
inline int batch_script_tasks() {
  using namespace launcher_detail;
  if (!get("SLURM_JOB_ID") || in_srun_step() || !get("SLURM_NTASKS")) return 0;
  return read_int("SLURM_NTASKS", 1, kMaxLauncherWorld);
}

// One line for logs: "srun: rank 1 of 2 (SLURM_PROCID=1, SLURM_NTASKS=2), local rank 1 of 2".
inline std::string describe_launcher(const LauncherIdentity& id) {
  std::string line = id.launcher + ": rank " + std::to_string(id.rank) + " of " +
                     (id.world > 0 ? std::to_string(id.world) : std::string("an unstated world")) + " (" + id.rank_from +
                     (id.world_from.empty() ? "" : ", " + id.world_from) + ")";
  if (id.local_rank >= 0)
    line += ", local rank " + std::to_string(id.local_rank) +
            (id.local_world > 0 ? " of " + std::to_string(id.local_world) : std::string());
  return line;
}

// The environment variable that shows an MPI launcher started this process, or "" when none
// did: OMPI_COMM_WORLD_SIZE (OpenMPI's mpirun), PMIX_RANK (OpenMPI 5's prterun, `srun
// --mpi=pmix`), PMI_SIZE and PMI_RANK (PMI-1/2: MPICH's hydra, `srun --mpi=pmi2`). The comm
// plugins that join a world through MPI (mpi, nccl) ask here. SLURM_PROCID alone is not taken as
// a launch: an sbatch script sets it too, and initialising MPI there would try to join a world
// that does not exist.
inline std::string mpi_launcher_variable() {
  for (const char* name : {"OMPI_COMM_WORLD_SIZE", "PMIX_RANK", "PMI_SIZE", "PMI_RANK"}) {
    if (launcher_detail::get(name)) return name;
  }
  return "";
}

}  // namespace keel_support
