// Bounded time for calls that block inside MPI. A blocking collective, a split or a wait runs
// armed with a deadline (the config's timeout_s); a watchdog thread looks at the armed calls
// every 100 ms and, past a deadline, ends the world naming the call, so a rank whose peer died
// or hung exits instead of hanging. Blocking calls stay MPI's own (MPI_Allreduce is about twice
// as fast as MPI_Iallreduce + MPI_Wait on large buffers with OpenMPI 4.1), and nothing polls.
#pragma once

#include <chrono>
#include <list>
#include <string>

namespace keel_mpi {

class Communicator;

// One call in progress; the watchdog reads it while it is armed. The strings are borrowed from
// the caller and outlive the arming.
struct ArmedCall {
  std::chrono::steady_clock::time_point deadline;
  double timeout_s;
  const Communicator* communicator;    // whose abort_world ends the world
  const std::string* what;             // "collective all_reduce"
  const std::string* stalled_because;  // "another rank died or stopped calling it"
};

// Arms a call for the lifetime of this object (the blocking MPI call runs inside it).
class Armed {
 public:
  Armed(const Communicator& communicator, double timeout_s, const std::string& what, const std::string& stalled_because);
  ~Armed();
  Armed(const Armed&) = delete;
  Armed& operator=(const Armed&) = delete;

 private:
  std::list<ArmedCall>::iterator entry_;
};

// The watchdog thread runs while MPI is initialised by this plugin (mpi_process.cpp starts it
// after MPI_Init_thread and joins it before MPI_Finalize, so the library can be unloaded after).
void start_watchdog();
void stop_watchdog();

}  // namespace keel_mpi
