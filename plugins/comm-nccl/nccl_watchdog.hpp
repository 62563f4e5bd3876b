// Bounded time for what NCCL runs on the GPU. Operations return once queued, so nothing on the
// host blocks inside NCCL where a deadline could be armed (as the mpi plugin arms its blocking
// calls); instead every live communicator is registered here, and a thread looks every 100 ms
// at each one's oldest unfinished operation and at NCCL's background error. Past the deadline,
// or on an error, it ends the world naming the operation (Communicator::abort_world aborts NCCL,
// so no kernel keeps waiting for a dead peer).
#pragma once

namespace keel_nccl {

class Communicator;

// The thread starts with the first registration and is joined when the last one leaves, so the
// library can be unloaded after its last communicator is destroyed.
void watch_communicator(Communicator* communicator);
void stop_watching(Communicator* communicator);
// Stops the watchdog from looking at any communicator again, for a thread that is ending the
// process (the watchdog itself, when it is the one ending it, already holds it).
void hold_watchdog();

}  // namespace keel_nccl
