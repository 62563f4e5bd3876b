// A ticket stays in the book until it is waited on, so its error is reported exactly once: by
// wait(ticket) or by the wait_all() that covers it.
#include "ticket_book.hpp"

#include <new>

#include "keel_support/abi_guard.hpp"

namespace keel_offload {

using keel_support::StatusError;

Ticket TicketBook::open(uint64_t pieces, Direction direction, uint64_t bytes) {
  std::lock_guard<std::mutex> lock(mutex_);
  Ticket ticket = next_ticket_;
  // The one step that can fail (out of memory) comes first: if it throws, nothing has changed,
  // and no unfinished count is left behind for wait_all() to wait on for ever.
  const Request& request = requests_.emplace(ticket, Request{pieces, direction, bytes, {}}).first->second;
  next_ticket_++;
  if (pieces == 0) {
    finish_request(request);
  } else {
    if (unfinished_++ == 0) busy_since_ = std::chrono::steady_clock::now();
  }
  return ticket;
}

void TicketBook::finish_request(const Request& request) {
  if (!request.error.empty()) return;
  (request.direction == Direction::read ? counters_.bytes_read : counters_.bytes_written) += request.bytes;
  counters_.requests_completed++;
}

void TicketBook::finish_pieces(Ticket ticket, uint64_t count, const std::string& error) {
  if (count == 0) return;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    Request& request = requests_.at(ticket);
    if (!error.empty() && request.error.empty()) {
      try {
        request.error = error;
      } catch (const std::bad_alloc&) {
        request.error = "out of memory";  // short enough to need no allocation: the pieces still finish
      }
    }
    request.pieces_left -= count;
    if (request.pieces_left != 0) return;
    finish_request(request);
    if (--unfinished_ == 0) {
      counters_.busy_seconds +=
          std::chrono::duration<double>(std::chrono::steady_clock::now() - busy_since_).count();
    }
  }
  finished_.notify_all();
}

bool TicketBook::failed(Ticket ticket) const {
  std::lock_guard<std::mutex> lock(mutex_);
  auto found = requests_.find(ticket);
  return found != requests_.end() && !found->second.error.empty();
}

void TicketBook::wait(Ticket ticket) {
  std::unique_lock<std::mutex> lock(mutex_);
  if (ticket == 0 || ticket >= next_ticket_) {
    throw StatusError(KEEL_ERR_INVALID_ARGUMENT, engine_kind_ + " engine: wait: ticket " + std::to_string(ticket) +
                                                     " was never issued by this engine");
  }
  finished_.wait(lock, [&] {
    auto found = requests_.find(ticket);
    return found == requests_.end() || found->second.pieces_left == 0;
  });
  auto found = requests_.find(ticket);
  if (found == requests_.end()) return;
  std::string error = std::move(found->second.error);
  requests_.erase(found);
  if (!error.empty()) throw StatusError(KEEL_ERR_IO, error);
}

void TicketBook::wait_all() {
  std::unique_lock<std::mutex> lock(mutex_);
  finished_.wait(lock, [&] { return unfinished_ == 0; });
  std::string first_error;  // of the earliest failed ticket
  Ticket first_failed = 0;
  uint64_t failures = 0;
  for (auto& [ticket, request] : requests_) {
    if (request.error.empty()) continue;
    failures++;
    if (first_failed == 0 || ticket < first_failed) {
      first_failed = ticket;
      first_error = request.error;
    }
  }
  requests_.clear();
  if (failures == 0) return;
  if (failures > 1) first_error += " (and " + std::to_string(failures - 1) + " more failed requests)";
  throw StatusError(KEEL_ERR_IO, first_error);
}

OffloadCounters TicketBook::counters() const {
  std::lock_guard<std::mutex> lock(mutex_);
  OffloadCounters now = counters_;
  if (unfinished_ != 0) {
    now.busy_seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - busy_since_).count();
  }
  return now;
}

}  // namespace keel_offload
