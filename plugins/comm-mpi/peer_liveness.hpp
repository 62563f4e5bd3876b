// Peer liveness: a heartbeat between ranks outside MPI, so a rank whose collective timed out can
// say which peers went silent (a host whose link went down, a rank frozen by the kernel) rather
// than only that something did. MPI cannot tell: a collective waiting on an unreachable host looks
// the same as one waiting on a rank that never called it.
//
// Each rank binds a UDP socket on its own address (its hostname's, else its first non-loopback
// interface's), the world exchanges addresses once (an all-gather when the first world is made,
// every rank takes part), and a thread sends a small datagram to each watched peer every
// `interval` and notes when each peer was last heard. Peers watched: every other rank up to 64
// ranks, else the 32 either side on the ring (bounded traffic at scale). Datagrams carry a nonce
// of this job, so a stray one from another job is ignored.
#pragma once

#include <mpi.h>

#include <string>

namespace keel_mpi {

// Gathers every rank's host name and starts the heartbeat on `world` (collective over it: every
// rank calls it when its first world is made; later calls return at once); interval_s 0 turns
// the heartbeat off. A rank that cannot open its socket turns it off for the whole world (every
// rank sees the same gathered table): liveness is a diagnostic, never a failure.
void start_peer_liveness(MPI_Comm world, double interval_s);
void stop_peer_liveness();

// "2 hosts (h1: ranks 0, 2; h2: ranks 1, 3)", for the start-up line; "" before the start.
std::string world_hosts_summary();

// For a timeout message: "no heartbeat for 7.2 s from host h2 (ranks 1, 3)", or "every peer still
// answers heartbeats" when none went silent, or "" when the heartbeat is off. Thread-safe.
std::string peer_liveness_report();

}  // namespace keel_mpi
