// The base of an offload engine whose storage is synchronous: the author writes an ExtentStore
// (reserve an extent, read a range, write a range, each returning when done) and
// SyncOffloadEngine supplies the rest of keel/offload.h's contract: names, sizes, capacity and
// alignment checked at submit; a ticket per request; a queue and worker threads that run the
// store's reads and writes; each ticket's status and message, carried from the worker to the
// thread that waits (set_error is per thread, so a message set on a worker would be lost);
// wait, wait_all, counters with busy time; and at destroy, the queue drained before the store
// goes. Wrapped by OffloadSlots (offload_slots.hpp), that is a whole offload plugin.
//
// An engine whose I/O is itself asynchronous (io_uring, a DMA queue) implements OffloadEngine
// with TicketBook and ExtentTable directly instead, as the built-in nvme engine does.
#pragma once

#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <list>
#include <memory>
#include <mutex>
#include <new>
#include <shared_mutex>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "keel_support/common/abi_guard.hpp"
#include "keel_support/offload/offload_engine.hpp"
#include "keel_support/offload/offload_extents.hpp"
#include "keel_support/offload/offload_tickets.hpp"

namespace keel_support {

// What an engine author writes. Names, sizes, alignment, bounds and capacity are checked before
// any of these is called; a failure is thrown as StatusError (its code and message reach the
// caller's wait) or any std::exception (KEEL_ERR_INTERNAL). Never called concurrently with
// add_extent; with more than one worker, reads and writes may run concurrently with each other.
class ExtentStore {
 public:
  virtual ~ExtentStore() = default;
  // Reserves extent number `index` (0, 1, ... in the order added) of `bytes` under `name`; its
  // bytes read as zeros until written. On the caller's thread.
  virtual void add_extent(size_t index, const std::string& name, uint64_t bytes) = 0;
  // On a worker thread; returns when the bytes are in place.
  virtual void write(size_t index, uint64_t offset, const void* src, uint64_t bytes) = 0;
  virtual void read(size_t index, uint64_t offset, void* dst, uint64_t bytes) = 0;
};

// The facts describe reports, and how many workers run the store.
struct SyncEngineShape {
  std::string kind;              // "cpu": names the engine in messages ("cpu engine: ...")
  uint64_t alignment_bytes = 0;  // a positive multiple of 4 (the strategy moves floats)
  uint64_t ideal_request_bytes = 0;
  uint64_t capacity_bytes = 0;
  // 1: requests run one at a time in submission order, so a read after a write of the same range
  // sees the write (more than the contract promises). More: they overlap, in any order.
  unsigned worker_threads = 1;
};

class SyncOffloadEngine : public OffloadEngine {
 public:
  SyncOffloadEngine(SyncEngineShape shape, std::unique_ptr<ExtentStore> store)
      : shape_(checked_shape(std::move(shape))),
        store_(std::move(store)),
        extents_(shape_.kind, shape_.capacity_bytes, shape_.alignment_bytes),
        tickets_(shape_.kind) {
    for (unsigned i = 0; i < shape_.worker_threads; ++i) workers_.emplace_back([this] { run_requests(); });
  }
  SyncOffloadEngine(const SyncOffloadEngine&) = delete;
  SyncOffloadEngine& operator=(const SyncOffloadEngine&) = delete;
  // Runs what is queued to the end, then joins the workers; only then does the store go.
  ~SyncOffloadEngine() override {
    {
      std::lock_guard<std::mutex> lock(queue_mutex_);
      stopping_ = true;
    }
    queued_.notify_all();
    for (std::thread& worker : workers_) worker.join();
  }

  const char* kind() const override { return shape_.kind.c_str(); }
  uint64_t alignment_bytes() const override { return shape_.alignment_bytes; }
  uint64_t ideal_request_bytes() const override { return shape_.ideal_request_bytes; }
  uint64_t capacity_bytes() const override { return shape_.capacity_bytes; }

  void add_extent(const std::string& name, uint64_t bytes) override {
    extents_.check_add(name, bytes);  // before the store reserves anything, so a refusal costs nothing
    std::unique_lock<std::shared_mutex> no_requests_running(store_mutex_);
    store_->add_extent(extents_.count(), name, bytes);
    extents_.add(name, bytes);
  }
  uint64_t extent_bytes(const std::string& name) const override { return extents_.bytes_of(extents_.find(name)); }

  Ticket submit_write(const std::string& name, uint64_t offset, const void* src, uint64_t bytes) override {
    return submit(Direction::write, "submit_write", name, offset, const_cast<void*>(src), bytes);
  }
  Ticket submit_read(const std::string& name, uint64_t offset, void* dst, uint64_t bytes) override {
    return submit(Direction::read, "submit_read", name, offset, dst, bytes);
  }
  void wait(Ticket ticket) override { tickets_.wait(ticket); }
  void wait_all() override { tickets_.wait_all(); }
  OffloadCounters counters() const override { return tickets_.counters(); }

