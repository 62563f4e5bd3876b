// `keel launch`: its usage and its flags read into a LaunchRequest; a misused command line is
// said here with exit 2. The supervision itself is launch/elastic_launch.cpp.
#include "launch_command.h"

#include <cstdlib>
#include <sstream>

#include "host/errors.h"
#include "launch/elastic_launch.h"

namespace keel {

const char* const kLaunchUsage =
    "usage: keel launch CONFIG --hosts FILE [--max-restarts N] [--launcher \"mpirun ...\"] [--probe-timeout S]\n"
    "                   [--stop-grace S] [--set path=value ...]\n"
    "  runs `keel run CONFIG` on the hosts of FILE (one per line: NAME [slots=N]) through the launcher\n"
    "  (default mpirun; it is given --host and -np), and after a failure restarts on the hosts that still\n"
    "  answer, from the latest checkpoint, at most N times (default 3). SIGINT or SIGTERM is passed on to\n"
    "  the job; a job still running S seconds later (default 10) is killed; keel launch then exits 128 + the signal\n";

namespace {

struct LaunchUsageError : KeelError {
  explicit LaunchUsageError(const std::string& what) : KeelError(KEEL_ERR_INVALID_ARGUMENT, what) {}
};

double number_in(const std::string& flag, const std::string& text, double lo, double hi) {
  char* end = nullptr;
  const double value = std::strtod(text.c_str(), &end);
  if (text.empty() || *end != '\0' || !(value >= lo && value <= hi))
    throw LaunchUsageError(flag + " expects a number from " + std::to_string(int64_t(lo)) + " to " +
                           std::to_string(int64_t(hi)) + ", found '" + text + "'");
  return value;
}

LaunchRequest parse_request(const std::vector<std::string>& args) {
  LaunchRequest request;
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& arg = args[i];
    auto value = [&]() -> const std::string& {
      if (i + 1 >= args.size()) throw LaunchUsageError(arg + " needs a value");
      return args[++i];
    };
    if (arg == "--hosts") request.hosts_file = value();
    else if (arg == "--set") request.overrides.push_back(value());
    else if (arg == "--max-restarts") request.max_restarts = int32_t(number_in(arg, value(), 0, 1000));
    else if (arg == "--probe-timeout") request.probe_timeout_s = number_in(arg, value(), 1, 600);
    else if (arg == "--stop-grace") request.stop_grace_s = number_in(arg, value(), 0, 600);
    else if (arg == "--launcher") {
      std::istringstream words(value());
      request.launcher.clear();
      for (std::string word; words >> word;) request.launcher.push_back(word);
      if (request.launcher.empty()) throw LaunchUsageError("--launcher needs a command");
    } else if (!arg.empty() && arg[0] == '-') throw LaunchUsageError("unknown option " + arg);
    else if (request.config.empty()) request.config = arg;
    else throw LaunchUsageError("unexpected argument " + arg);
  }
  if (request.config.empty()) throw LaunchUsageError("keel launch needs a CONFIG file");
  if (request.hosts_file.empty()) throw LaunchUsageError("keel launch needs --hosts FILE");
  return request;
}

}  // namespace

int launch_command(const std::vector<std::string>& args, std::ostream& out, std::ostream& err) {
  if (args.size() == 1 && (args[0] == "--help" || args[0] == "-h")) {
    out << kLaunchUsage;
    return 0;
  }
  LaunchRequest request;
  try {
    request = parse_request(args);
  } catch (const LaunchUsageError& e) {
    err << "keel: " << e.what() << "\n" << kLaunchUsage;
    return 2;
  }
  return run_elastic_launch(request, out);
}

}  // namespace keel
