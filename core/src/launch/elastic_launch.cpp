// The `keel launch` supervisor (see elastic_launch.h).
#include "launch/elastic_launch.h"

#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <optional>

#include "checkpoint/checkpoint.h"
#include "config/run_config.h"
#include "host/errors.h"
#include "launch/child_process.h"
#include "launch/host_file.h"
#include "train/mesh_plan.h"

namespace keel {

namespace {

using Clock = std::chrono::steady_clock;

std::string this_executable() {
  std::error_code error;
  const auto path = std::filesystem::read_symlink("/proc/self/exe", error);
  if (error) throw KeelError(KEEL_ERR_IO, "cannot find the keel executable (/proc/self/exe): " + error.message());
  return path.string();
}

// The job's launcher group, for the signal handler to pass SIGINT and SIGTERM on to.
std::atomic<pid_t> g_job_group{0};
std::atomic<int> g_stop_signal{0};
static_assert(std::atomic<pid_t>::is_always_lock_free && std::atomic<int>::is_always_lock_free,
              "the signal handler may only touch lock-free atomics");

void forward_signal(int signal) {
  g_stop_signal = signal;
  if (const pid_t group = g_job_group.load(); group > 0) ::kill(-group, signal);
}

// How often a wait looks at the stop flag: the handler cannot end a wait itself (signal()
// restarts waitpid), so waits are slices of this length.
constexpr double kStopPollSeconds = 0.05;

// The process's exit status, or nullopt when it is still running after `timeout_s` or a stop
// signal came first.
std::optional<int> wait_unless_stopped(ChildProcess& process, double timeout_s) {
  const auto deadline = Clock::now() + std::chrono::duration<double>(timeout_s);
  for (;;) {
    const double left = std::chrono::duration<double>(deadline - Clock::now()).count();
    if (std::optional<int> status = process.wait(std::max(0.0, std::min(left, kStopPollSeconds)))) return status;
    if (g_stop_signal || left <= kStopPollSeconds) return std::nullopt;
  }
}

// Asks every group to end with `signal`, gives them `grace_s` together, then kills what is left:
// a launcher that ignores the signal cannot keep the supervisor waiting.
void end_groups(const std::vector<ChildProcess*>& processes, int signal, double grace_s) {
  for (ChildProcess* process : processes) process->signal_group(signal);
  const auto deadline = Clock::now() + std::chrono::duration<double>(grace_s);
  for (ChildProcess* process : processes)
    process->wait(std::max(0.0, std::chrono::duration<double>(deadline - Clock::now()).count()));
  for (ChildProcess* process : processes) process->signal_group(SIGKILL);
}

// The job's exit status. Once a stop signal has come (the handler passed it on) the job has
// `grace_s` to end before its group is killed.
int wait_for_job(ChildProcess& job, double grace_s, std::ostream& out) {
  std::optional<int> status;
  while (!status && !g_stop_signal) status = job.wait(kStopPollSeconds);
  if (status) return *status;
  if ((status = job.wait(grace_s))) return *status;
  out << "keel launch: the job did not end within " << grace_s << " s of signal " << g_stop_signal
      << "; killing its process group" << std::endl;
  job.signal_group(SIGKILL);
  return *job.wait();
}

// The hosts on which the launcher starts `keel --version` within the timeout, probed
// kProbesAtOnce at a time (each probe is a launcher process of its own). A stop signal ends
// the probing at once.
constexpr size_t kProbesAtOnce = 64;

std::vector<LaunchHost> answering_hosts(const LaunchRequest& options, const std::vector<LaunchHost>& hosts,
                                        const std::string& keel, std::ostream& out) {
  std::vector<LaunchHost> alive;
  for (size_t first = 0; first < hosts.size() && !g_stop_signal; first += kProbesAtOnce) {
    const size_t last = std::min(hosts.size(), first + kProbesAtOnce);
    std::vector<std::unique_ptr<ChildProcess>> probes;
    for (size_t i = first; i < last; ++i) {
      std::vector<std::string> argv = options.launcher;
      argv.insert(argv.end(), {"--host", hosts[i].name + ":1", "-np", "1", keel, "--version"});
      probes.push_back(std::make_unique<ChildProcess>(argv, /*quiet=*/true));
    }
    const auto deadline = Clock::now() + std::chrono::duration<double>(options.probe_timeout_s);
    for (size_t i = first; i < last; ++i) {
      const double left = std::max(0.0, std::chrono::duration<double>(deadline - Clock::now()).count());
      const std::optional<int> status = wait_unless_stopped(*probes[i - first], left);
      if (g_stop_signal) {
        std::vector<ChildProcess*> running;
        for (auto& probe : probes) running.push_back(probe.get());
        end_groups(running, g_stop_signal, options.stop_grace_s);
        break;
      }
      if (status && *status == 0) alive.push_back(hosts[i]);
      else
        out << "keel launch: host " << hosts[i].name << " does not answer ("
            << (status ? "the probe exited " + std::to_string(*status)
                       : "no reply within " + std::to_string(int(options.probe_timeout_s)) + " s")
            << ")" << std::endl;
    }
  }  // the probes still running are ended as `probes` goes
  return alive;
}

struct Plan {
  int32_t ranks = 0;
  std::string layout;
};

// The most ranks the answering hosts can hold that make a valid layout of the config.
Plan largest_layout(const RunConfig& config, const std::vector<LaunchHost>& hosts) {
  int32_t slots = 0;
  for (const LaunchHost& host : hosts) slots += host.slots;
  // Only multiples of tp × pp can be layouts; dp shrinks one at a time from the most that fit.
  const int32_t per_replica = std::max(1, config.tp * config.pp);
  std::vector<int32_t> candidates{slots};  // first, for the message when nothing fits
  for (int32_t ranks = slots - slots % per_replica; ranks >= per_replica; ranks -= per_replica)
    if (ranks != slots) candidates.push_back(ranks);
  std::string why_not_all;
  for (const int32_t ranks : candidates) {
    try {
      return {ranks, check_mesh_plan(config, ranks)};
    } catch (const KeelError& e) {
      if (why_not_all.empty()) why_not_all = e.what();
    }
  }
  throw KeelError(KEEL_ERR_INVALID_CONFIG, "no layout of " + config.file + " fits the " + std::to_string(slots) +
                                               " slot(s) of the hosts that answer: at " + std::to_string(slots) +
                                               " ranks, " + why_not_all + "; and no smaller count of ranks fits either");
}

bool has_checkpoint(const RunConfig& config) {
  try {
    resolve_checkpoint(config.train.checkpoint.dir);
    return true;
  } catch (const KeelError&) {
    return false;
  }
}

}  // namespace

int run_elastic_launch(const LaunchRequest& options, std::ostream& out) {
  const std::vector<LaunchHost> hosts = read_host_file(options.hosts_file);
  std::vector<std::string> overrides = options.overrides;  // and the hosts file's sites, which win
  if (const std::string sites = sites_override(hosts, options.hosts_file); !sites.empty()) overrides.push_back(sites);
  const RunConfig config = RunConfig::from_file(options.config, overrides);
  const std::string keel = this_executable();
  signal(SIGINT, forward_signal);
  signal(SIGTERM, forward_signal);
  int status = 1;
  for (int32_t attempt = 0;; ++attempt) {
    const std::vector<LaunchHost> alive = answering_hosts(options, hosts, keel, out);
    if (g_stop_signal) {
      out << "keel launch: stopped by signal " << g_stop_signal << " before " << (attempt ? "restarting" : "starting")
          << std::endl;
      return 128 + g_stop_signal;
    }
    if (alive.empty()) throw KeelError(KEEL_ERR_IO, "keel launch: no host of " + options.hosts_file + " answers");
    const Plan plan = largest_layout(config, alive);
    const bool resume = has_checkpoint(config);
    std::vector<std::string> argv = options.launcher;
    argv.insert(argv.end(), {"--host", host_list(alive, plan.ranks), "-np", std::to_string(plan.ranks), keel, "run",
                             options.config});
    for (const std::string& set : overrides) argv.insert(argv.end(), {"--set", set});
    if (resume) argv.insert(argv.end(), {"--resume", "latest"});
    out << "keel launch: " << (attempt == 0 ? "start" : "restart " + std::to_string(attempt) + " of " +
                                                           std::to_string(options.max_restarts))
        << ": " << plan.ranks << " rank(s) on " << host_list(alive, plan.ranks) << " (" << plan.layout << "), "
        << (resume ? "resuming from the latest checkpoint in " + config.train.checkpoint.dir : "from the start")
        << "\nkeel launch: running " << command_text(argv) << std::endl;
    const auto started = Clock::now();
    {
      // A stop signal arriving between the spawn and the note of the job's group would reach
      // nobody: blocked until the group is noted, then passed on if it came meanwhile.
      sigset_t stops, before;
      sigemptyset(&stops);
      sigaddset(&stops, SIGINT);
      sigaddset(&stops, SIGTERM);
      sigprocmask(SIG_BLOCK, &stops, &before);
      std::optional<ChildProcess> job;
      try {
        job.emplace(argv);
      } catch (...) {
        sigprocmask(SIG_SETMASK, &before, nullptr);
        throw;
      }
      g_job_group = job->pid();
      sigprocmask(SIG_SETMASK, &before, nullptr);
      if (const int pending = g_stop_signal) job->signal_group(pending);
      status = wait_for_job(*job, options.stop_grace_s, out);
      g_job_group = 0;
    }
    const double seconds = std::chrono::duration<double>(Clock::now() - started).count();
    if (status == 0) {
      out << "keel launch: the job finished after " << attempt << " restart(s)" << std::endl;
      return 0;
    }
    if (g_stop_signal) {
      // The job's own status says how the launcher took the signal (mpirun exits 1); the
      // supervisor's says it was stopped, as a shell expects of Ctrl-C (130) or SIGTERM (143).
      out << "keel launch: stopped by signal " << g_stop_signal << " (the job exited " << status
          << "); not restarting" << std::endl;
      return 128 + g_stop_signal;
    }
    out << "keel launch: the job failed (exit " << status << ") after " << int64_t(seconds) << " s";
    if (attempt == options.max_restarts) {
      out << "; " << options.max_restarts << " restart(s) spent, giving up" << std::endl;
      return status;
    }
    out << "; finding the hosts that still answer" << std::endl;
  }
}

}  // namespace keel
