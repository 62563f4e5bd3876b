// Ctrl-C and SIGTERM during `keel run`. The first SIGINT or SIGTERM asks the run to stop: the
// step in progress finishes, every rank agrees on the stop at the same step (a rank that was
// not signalled stops with the others, so none waits in a collective for a peer that left),
// the plugins are torn down as at a normal end (offload tiers removed), and keel exits 130
// (SIGINT) or 143 (SIGTERM), saying so. A second signal ends the process at once, as the
// default action would; a tier it leaves is removed by the next run's start-up.
#pragma once

#include <stdexcept>
#include <string>

#include "mesh/mesh.h"

namespace keel {

// Installs the handlers (sigaction, SA_RESTART). Idempotent; the CLI calls it, embedders do not.
void install_stop_signal_handlers();

// The signal that asked this process to stop (SIGINT, SIGTERM), or 0.
int pending_stop_signal();

// The stop signal every rank of `world` agrees on after a step: this rank's, or SIGTERM when only
// another rank was signalled (one small all_gather per step on more than one rank). 0: go on.
int agreed_stop_signal(const CommGroup& world);

// Thrown between steps when a stop was agreed; keel run catches it and exits 128 + signal.
struct StopRequested : std::runtime_error {
  StopRequested(int signal_number, const std::string& message)
      : std::runtime_error(message), signal_number(signal_number) {}
  int signal_number;
};

// The name a person knows the signal by: "SIGINT", "SIGTERM", "signal N".
std::string signal_name(int signal_number);

}  // namespace keel
