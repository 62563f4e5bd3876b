// The processes `keel launch` starts (the launcher of each attempt, the probes of each host):
// each in a process group of its own, so ending one ends everything it started on this machine
// (mpirun and its local daemons), and waited for with a deadline, so a probe of a host that
// does not answer cannot hang the supervisor.
#pragma once

#include <sys/types.h>

#include <optional>
#include <string>
#include <vector>

namespace keel {

class ChildProcess {
 public:
  // Starts argv[0] (searched on PATH) with argv; throws KeelError when it cannot be started.
  // `quiet`: its stdout and stderr go to /dev/null (a probe), else they are ours.
  explicit ChildProcess(const std::vector<std::string>& argv, bool quiet = false);
  // Ends the group, also what outlived its leader: SIGTERM, a grace period, then SIGKILL; reaps
  // the leader.
  ~ChildProcess();
  ChildProcess(const ChildProcess&) = delete;
  ChildProcess& operator=(const ChildProcess&) = delete;

  // The exit status (128 + N for a signal N, as a shell says) once the process ends, or nullopt
  // when it is still running after `timeout_s` (< 0: wait as long as it takes).
  std::optional<int> wait(double timeout_s = -1);
  // Sends `signal` to the whole group (the child is its leader; the group outlives it while any
  // process it started is alive).
  void signal_group(int signal);
  pid_t pid() const { return pid_; }

 private:
  pid_t pid_ = -1;
  bool reaped_ = false;
};

// Every argument shell-quoted where needed, for messages ("running: mpirun --host ...").
std::string command_text(const std::vector<std::string>& argv);

}  // namespace keel
