// Completion bookkeeping for an offload engine: a ticket per request, the pieces of it still
// unfinished, its first error (status and message), and the counters. The engine's own threads
// finish pieces; the caller's thread waits. Busy time runs while any ticket is unfinished.
//
// Why errors travel as text here: keel_host's set_error is per thread, so a message a worker
// sets is lost to the caller. A worker records its error on the ticket instead; wait throws it on
// the waiting thread, where guard() sets it. A ticket stays in the book until it is waited on, so
// its error is reported exactly once: by wait(ticket) or by the wait_all() that covers it.
#pragma once

#include <keel/types.h>

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <new>
#include <string>
#include <unordered_map>
#include <utility>

#include "keel_support/common/abi_guard.hpp"
#include "keel_support/offload/offload_engine.hpp"

namespace keel_support {

enum class Direction { read, write };

class TicketBook {
 public:
  explicit TicketBook(std::string engine_kind) : engine_kind_(std::move(engine_kind)) {}

  // A new ticket for a request cut into `pieces` (0: done at once) moving `bytes` in `direction`.
  // If it throws (out of memory), no ticket was opened.
  Ticket open(uint64_t pieces, Direction direction, uint64_t bytes) {
    std::lock_guard<std::mutex> lock(mutex_);
    Ticket ticket = next_ticket_;
    // The one step that can fail (out of memory) comes first: if it throws, nothing has changed,
    // and no unfinished count is left behind for wait_all() to wait on for ever.
    const Request& request = requests_.emplace(ticket, Request{pieces, direction, bytes, KEEL_OK, {}}).first->second;
    next_ticket_++;
    if (pieces == 0) {
      finish_request(request);
    } else if (unfinished_++ == 0) {
      busy_since_ = std::chrono::steady_clock::now();
    }
    return ticket;
  }

  // One piece of `ticket` ended; a non-empty `error` marks the ticket failed with `code` (the
  // first error is kept). The request's bytes are counted when its last piece ends without error.
  void finish_piece(Ticket ticket, const std::string& error = std::string(), keel_status code = KEEL_ERR_IO) {
    finish_pieces(ticket, 1, error, code);
  }
  // `count` pieces of `ticket` ended at once (the rest of a request dropped unissued).
  void finish_pieces(Ticket ticket, uint64_t count, const std::string& error = std::string(),
                     keel_status code = KEEL_ERR_IO) {
    if (count == 0) return;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      Request& request = requests_.at(ticket);
      if (!error.empty() && request.error.empty()) {
        request.code = code;
        try {
          request.error = error;
        } catch (const std::bad_alloc&) {
          request.error = "out of memory";  // short enough to need no allocation: the pieces still finish
        }
      }
      request.pieces_left -= count;
      if (request.pieces_left != 0) return;
      finish_request(request);
      if (--unfinished_ == 0)
        counters_.busy_seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - busy_since_).count();
    }
    finished_.notify_all();
  }

  // Whether `ticket` already failed, so its remaining pieces can be dropped unissued.
  bool failed(Ticket ticket) const {
    std::lock_guard<std::mutex> lock(mutex_);
    auto found = requests_.find(ticket);
    return found != requests_.end() && !found->second.error.empty();
  }

  // Blocks until `ticket` is finished; throws its error. A ticket already waited on (or covered
  // by wait_all) returns at once; 0 or one never issued is KEEL_ERR_INVALID_ARGUMENT.
  void wait(Ticket ticket) {
    std::unique_lock<std::mutex> lock(mutex_);
    if (ticket == 0 || ticket >= next_ticket_)
      throw StatusError(KEEL_ERR_INVALID_ARGUMENT, engine_kind_ + " engine: wait: ticket " + std::to_string(ticket) +
                                                       " was never issued by this engine");
    finished_.wait(lock, [&] {
      auto found = requests_.find(ticket);
      return found == requests_.end() || found->second.pieces_left == 0;
    });
    auto found = requests_.find(ticket);
    if (found == requests_.end()) return;
    const keel_status code = found->second.code;
    std::string error = std::move(found->second.error);
    requests_.erase(found);
    if (!error.empty()) throw StatusError(code, error);
  }

  // Blocks until every ticket is finished, forgets them all, and throws the first error (of the
  // earliest failed ticket, with how many more failed).
  void wait_all() {
    std::unique_lock<std::mutex> lock(mutex_);
    finished_.wait(lock, [&] { return unfinished_ == 0; });
    std::string first_error;
    keel_status first_code = KEEL_OK;
    Ticket first_failed = 0;
    uint64_t failures = 0;
    for (auto& [ticket, request] : requests_) {
      if (request.error.empty()) continue;
      failures++;
      if (first_failed == 0 || ticket < first_failed) {
        first_failed = ticket;
        first_error = request.error;
        first_code = request.code;
      }
    }
    requests_.clear();
    if (failures == 0) return;
    if (failures > 1) first_error += " (and " + std::to_string(failures - 1) + " more failed requests)";
    throw StatusError(first_code, first_error);
  }

  OffloadCounters counters() const {
    std::lock_guard<std::mutex> lock(mutex_);
    OffloadCounters now = counters_;
    if (unfinished_ != 0)
      now.busy_seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - busy_since_).count();
    return now;
  }

 private:
  struct Request {
    uint64_t pieces_left;
    Direction direction;
    uint64_t bytes;
    keel_status code;   // of the first error
    std::string error;  // empty: no error (yet)
  };

  void finish_request(const Request& request) {  // holds mutex_
    if (!request.error.empty()) return;
    (request.direction == Direction::read ? counters_.bytes_read : counters_.bytes_written) += request.bytes;
    counters_.requests_completed++;
  }

  std::string engine_kind_;
  mutable std::mutex mutex_;
  std::condition_variable finished_;
  std::unordered_map<Ticket, Request> requests_;
  Ticket next_ticket_ = 1;
  uint64_t unfinished_ = 0;
  std::chrono::steady_clock::time_point busy_since_;
  OffloadCounters counters_;
};

}  // namespace keel_support
