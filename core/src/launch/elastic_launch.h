// `keel launch`: a supervisor that runs a job through a launcher (mpirun, or a command that
// takes mpirun's --host and -np) on the hosts of a hosts file, and when the job fails, finds
// which hosts still answer, plans the largest layout that fits them (dp shrinks; the config's
// global batch is kept by accumulating more micro-batches; a layout that cannot fit is refused
// with its numbers), and resumes from the latest complete checkpoint, up to --max-restarts
// times. The work lost to a failure is what was done since that checkpoint; tokens seen and the
// data order continue from it exactly as a resume by hand would (checkpoint.h).
//
// A host answers when the launcher can start `keel --version` there within --probe-timeout
// seconds: the same path the job's ranks take, over the same network.
//
// The command line of `keel launch` lives in core/cli/launch_command.cpp; this is the supervisor.
#pragma once

#include <cstdint>
#include <ostream>
#include <string>
#include <vector>

namespace keel {

struct LaunchRequest {
  std::string config, hosts_file;
  std::vector<std::string> overrides;              // --set path=value, passed on to every `keel run`
  std::vector<std::string> launcher{"mpirun"};     // the launcher's words; --host and -np are added
  int32_t max_restarts = 3;
  double probe_timeout_s = 15;
  // How long a job or probe told to stop (SIGINT, SIGTERM) has before its group is killed.
  double stop_grace_s = 10;
};

// Runs the job, restarting it as described above, with a line to out for each start, restart
// and host that does not answer. Returns the exit status: 0, the job's last one when the restarts
// are spent, or 128 + the signal that stopped it. Throws KeelError when the config, the hosts
// file or the layout is refused, or no host answers.
int run_elastic_launch(const LaunchRequest& request, std::ostream& out);

}  // namespace keel
