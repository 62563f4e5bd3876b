// One worker thread copies in submission order; memcpy at host bandwidth needs no more, and
// order makes a read after a write of the same range see the write (more than the contract
// promises, which is fine).
#include "cpu_engine.hpp"

#include <cstring>
#include <utility>

#include "keel_support/abi_guard.hpp"

namespace keel_offload {

using keel_support::StatusError;

namespace {

// Large enough that the per-request overhead (a lock, a wake-up) is noise beside the copy.
constexpr uint64_t kCpuIdealRequestBytes = uint64_t(4) << 20;

const CpuEngineConfig& checked(const CpuEngineConfig& config) {
  if (config.capacity_bytes == 0) {
    throw StatusError(KEEL_ERR_INVALID_CONFIG, "cpu engine: capacity_bytes is 0; expected the most bytes of host "
                                               "memory the engine may hold (> 0)");
  }
  uint64_t alignment = config.alignment_bytes;
  if (alignment < sizeof(void*) || (alignment & (alignment - 1)) != 0) {
    throw StatusError(KEEL_ERR_INVALID_CONFIG, "cpu engine: alignment_bytes " + std::to_string(alignment) +
                                                   " is not a power of two of at least " +
                                                   std::to_string(sizeof(void*)));
  }
  return config;
}

}  // namespace

CpuEngine::CpuEngine(const CpuEngineConfig& config)
    : config_(checked(config)),
      extents_("cpu", config.capacity_bytes, config.alignment_bytes),
      tickets_("cpu"),
      worker_([this] { run_copies(); }) {}

CpuEngine::~CpuEngine() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
  }
  queued_.notify_all();
  worker_.join();
}

uint64_t CpuEngine::ideal_request_bytes() const { return kCpuIdealRequestBytes; }

void CpuEngine::add_extent(const std::string& name, uint64_t bytes) {
  extents_.check_add(name, bytes);  // before allocating, so a refused extent costs nothing
  AlignedBuffer memory(bytes, config_.alignment_bytes);
  extents_.add(name, bytes);
  storage_.push_back(std::move(memory));
}

uint64_t CpuEngine::extent_bytes(const std::string& name) const { return extents_.bytes_of(extents_.find(name)); }

Ticket CpuEngine::submit_write(const std::string& name, uint64_t offset, const void* src, uint64_t bytes) {
  size_t index = extents_.find(name);
  extents_.check_request("submit_write", index, offset, src, bytes);
  return queue_copy(Direction::write, storage_[index].data() + offset, src, bytes);
}

Ticket CpuEngine::submit_read(const std::string& name, uint64_t offset, void* dst, uint64_t bytes) {
  size_t index = extents_.find(name);
  extents_.check_request("submit_read", index, offset, dst, bytes);
  return queue_copy(Direction::read, dst, storage_[index].data() + offset, bytes);
}

Ticket CpuEngine::queue_copy(Direction direction, void* to, const void* from, uint64_t bytes) {
  if (bytes == 0) return tickets_.open(0, direction, 0);
  // The queue's node is allocated before the ticket opens and spliced in after: once the ticket
  // exists nothing can fail, so no ticket is left that the worker will never finish.
  std::list<Copy> copy(1);
  Ticket ticket = tickets_.open(1, direction, bytes);
  copy.front() = {ticket, to, from, bytes};
  {
    std::lock_guard<std::mutex> lock(mutex_);
    copies_.splice(copies_.end(), copy);
  }
  queued_.notify_one();
  return ticket;
}

void CpuEngine::run_copies() {
  std::unique_lock<std::mutex> lock(mutex_);
  for (;;) {
    queued_.wait(lock, [&] { return stopping_ || !copies_.empty(); });
    if (copies_.empty()) return;  // stopping, and nothing left
    Copy copy = copies_.front();
    copies_.pop_front();
    lock.unlock();
    std::memcpy(copy.to, copy.from, copy.bytes);
    tickets_.finish_piece(copy.ticket);
    lock.lock();
  }
}

}  // namespace keel_offload
