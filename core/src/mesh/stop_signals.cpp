// The stop-signal handlers (stop_signals.h): async-signal-safe, they only record the signal,
// write a fixed line with write(2), and on a second signal restore the default and re-raise.
#include "mesh/stop_signals.h"

#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <cstring>

#include "mesh/collectives.h"

namespace keel {
namespace {

std::atomic<int> stop_signal{0};

void write_text(const char* text) {
  ssize_t ignored = ::write(STDERR_FILENO, text, std::strlen(text));
  (void)ignored;
}

void on_stop_signal(int signal_number) {
  int expected = 0;
  if (!stop_signal.compare_exchange_strong(expected, signal_number)) {
    // Asked twice: stop now, as if keel handled nothing.
    ::signal(signal_number, SIG_DFL);
    ::raise(signal_number);
    return;
  }
  write_text(signal_number == SIGINT ? "\nkeel: SIGINT: stopping after this step (again to stop at once)\n"
                                     : "\nkeel: SIGTERM: stopping after this step (again to stop at once)\n");
}

}  // namespace

void install_stop_signal_handlers() {
  struct sigaction action {};
  action.sa_handler = on_stop_signal;
  sigemptyset(&action.sa_mask);
  action.sa_flags = SA_RESTART;
  sigaction(SIGINT, &action, nullptr);
  sigaction(SIGTERM, &action, nullptr);
}

int pending_stop_signal() { return stop_signal.load(); }

std::string signal_name(int signal_number) {
  if (signal_number == SIGINT) return "SIGINT";
  if (signal_number == SIGTERM) return "SIGTERM";
  return "signal " + std::to_string(signal_number);
}

int agreed_stop_signal(const CommGroup& world) {
  const int mine = pending_stop_signal();
  if (world.alone()) return mine;
  const double signalled = sum_in_rank_order(world, mine ? 1.0 : 0.0);
  return mine ? mine : signalled > 0 ? SIGTERM : 0;
}

}  // namespace keel
