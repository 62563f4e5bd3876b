// MPI's lifetime in this process: whether a launcher started us (and so whether MPI is
// initialised at all), MPI_Init_thread on the first communicator and MPI_Finalize after the last.
#pragma once

#include <keel/host.h>

#include <string>

namespace keel_mpi {

// One reference per live MPI-backed communicator. The first initialises MPI (MPI_THREAD_MULTIPLE
// requested) unless someone else already did; the last release finalises it if we initialised
// it. MPI cannot start twice in a process, so creating a world after every communicator was
// destroyed fails with a message saying so. Thread-safe.
// The watchdog (mpi_watchdog.hpp) runs between them.
void acquire_mpi(const keel_host* host);
void release_mpi();

// Whether MPI was initialised with MPI_THREAD_MULTIPLE, so any thread may call it.
bool mpi_thread_multiple();

}  // namespace keel_mpi
