// The offload engine interface: a tier (host memory, files on an NVMe drive) that holds named
// extents and moves byte ranges between them and caller buffers asynchronously. Each method is
// meant to become one slot of the future C table (abi/keel/offload.h), so arguments stay plain:
// names, byte offsets and sizes, raw pointers, integer tickets. Errors are thrown as
// keel_support::StatusError (a keel_status code and a message naming what, where and what was
// expected), which guard() turns into the ABI's error path.
//
// The contract every engine keeps:
// - An extent is reserved up front with add_extent(name, bytes); its bytes read as zeros until
//   written (a read of an extent never written returns zeros, never an error).
// - Buffers, offsets and sizes must be multiples of alignment_bytes(); a request that is not, or
//   that reaches past its extent's end, is refused at submit time with a message saying which.
// - submit_* returns at once with a ticket; the caller's buffer must stay alive and untouched
//   until wait(ticket) or wait_all() returns. Many requests may be in flight; they complete in
//   any order, so a read of a range whose write is still in flight may see old or new bytes.
// - wait(ticket) rethrows that request's I/O error; wait_all() waits for every request and
//   rethrows the first error among those not yet waited on.
// - Engines are driven from one caller thread; they run their own threads inside.
#pragma once

#include <cstdint>
#include <string>

namespace keel_offload {

// A request's completion handle; 0 is never issued.
using Ticket = uint64_t;

// Totals since the engine was created.
struct OffloadCounters {
  uint64_t bytes_read = 0;          // moved from the tier into caller buffers
  uint64_t bytes_written = 0;       // moved from caller buffers into the tier
  uint64_t requests_completed = 0;  // submit_read/submit_write calls that finished
  double busy_seconds = 0;          // wall time during which at least one request was unfinished
};

class OffloadEngine {
 public:
  virtual ~OffloadEngine() = default;

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

  // Copies `bytes` from `src` to extent `name` at `offset`.
  virtual Ticket submit_write(const std::string& name, uint64_t offset, const void* src, uint64_t bytes) = 0;
  // Copies `bytes` from extent `name` at `offset` to `dst`.
  virtual Ticket submit_read(const std::string& name, uint64_t offset, void* dst, uint64_t bytes) = 0;
  virtual void wait(Ticket ticket) = 0;
  virtual void wait_all() = 0;

  virtual OffloadCounters counters() const = 0;
};

}  // namespace keel_offload
