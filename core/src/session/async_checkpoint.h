// Asynchronous checkpoints (train.checkpoint.async): the training thread only takes the snapshot
// (checkpoint.h snapshot_checkpoint: the state copied to host memory, the temporary folder made),
// and a thread of this writer writes, fsyncs, gathers the manifest and publishes it over a
// communicator no other thread uses (the mesh's checkpoint_io) while training goes on. One save
// is in flight at a time: the next save, the end of the run and a stop wait for it, and its
// failure surfaces there. Until it is published, `latest` names the previous checkpoint, so a
// crash during the background write loses only this save.
#pragma once

#include <atomic>
#include <chrono>
#include <exception>
#include <functional>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "checkpoint/checkpoint.h"
#include "mesh/mesh.h"

namespace keel {

class AsyncCheckpointWriter {
 public:
  explicit AsyncCheckpointWriter(const CommGroup& group) : group_(group) {}
  // Waits for the write in flight; a failure then is only printed (the run is ending anyway).
  ~AsyncCheckpointWriter();
  AsyncCheckpointWriter(const AsyncCheckpointWriter&) = delete;
  AsyncCheckpointWriter& operator=(const AsyncCheckpointWriter&) = delete;

  struct Written {
    std::string folder;
    int64_t step = 0;
    double seconds = 0;  // from start to published, in the background
  };

  // Starts writing `pending` (of `step`); a write already in flight is waited for first.
  // `files_written`: write_checkpoint's hook, run on the writer's thread.
  std::optional<Written> start(PendingCheckpoint pending, int64_t step, std::function<void()> files_written = {});
  // Waits for the write in flight, if any, and returns what it wrote; rethrows its failure.
  std::optional<Written> wait();
  bool in_flight() const { return thread_.joinable(); }
  // Whether the write in flight has already failed (wait() then rethrows at once): the session
  // looks after each step, so a failure ends the run then rather than at the next save.
  bool failed() const { return failed_.load(std::memory_order_acquire); }
  // Where snapshots copy the state (checkpoint.h snapshot_checkpoint): one arena, reused by
  // every save, free again once wait() returned.
  std::vector<float>& arena() { return arena_; }

 private:
  const CommGroup& group_;
  std::thread thread_;
  Written written_;
  std::exception_ptr failure_;
  std::atomic<bool> failed_{false};
  std::vector<float> arena_;
};

}  // namespace keel
