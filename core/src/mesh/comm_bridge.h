// A communicator as the core hands it out, keeping the backend's ordering whatever the comm
// plugin can reach (comm.h KEEL_COMM_REACH_*). Each group of the mesh is used for buffers of one
// kind: backend memory (the plugins' groups, pipeline activations) or host memory (the core's
// own sums and strings). For that memory the bridge asks the plugin's reach once and then
//   QUEUED  hands the plugin's own table out unchanged (nccl on its device's memory);
//   SYNCED  drains the backend's queue before each operation (mpi on the cpu backend's memory,
//           where draining is free), so a collective never reads a buffer an op is still writing;
//   NONE    stages every buffer through the other side: backend memory through the backend's
//           host memory (mpi on a GPU's memory), host memory through backend memory (nccl and
//           the core's host sums), with synchronous copies, which are ordered after the queue.
// The plugins see an ordinary keel_comm_api table; splits of a bridged communicator are bridged.
#pragma once

#include <keel/keel.h>
#include <keel_support/common/backend_ops.hpp>

#include <string>

namespace keel {

enum class BufferSide { kHost, kBackend };

struct BridgedComm {
  const keel_comm_api* comm = nullptr;
  void* obj = nullptr;
};

// The reach of `comm` for memory on `side` (a comm built before 0.8: SYNCED on host memory and on
// a backend of KEEL_DEVICE_CPU, else NONE).
int32_t comm_reach(const keel_comm_api* comm, void* comm_obj, keel_support::BackendOps backend, BufferSide side);

// Wraps comm_obj (ownership passes to the result: its destroy destroys both) for buffers on
// `side`. With reach QUEUED the plugin's own table and object come back unchanged.
BridgedComm bridge_comm(const keel_comm_api* comm, void* comm_obj, keel_support::BackendOps backend, BufferSide side);

// "staged through host memory", for the one log line a run prints per staging kind.
std::string describe_reach(int32_t reach, BufferSide side);

}  // namespace keel