 private:
  struct Request {
    Ticket ticket;
    Direction direction;
    const char* verb;
    size_t extent;
    uint64_t offset;
    void* buffer;  // the source of a write is only read
    uint64_t bytes;
  };

  static SyncEngineShape checked_shape(SyncEngineShape shape) {
    const std::string where = (shape.kind.empty() ? std::string("offload") : shape.kind) + " engine: ";
    if (shape.kind.empty()) throw StatusError(KEEL_ERR_INVALID_ARGUMENT, where + "kind is empty");
    if (shape.alignment_bytes == 0 || shape.alignment_bytes % 4 != 0)
      throw StatusError(KEEL_ERR_INVALID_ARGUMENT, where + "alignment_bytes " + std::to_string(shape.alignment_bytes) +
                                                       " is not a positive multiple of 4");
    if (shape.capacity_bytes == 0)
      throw StatusError(KEEL_ERR_INVALID_CONFIG, where + "capacity_bytes is 0; expected the most bytes the engine may hold");
    if (shape.worker_threads == 0) throw StatusError(KEEL_ERR_INVALID_ARGUMENT, where + "worker_threads is 0");
    return shape;
  }

  Ticket submit(Direction direction, const char* verb, const std::string& name, uint64_t offset, void* buffer,
                uint64_t bytes) {
    const size_t extent = extents_.find(name);
    extents_.check_request(verb, extent, offset, buffer, bytes);
    if (bytes == 0) return tickets_.open(0, direction, 0);
    // The queue's node is allocated before the ticket opens and spliced in after: once the
    // ticket exists nothing can fail, so no ticket is left that no worker will finish.
    std::list<Request> request(1);
    const Ticket ticket = tickets_.open(1, direction, bytes);
    request.front() = Request{ticket, direction, verb, extent, offset, buffer, bytes};
    {
      std::lock_guard<std::mutex> lock(queue_mutex_);
      queue_.splice(queue_.end(), request);
    }
    queued_.notify_one();
    return ticket;
  }

  void run_requests() {
    std::unique_lock<std::mutex> lock(queue_mutex_);
    for (;;) {
      queued_.wait(lock, [&] { return stopping_ || !queue_.empty(); });
      if (queue_.empty()) return;  // stopping, and nothing left
      const Request request = queue_.front();
      queue_.pop_front();
      lock.unlock();
      run(request);
      lock.lock();
    }
  }

  // Runs one request on this worker and finishes its ticket, with the error if there was one.
  void run(const Request& request) noexcept {
    keel_status code = KEEL_OK;
    std::string error;
    {
      // Shared: other workers' requests run beside this one; add_extent waits, so neither the
      // store's extents nor the table (read by describe) change underneath.
      std::shared_lock<std::shared_mutex> extents_stay(store_mutex_);
      try {
        try {
          if (request.direction == Direction::write)
            store_->write(request.extent, request.offset, request.buffer, request.bytes);
          else
            store_->read(request.extent, request.offset, request.buffer, request.bytes);
        } catch (const StatusError& e) {
          code = e.code, error = describe(request, e.what());
        } catch (const std::bad_alloc&) {
          code = KEEL_ERR_OUT_OF_MEMORY, error = describe(request, "out of memory");
        } catch (const std::exception& e) {
          code = KEEL_ERR_INTERNAL, error = describe(request, e.what());
        } catch (...) {
          code = KEEL_ERR_INTERNAL, error = describe(request, "unknown exception");
        }
      } catch (...) {  // the message itself could not be built
        code = KEEL_ERR_OUT_OF_MEMORY, error = "out of memory";
      }
    }
    tickets_.finish_piece(request.ticket, error, code);
  }

  // "cpu engine: submit_write of extent "m" at offset 0, 4096 bytes: <what>".
  std::string describe(const Request& request, const char* what) const {
    return shape_.kind + " engine: " + request.verb + " of extent \"" + extents_.name_of(request.extent) +
           "\" at offset " + std::to_string(request.offset) + ", " + std::to_string(request.bytes) + " bytes: " + what;
  }

  const SyncEngineShape shape_;
  std::unique_ptr<ExtentStore> store_;
  ExtentTable extents_;
  TicketBook tickets_;
  std::shared_mutex store_mutex_;  // add_extent exclusive; reads and writes shared
  std::mutex queue_mutex_;
  std::condition_variable queued_;
  std::list<Request> queue_;  // a list: a request's node is allocated before its ticket opens
  bool stopping_ = false;
  std::vector<std::thread> workers_;  // last: they start once everything above exists
};

}  // namespace keel_support
