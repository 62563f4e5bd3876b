// Starting, waiting for and ending child process groups (see child_process.h).
#include "launch/child_process.h"

#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <thread>

#include "host/errors.h"

extern char** environ;

namespace keel {
namespace {

// How long a group asked to end (SIGTERM) has before it is killed: mpirun uses it to end its
// daemons on other hosts.
constexpr double kGraceSeconds = 3.0;

int shell_status(int status) {
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  if (WIFSIGNALED(status)) return 128 + WTERMSIG(status);
  return 1;
}

}  // namespace

ChildProcess::ChildProcess(const std::vector<std::string>& argv, bool quiet) {
  if (argv.empty()) throw KeelError(KEEL_ERR_INVALID_ARGUMENT, "no command to start");
  std::vector<char*> args;
  for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  posix_spawnattr_t attributes;
  posix_spawnattr_init(&attributes);
  posix_spawnattr_setflags(&attributes, POSIX_SPAWN_SETPGROUP | POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF);
  posix_spawnattr_setpgroup(&attributes, 0);  // a group of its own, led by the child
  sigset_t none, stops;
  sigemptyset(&none);
  posix_spawnattr_setsigmask(&attributes, &none);  // the caller may block signals around the spawn
  sigemptyset(&stops);
  sigaddset(&stops, SIGINT);
  sigaddset(&stops, SIGTERM);
  posix_spawnattr_setsigdefault(&attributes, &stops);
  posix_spawn_file_actions_t files;
  posix_spawn_file_actions_init(&files);
  if (quiet) {
    posix_spawn_file_actions_addopen(&files, STDOUT_FILENO, "/dev/null", O_WRONLY, 0);
    posix_spawn_file_actions_addopen(&files, STDERR_FILENO, "/dev/null", O_WRONLY, 0);
  }
  const int error = posix_spawnp(&pid_, args[0], &files, &attributes, args.data(), environ);
  posix_spawn_file_actions_destroy(&files);
  posix_spawnattr_destroy(&attributes);
  if (error != 0) throw KeelError(KEEL_ERR_IO, "cannot start " + argv[0] + ": " + std::strerror(error));
}

ChildProcess::~ChildProcess() {
  // The leader may be gone while what it started here lives on (a rank stuck in a system call, a
  // daemon mpirun left): the group is asked to end, then made to, so nothing holds a port or a
  // GPU the next attempt needs. A group with no member left just answers ESRCH.
  ::kill(-pid_, SIGTERM);
  if (!reaped_ && !wait(kGraceSeconds)) {
    ::kill(-pid_, SIGKILL);
    wait();
  } else if (::kill(-pid_, 0) == 0) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));  // survivors: a moment to end on SIGTERM
  }
  ::kill(-pid_, SIGKILL);
}

std::optional<int> ChildProcess::wait(double timeout_s) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_s);
  for (;;) {
    int status = 0;
    const pid_t done = waitpid(pid_, &status, timeout_s < 0 ? 0 : WNOHANG);
    if (done == pid_) {
      reaped_ = true;
      return shell_status(status);
    }
    if (done < 0 && errno != EINTR) {
      reaped_ = true;
      return 1;
    }
    if (timeout_s >= 0 && std::chrono::steady_clock::now() >= deadline) return std::nullopt;
    if (timeout_s >= 0) std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
}

void ChildProcess::signal_group(int signal) {
  if (pid_ > 0) ::kill(-pid_, signal);
}

std::string command_text(const std::vector<std::string>& argv) {
  std::string text;
  for (const std::string& a : argv) {
    const bool plain = !a.empty() && a.find_first_not_of("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789"
                                                         "-_./:=,@+%") == std::string::npos;
    std::string quoted = "'";
    for (char c : a) quoted += c == '\'' ? std::string("'\\''") : std::string(1, c);
    text += (text.empty() ? "" : " ") + (plain ? a : quoted + "'");
  }
  return text;
}

}  // namespace keel
