// The watchdog thread and its list of armed calls (see mpi_watchdog.hpp).
#include "mpi_watchdog.hpp"

#include <condition_variable>
#include <mutex>
#include <sstream>
#include <thread>

#include "mpi_communicator.hpp"
#include "mpi_process.hpp"
#include "peer_liveness.hpp"

namespace keel_mpi {
namespace {

using Clock = std::chrono::steady_clock;

// The status a rank exits with when it ends the world because a call timed out.
constexpr int32_t kTimeoutExitCode = 1;
// How late past its deadline a stalled call may be noticed.
constexpr auto kCheckPeriod = std::chrono::milliseconds(100);

std::mutex g_watchdog_mutex;
std::condition_variable g_stop_requested;
bool g_stopping = false;
std::list<ArmedCall> g_armed;
std::thread g_thread;

std::string seconds_text(double seconds) {
  std::ostringstream text;
  text << seconds;
  return text.str();
}

void watch() {
  std::unique_lock<std::mutex> lock(g_watchdog_mutex);
  while (!g_stop_requested.wait_for(lock, kCheckPeriod, [] { return g_stopping; })) {
    const Clock::time_point now = Clock::now();
    for (const ArmedCall& call : g_armed) {
      if (now <= call.deadline) continue;
      // The lock stays held: the stalled call cannot disarm and free what `call` points to.
      const std::string liveness = peer_liveness_report();
      const std::string reason = *call.what + " timed out after " + seconds_text(call.timeout_s) + "s (" +
                                 *call.stalled_because + (liveness.empty() ? "" : "; " + liveness) + ")";
      // Below MPI_THREAD_MULTIPLE this thread may not call MPI_Abort; a rank that exits without
      // MPI_Finalize makes mpirun end the others just the same.
      call.communicator->end_world(kTimeoutExitCode, reason, mpi_thread_multiple());  // does not return
    }
  }
}

}  // namespace

Armed::Armed(const Communicator& communicator, double timeout_s, const std::string& what,
             const std::string& stalled_because) {
  const auto timeout = std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(timeout_s));
  const auto deadline = Clock::now() + timeout;
  std::lock_guard<std::mutex> lock(g_watchdog_mutex);
  entry_ = g_armed.insert(g_armed.end(), ArmedCall{deadline, timeout_s, &communicator, &what, &stalled_because});
}

Armed::~Armed() {
  std::lock_guard<std::mutex> lock(g_watchdog_mutex);
  g_armed.erase(entry_);
}

void start_watchdog() {
  std::lock_guard<std::mutex> lock(g_watchdog_mutex);
  g_stopping = false;
  g_thread = std::thread(watch);
}

void stop_watchdog() {
  {
    std::lock_guard<std::mutex> lock(g_watchdog_mutex);
    g_stopping = true;
  }
  g_stop_requested.notify_all();
  if (g_thread.joinable()) g_thread.join();
}

}  // namespace keel_mpi
