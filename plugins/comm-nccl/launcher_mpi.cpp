// libmpi opened with dlopen (see launcher_mpi.hpp). The handful of MPI calls the bootstrap
// needs are resolved by name; OpenMPI's C handles are pointers to exported objects, so
// MPI_COMM_WORLD is dlsym("ompi_mpi_comm_world") and MPI_BYTE dlsym("ompi_mpi_byte").
#include "launcher_mpi.hpp"

#include <dlfcn.h>

#include <climits>
#include <cstdlib>
#include <mutex>

#include <keel_support/common/abi_guard.hpp>
#include <keel_support/common/launcher_env.hpp>  // defines: mpi_launcher_variable

namespace keel_nccl {
namespace {

using keel_support::StatusError;

// OpenMPI's ABI (mpi.h): handles are pointers; MPI_SUCCESS 0; MPI_THREAD_MULTIPLE 3.
using MpiHandle = void*;
constexpr int kMpiSuccess = 0;
constexpr int kMpiThreadMultiple = 3;
constexpr const char* kLibraries[] = {"libmpi.so.40", "libmpi.so"};

struct MpiLibrary {
  void* library = nullptr;
  std::string name;
  int (*Initialized)(int*) = nullptr;
  int (*Finalized)(int*) = nullptr;
  int (*Init_thread)(int*, char***, int, int*) = nullptr;
  int (*Finalize)() = nullptr;
  int (*Comm_rank)(MpiHandle, int*) = nullptr;
  int (*Comm_size)(MpiHandle, int*) = nullptr;
  int (*Bcast)(void*, int, MpiHandle, int, MpiHandle) = nullptr;
  int (*Abort)(MpiHandle, int) = nullptr;
  MpiHandle comm_world = nullptr;
  MpiHandle byte = nullptr;
};

std::mutex g_libmpi_mutex;
MpiLibrary g_mpi;
bool g_joined = false;
bool g_we_initialised = false;
LauncherWorld g_world{0, 1};

template <typename Function>
void resolve(Function& slot, const char* symbol) {
  slot = reinterpret_cast<Function>(dlsym(g_mpi.library, symbol));
  if (!slot)
    throw StatusError(KEEL_ERR_UNIMPLEMENTED, "create_world_on: " + g_mpi.name + " has no " + symbol +
                                                  ": the nccl comm bootstraps through OpenMPI only");
}

void open_library(const std::string& launcher) {
  std::string tried;
  for (const char* name : kLibraries) {
    // RTLD_GLOBAL: OpenMPI's own components (mca_*.so) resolve libmpi's symbols globally.
    g_mpi.library = dlopen(name, RTLD_NOW | RTLD_GLOBAL);
    if (g_mpi.library) {
      g_mpi.name = name;
      break;
    }
    tried += std::string(tried.empty() ? "" : "; ") + dlerror();
  }
  if (!g_mpi.library)
    throw StatusError(KEEL_ERR_UNIMPLEMENTED,
                      "create_world_on: a launcher started this process (" + launcher +
                          " is set), so the NCCL unique id must be broadcast over MPI, but no OpenMPI library "
                          "could be opened (" + tried + "); install OpenMPI or start a single rank without a launcher");
  resolve(g_mpi.Initialized, "MPI_Initialized");
  resolve(g_mpi.Finalized, "MPI_Finalized");
  resolve(g_mpi.Init_thread, "MPI_Init_thread");
  resolve(g_mpi.Finalize, "MPI_Finalize");
  resolve(g_mpi.Comm_rank, "MPI_Comm_rank");
  resolve(g_mpi.Comm_size, "MPI_Comm_size");
  resolve(g_mpi.Bcast, "MPI_Bcast");
  resolve(g_mpi.Abort, "MPI_Abort");
  resolve(g_mpi.comm_world, "ompi_mpi_comm_world");
  resolve(g_mpi.byte, "ompi_mpi_byte");
}

void finalise_at_exit() {
  std::lock_guard<std::mutex> lock(g_libmpi_mutex);
  int finalised = 0;
  g_mpi.Finalized(&finalised);
  if (g_we_initialised && !finalised) g_mpi.Finalize();
}

}  // namespace

LauncherWorld join_launcher_world(const keel_host* host) {
  std::lock_guard<std::mutex> lock(g_libmpi_mutex);
  if (g_joined) return g_world;
  const std::string launcher = keel_support::mpi_launcher_variable();
  if (!g_mpi.library) open_library(launcher);
  int initialised = 0, finalised = 0;
  g_mpi.Initialized(&initialised);
  g_mpi.Finalized(&finalised);
  if (finalised)
    throw StatusError(KEEL_ERR_UNIMPLEMENTED, "create_world_on: MPI was already finalised in this process");
  if (!initialised) {
    int provided = 0;
    // MULTIPLE so the watchdog thread may call MPI_Abort; the bootstrap itself is one thread.
    if (g_mpi.Init_thread(nullptr, nullptr, kMpiThreadMultiple, &provided) != kMpiSuccess)
      throw StatusError(KEEL_ERR_IO, "create_world_on: MPI_Init_thread failed (" + g_mpi.name + ")");
    g_we_initialised = true;
    std::atexit(finalise_at_exit);
  }
  g_mpi.Comm_rank(g_mpi.comm_world, &g_world.rank);
  g_mpi.Comm_size(g_mpi.comm_world, &g_world.size);
  g_joined = true;
  if (host && g_world.rank == 0)
    keel_logf(host, KEEL_LOG_DEBUG, "comm nccl", "launcher found by %s: %d ranks, unique id sent over %s",
              launcher.c_str(), g_world.size, g_mpi.name.c_str());
  return g_world;
}

void broadcast_from_rank0(void* data, size_t bytes) {
  if (bytes > static_cast<size_t>(INT_MAX))
    throw StatusError(KEEL_ERR_INTERNAL, "broadcast_from_rank0: " + std::to_string(bytes) + " bytes exceed MPI's int count");
  if (g_mpi.Bcast(data, static_cast<int>(bytes), g_mpi.byte, 0, g_mpi.comm_world) != kMpiSuccess)
    throw StatusError(KEEL_ERR_IO, "create_world_on: MPI_Bcast of the NCCL unique id failed");
}

bool launcher_world_joined() { return g_joined; }

void abort_launcher_world(int exit_code) {
  if (g_joined) g_mpi.Abort(g_mpi.comm_world, exit_code);
}

}  // namespace keel_nccl
