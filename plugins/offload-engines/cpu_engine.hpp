// The "cpu" offload engine: extents in host memory, one aligned allocation each, with a cap on
// the bytes it may hold. Copies run on a worker thread so its caller sees the same asynchronous
// interface as the nvme engine and can overlap them with compute. (Pinning for a device
// backend comes with the offload ABI kind.)
#pragma once

#include <condition_variable>
#include <cstdint>
#include <list>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "aligned_buffer.hpp"
#include "extent_table.hpp"
#include "offload_engine.hpp"
#include "ticket_book.hpp"

namespace keel_offload {

struct CpuEngineConfig {
  uint64_t capacity_bytes = 0;   // the most host memory all extents together may use; > 0
  uint64_t alignment_bytes = 64; // a power of two; the extents' allocations are aligned to it
};

class CpuEngine final : public OffloadEngine {
 public:
  // Throws KEEL_ERR_INVALID_CONFIG for a zero capacity or an alignment that is not a power of two.
  explicit CpuEngine(const CpuEngineConfig& config);
  ~CpuEngine() override;  // finishes the queued copies, then frees the extents

  const char* kind() const override { return "cpu"; }
  uint64_t alignment_bytes() const override { return config_.alignment_bytes; }
  uint64_t ideal_request_bytes() const override;
  uint64_t capacity_bytes() const override { return config_.capacity_bytes; }

  void add_extent(const std::string& name, uint64_t bytes) override;
  uint64_t extent_bytes(const std::string& name) const override;

  Ticket submit_write(const std::string& name, uint64_t offset, const void* src, uint64_t bytes) override;
  Ticket submit_read(const std::string& name, uint64_t offset, void* dst, uint64_t bytes) override;
  void wait(Ticket ticket) override { tickets_.wait(ticket); }
  void wait_all() override { tickets_.wait_all(); }
  OffloadCounters counters() const override { return tickets_.counters(); }

 private:
  struct Copy {
    Ticket ticket;
    void* to;
    const void* from;
    uint64_t bytes;
  };
  Ticket queue_copy(Direction direction, void* to, const void* from, uint64_t bytes);
  void run_copies();

  CpuEngineConfig config_;
  ExtentTable extents_;
  std::vector<AlignedBuffer> storage_;  // by extent index
  TicketBook tickets_;
  std::mutex mutex_;
  std::condition_variable queued_;
  std::list<Copy> copies_;  // a list: a copy's node is allocated before its ticket opens
  bool stopping_ = false;
  std::thread worker_;  // last: starts once everything above exists
};

}  // namespace keel_offload
