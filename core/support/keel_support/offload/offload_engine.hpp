// An offload engine in C++: the interface that keel_support::OffloadSlots turns into the C table
// of keel/offload.h, so an engine is written with strings, exceptions and unique_ptrs and the
// slots do the ABI's checks and error path once. Its methods mirror the table's slots and keep
// their contract (keel/offload.h); errors are thrown as keel_support::StatusError, which guard()
// turns into a status and a message on the calling thread.
//
// Most engines do not implement this directly: SyncOffloadEngine (offload_engine_base.hpp) does,
// around an ExtentStore that only adds extents and reads and writes them synchronously.
#pragma once

#include <cstdint>
#include <string>

namespace keel_support {

// A request's completion handle; 0 is never issued, so callers may keep it for "no request".
using Ticket = uint64_t;

// Totals since the engine was created (keel_offload_counters).
struct OffloadCounters {
  uint64_t bytes_read = 0;          // moved from the tier into caller buffers
  uint64_t bytes_written = 0;       // moved from caller buffers into the tier
  uint64_t requests_completed = 0;  // submit_read/submit_write calls that finished without error
  double busy_seconds = 0;          // wall time during which at least one request was unfinished
};

class OffloadEngine {
 public:
  virtual ~OffloadEngine() = default;  // finishes what is in flight first

  virtual const char* kind() const = 0;  // "nvme", "cpu": names the engine in messages
  // Buffers, offsets, sizes and extent sizes must be multiples of this.
  virtual uint64_t alignment_bytes() const = 0;
  // The smallest single request that keeps the engine's whole pipeline busy.
  virtual uint64_t ideal_request_bytes() const = 0;
  // The most bytes all extents together may hold.
  virtual uint64_t capacity_bytes() const = 0;

  // Reserves `bytes` (a multiple of alignment_bytes()) under a new, non-empty `name`.
  virtual void add_extent(const std::string& name, uint64_t bytes) = 0;
  // The size of extent `name`; throws KEEL_ERR_NOT_FOUND if there is none.
  virtual uint64_t extent_bytes(const std::string& name) const = 0;

  // Copies `bytes` from `src` to extent `name` at `offset`; returns at once.
  virtual Ticket submit_write(const std::string& name, uint64_t offset, const void* src, uint64_t bytes) = 0;
  // Copies `bytes` from extent `name` at `offset` to `dst`; returns at once.
  virtual Ticket submit_read(const std::string& name, uint64_t offset, void* dst, uint64_t bytes) = 0;
  virtual void wait(Ticket ticket) = 0;
  virtual void wait_all() = 0;

  virtual OffloadCounters counters() const = 0;
};

}  // namespace keel_support
