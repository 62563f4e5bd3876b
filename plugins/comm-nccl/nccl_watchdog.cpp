// The watchdog thread and its list of communicators (see nccl_watchdog.hpp).
#include "nccl_watchdog.hpp"

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <thread>
#include <vector>

#include "nccl_communicator.hpp"

namespace keel_nccl {
namespace {

// The status a rank exits with when it ends the world because an operation timed out or failed.
constexpr int32_t kWatchdogExitCode = 1;
// How late past its deadline a stalled operation may be noticed.
constexpr auto kCheckPeriod = std::chrono::milliseconds(100);

std::mutex g_watchdog_mutex;
std::condition_variable g_wake;
std::vector<Communicator*> g_watched;
std::thread g_thread;
// Bumped when the last communicator leaves: the running thread then ends, even if a new
// communicator (and a new thread) arrives before it has noticed.
unsigned g_generation = 0;

thread_local bool t_is_watchdog = false;

void watch(unsigned generation) {
  t_is_watchdog = true;
  std::unique_lock<std::mutex> lock(g_watchdog_mutex);
  while (!g_wake.wait_for(lock, kCheckPeriod, [generation] { return g_generation != generation; })) {
    const auto now = std::chrono::steady_clock::now();
    for (Communicator* communicator : g_watched) {
      const std::string reason = communicator->overdue_or_failed(now);
      // The lock stays held: the stalled thread cannot destroy the communicator meanwhile.
      if (!reason.empty()) communicator->abort_world(kWatchdogExitCode, reason);  // does not return
    }
  }
}

}  // namespace

void watch_communicator(Communicator* communicator) {
  std::lock_guard<std::mutex> lock(g_watchdog_mutex);
  g_watched.push_back(communicator);
  if (!g_thread.joinable()) g_thread = std::thread(watch, g_generation);
}

void stop_watching(Communicator* communicator) {
  std::thread finished;
  {
    std::lock_guard<std::mutex> lock(g_watchdog_mutex);
    g_watched.erase(std::remove(g_watched.begin(), g_watched.end(), communicator), g_watched.end());
    if (g_watched.empty()) {
      ++g_generation;
      finished = std::move(g_thread);
    }
  }
  g_wake.notify_all();
  if (finished.joinable()) finished.join();
}

void hold_watchdog() {
  if (!t_is_watchdog) g_watchdog_mutex.lock();  // never released: the process ends
}

}  // namespace keel_nccl
