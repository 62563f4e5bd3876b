// `keel launch CONFIG --hosts FILE ...`: the command line of the elastic supervisor
// (launch/elastic_launch.h), which runs the job and restarts it on the hosts that still answer.
#pragma once

#include <ostream>
#include <string>
#include <vector>

namespace keel {

extern const char* const kLaunchUsage;  // `keel launch --help`

// `args` are what follows `keel launch`; returns the exit status (the job's last one), or 2 for a
// misused command line (the message and the usage to err).
int launch_command(const std::vector<std::string>& args, std::ostream& out, std::ostream& err);

}  // namespace keel
