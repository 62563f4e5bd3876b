// The launcher's world, reached through an MPI library opened at run time: NCCL needs its
// unique id handed from rank 0 to every rank, and mpirun/srun ranks share nothing else. The
// plugin does not link libmpi, so it loads (and a world of one runs) where no MPI is installed,
// such as the GPU machines; libmpi.so.40 (OpenMPI 4 and 5) is opened only when a launcher
// started this process. Only OpenMPI is supported: its handles (MPI_COMM_WORLD, MPI_BYTE) are
// the addresses of exported objects, which dlsym finds; MPICH's are integers from its mpi.h.
#pragma once

#include <keel/host.h>

#include <cstddef>
#include <string>

namespace keel_nccl {

// Opens libmpi and initialises MPI once per process (unless someone, such as the mpi plugin,
// already did), finalising at exit if it initialised it. Throws StatusError naming the library
// and what is missing. Thread-safe.
struct LauncherWorld {
  int rank;
  int size;
};
LauncherWorld join_launcher_world(const keel_host* host);

// MPI_Bcast of `bytes` raw bytes from world rank 0 (the NCCL unique id). After join.
void broadcast_from_rank0(void* data, size_t bytes);

// Whether join_launcher_world succeeded in this process, and MPI_Abort of the whole world with
// `exit_code` (it returns only if MPI_Abort does, which it should not).
bool launcher_world_joined();
void abort_launcher_world(int exit_code);

}  // namespace keel_nccl
