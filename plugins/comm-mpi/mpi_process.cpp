// MPI's process-wide lifetime (see mpi_process.hpp): MPI_Init and MPI_Finalize may each run
// only once per process, so MPI starts with the first world and ends at process exit — a
// process may build several trainers one after another (bindings, tests) under one launcher.
#include "mpi_process.hpp"

#include <mpi.h>

#include <atomic>
#include <cstdlib>
#include <mutex>

#include <keel_support/common/abi_guard.hpp>

#include "mpi_watchdog.hpp"
#include "peer_liveness.hpp"

namespace keel_mpi {
namespace {

std::mutex g_mutex;
int g_references = 0;   // live communicators, for diagnostics
bool g_started = false;
bool g_we_initialised = false;
std::atomic<bool> g_thread_multiple{false};

const char* thread_level_name(int level) {
  switch (level) {
    case MPI_THREAD_SINGLE: return "SINGLE";
    case MPI_THREAD_FUNNELED: return "FUNNELED";
    case MPI_THREAD_SERIALIZED: return "SERIALIZED";
    case MPI_THREAD_MULTIPLE: return "MULTIPLE";
    default: return "unknown";
  }
}

void initialise(const keel_host* host) {
  int initialised = 0, finalised = 0;
  MPI_Initialized(&initialised);
  MPI_Finalized(&finalised);
  if (finalised)
    throw keel_support::StatusError(
        KEEL_ERR_UNIMPLEMENTED,
        "create_world: MPI was finalised when this process destroyed its last communicator, and MPI cannot "
        "start twice in one process; keep one world alive for the whole run");
  g_we_initialised = !initialised;
  int provided = MPI_THREAD_SINGLE;
  if (g_we_initialised) {
    if (MPI_Init_thread(nullptr, nullptr, MPI_THREAD_MULTIPLE, &provided) != MPI_SUCCESS)
      throw keel_support::StatusError(KEEL_ERR_IO, "create_world: MPI_Init_thread failed");
  } else {
    MPI_Query_thread(&provided);
  }
  g_thread_multiple = provided == MPI_THREAD_MULTIPLE;
  // The comm contract lets two communicators be used from two threads at once, which needs
  // MULTIPLE; below it, every comm call must come from the thread that created the world.
  if (provided < MPI_THREAD_MULTIPLE && host)
    keel_logf(host, KEEL_LOG_WARN, "comm mpi",
              "MPI provides thread level %s, not MULTIPLE: call every comm function from the thread that "
              "created the world", thread_level_name(provided));
}

}  // namespace

void finalise_at_exit() {
  std::lock_guard<std::mutex> lock(g_mutex);
  stop_watchdog();
  stop_peer_liveness();
  int finalised = 0;
  MPI_Finalized(&finalised);
  if (g_we_initialised && !finalised) MPI_Finalize();
}

void acquire_mpi(const keel_host* host) {
  std::lock_guard<std::mutex> lock(g_mutex);
  if (!g_started) {
    initialise(host);
    start_watchdog();
    g_started = true;
    std::atexit(finalise_at_exit);
  }
  ++g_references;
}

void release_mpi() {
  std::lock_guard<std::mutex> lock(g_mutex);
  --g_references;  // MPI itself ends at process exit (finalise_at_exit)
}

bool mpi_thread_multiple() { return g_thread_multiple; }

}  // namespace keel_mpi
