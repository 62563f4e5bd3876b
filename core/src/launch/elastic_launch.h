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
#pragma once

#include <ostream>
#include <string>
#include <vector>

namespace keel {

extern const char* const kLaunchUsage;  // `keel launch --help`

// `args` are what follows `keel launch`; returns the exit status (the job's last one).
int launch_command(const std::vector<std::string>& args, std::ostream& out, std::ostream& err);

}  // namespace keel
