// The background writer of asynchronous checkpoints (see async_checkpoint.h).
#include "session/async_checkpoint.h"

#include <memory>

#include "host/log.h"

namespace keel {

std::optional<AsyncCheckpointWriter::Written> AsyncCheckpointWriter::start(PendingCheckpoint pending, int64_t step,
                                                                          std::function<void()> files_written) {
  std::optional<Written> previous = wait();
  written_ = Written{"", step, 0};
  failure_ = nullptr;
  // The thread owns the snapshot (a shared_ptr: std::thread copies its callable's state).
  auto owned = std::make_shared<PendingCheckpoint>(std::move(pending));
  thread_ = std::thread([this, owned, files_written = std::move(files_written)] {
    const auto begin = std::chrono::steady_clock::now();
    try {
      written_.folder = write_checkpoint(*owned, group_, files_written);
    } catch (...) {
      failure_ = std::current_exception();
      failed_.store(true, std::memory_order_release);
    }
    written_.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - begin).count();
  });
  return previous;
}

std::optional<AsyncCheckpointWriter::Written> AsyncCheckpointWriter::wait() {
  if (!thread_.joinable()) return std::nullopt;
  thread_.join();
  failed_ = false;
  if (failure_) std::rethrow_exception(std::exchange(failure_, nullptr));
  return written_;
}

AsyncCheckpointWriter::~AsyncCheckpointWriter() {
  try {
    wait();
  } catch (const std::exception& e) {
    write_stderr_line(std::string("keel: the checkpoint being written in the background failed: ") + e.what());
  }
}

}  // namespace keel
