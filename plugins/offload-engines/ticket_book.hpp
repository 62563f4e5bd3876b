// Completion bookkeeping both engines share: a ticket per request, the pieces of it still
// unfinished, its first error, and the counters. The engine's worker thread finishes pieces; the
// caller's thread waits. Busy time runs while any ticket is unfinished.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <string>
#include <unordered_map>

#include "offload_engine.hpp"

namespace keel_offload {

enum class Direction { read, write };

class TicketBook {
 public:
  explicit TicketBook(std::string engine_kind) : engine_kind_(std::move(engine_kind)) {}

  // A new ticket for a request cut into `pieces` (0: done at once) moving `bytes` in `direction`.
  // If it throws (out of memory), no ticket was opened.
  Ticket open(uint64_t pieces, Direction direction, uint64_t bytes);
  // One piece of `ticket` ended; a non-empty `error` marks the ticket failed (the first error is
  // kept). The request's bytes are counted when its last piece ends without error.
  void finish_piece(Ticket ticket, const std::string& error = std::string()) { finish_pieces(ticket, 1, error); }
  // `count` pieces of `ticket` ended at once (the rest of a request dropped unissued).
  void finish_pieces(Ticket ticket, uint64_t count, const std::string& error = std::string());
  // Whether `ticket` already failed, so its remaining pieces can be dropped unissued.
  bool failed(Ticket ticket) const;

  // Blocks until `ticket` is finished; throws its error as KEEL_ERR_IO. A ticket already waited on
  // (or covered by wait_all) returns at once; one never issued is KEEL_ERR_INVALID_ARGUMENT.
  void wait(Ticket ticket);
  // Blocks until every ticket is finished, forgets them all, and throws the first error.
  void wait_all();
  OffloadCounters counters() const;

 private:
  struct Request {
    uint64_t pieces_left;
    Direction direction;
    uint64_t bytes;
    std::string error;
  };
  void finish_request(const Request& request);  // holds mutex_

  std::string engine_kind_;
  mutable std::mutex mutex_;
  std::condition_variable finished_;
  std::unordered_map<Ticket, Request> requests_;
  Ticket next_ticket_ = 1;
  uint64_t unfinished_ = 0;
  std::chrono::steady_clock::time_point busy_since_;
  OffloadCounters counters_;
};

}  // namespace keel_offload
