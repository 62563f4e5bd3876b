// The loop: take what the caller handed over, fill the ring up to the queue depth (cutting the
// next piece off the first request each time), submit and wait for at least one completion,
// handle every completion that is there, repeat. Pieces of a ticket that already failed are
// dropped unissued; a short transfer goes back to be issued again first; EAGAIN and EINTR are
// retried. A submit refused with EAGAIN (the kernel short of resources) is retried only after a
// piece the kernel holds came back, which frees some, rather than at once in a busy loop.
//
// When the ring itself fails, no wait has a time limit: a piece the kernel holds may still write
// into its caller's buffer, so its ticket finishes only when the kernel gives the piece back,
// however slow the device; a signal only interrupts the wait, which goes on.
#include "uring_pump.hpp"
#include "errno_text.hpp"

#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <utility>

#include "keel_support/common/abi_guard.hpp"

namespace keel_offload {

using keel_support::StatusError;

namespace {

constexpr uint64_t kWakeTag = ~uint64_t(0);  // user data of the eventfd read; slots are small

std::atomic<BeforeSubmitHookForTests> before_submit_hook{nullptr};

// io_uring_submit_and_wait, unless a test's hook fails it first.
int submit_and_wait(io_uring& ring, unsigned wait_nr) {
  if (BeforeSubmitHookForTests hook = before_submit_hook.load()) {
    if (int error = hook(io_uring_sq_ready(&ring))) return -error;
  }
  return io_uring_submit_and_wait(&ring, wait_nr);
}

}  // namespace

void set_before_submit_hook_for_tests(BeforeSubmitHookForTests hook) { before_submit_hook.store(hook); }

std::string UringPump::describe(const IoPiece& piece) {
  return std::string("nvme engine: ") + (piece.direction == Direction::read ? "read" : "write") + " of " +
         std::to_string(piece.bytes) + " bytes at offset " + std::to_string(piece.file_offset) + " of \"" +
         *piece.path + "\"";
}

UringPump::UringPump(unsigned queue_depth, TicketBook& tickets) : queue_depth_(queue_depth), tickets_(tickets) {
  again_.reserve(queue_depth);
  slots_.resize(queue_depth);
  for (unsigned slot = queue_depth; slot-- > 0;) free_slots_.push_back(slot);
  wake_fd_ = eventfd(0, EFD_CLOEXEC);
  if (wake_fd_ < 0) {
    int error = errno;
    throw StatusError(KEEL_ERR_IO, "nvme engine: eventfd failed: " + errno_text(error));
  }
  // One entry beyond the depth for the eventfd read that wakes the thread.
  int rc = io_uring_queue_init(queue_depth + 1, &ring_, 0);
  if (rc < 0) {
    close(wake_fd_);
    throw StatusError(KEEL_ERR_IO, "nvme engine: io_uring_queue_init with " + std::to_string(queue_depth + 1) +
                                       " entries failed: " + errno_text(-rc) +
                                       "; io_uring may be disabled (sysctl kernel.io_uring_disabled, or a seccomp "
                                       "filter in a container)");
  }
  thread_ = std::thread([this] { run(); });
}

UringPump::~UringPump() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
  }
  uint64_t one = 1;
  (void)!write(wake_fd_, &one, sizeof one);
  thread_.join();
  io_uring_queue_exit(&ring_);
  close(wake_fd_);
}

void UringPump::submit(IoRequests requests) {
  bool broken;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    broken = !broken_error_.empty();
    if (!broken) handed_over_.splice(handed_over_.end(), requests);
  }
  if (broken) {  // broken_error_ is written once, before it reads non-empty: no lock needed to read it
    for (const IoRequest& request : requests) {
      tickets_.finish_pieces(request.ticket, pieces_in(request.bytes, request.block_bytes), broken_error_);
    }
    return;
  }
  uint64_t one = 1;
  (void)!write(wake_fd_, &one, sizeof one);  // an eventfd write of 1 only fails at 2^64 - 2 pending
}

void UringPump::arm_wake() {
  io_uring_sqe* sqe = io_uring_get_sqe(&ring_);  // never null: the ring has an entry for it
  io_uring_prep_read(sqe, wake_fd_, &wake_value_, sizeof wake_value_, 0);
  io_uring_sqe_set_data64(sqe, kWakeTag);
}

void UringPump::issue() {
  while (in_flight_ < queue_depth_) {
    IoPiece piece;
    if (!again_.empty()) {
      piece = again_.back();
      again_.pop_back();
    } else if (!requests_.empty()) {
      IoRequest& request = requests_.front();
      if (tickets_.failed(request.ticket)) {  // the ticket already carries its error: drop the rest unissued
        tickets_.finish_pieces(request.ticket, pieces_in(request.bytes, request.block_bytes));
        requests_.pop_front();
        continue;
      }
      uint64_t bytes = std::min(request.block_bytes, request.bytes);
      piece = {request.ticket, request.direction, request.fd, request.path, request.file_offset, request.buffer, bytes};
      request.file_offset += bytes;
      request.buffer += bytes;
      request.bytes -= bytes;
      if (request.bytes == 0) requests_.pop_front();
    } else {
      return;
    }
    if (tickets_.failed(piece.ticket)) {
      tickets_.finish_piece(piece.ticket);
      continue;
    }
    unsigned slot = free_slots_.back();
    free_slots_.pop_back();
    slots_[slot] = piece;
    in_flight_++;
    io_uring_sqe* sqe = io_uring_get_sqe(&ring_);
    if (piece.direction == Direction::write) {
      io_uring_prep_write(sqe, piece.fd, piece.buffer, static_cast<unsigned>(piece.bytes), piece.file_offset);
    } else {
      io_uring_prep_read(sqe, piece.fd, piece.buffer, static_cast<unsigned>(piece.bytes), piece.file_offset);
    }
    io_uring_sqe_set_data64(sqe, slot);
  }
}

UringPump::IoPiece UringPump::release_slot(uint64_t slot) {
  free_slots_.push_back(static_cast<unsigned>(slot));  // never grows past its first size
  in_flight_--;
  return slots_[slot];
}

void UringPump::complete(const io_uring_cqe& cqe) {
  IoPiece piece = release_slot(cqe.user_data);
  int result = cqe.res;
  if (result == -EAGAIN || result == -EINTR) {
    again_.push_back(piece);
  } else if (result < 0) {
    tickets_.finish_piece(piece.ticket, describe(piece) + " failed: " + errno_text(-result));
  } else if (result == 0) {
    tickets_.finish_piece(piece.ticket, describe(piece) + " moved 0 bytes (the file ends early or the disk is full)");
  } else if (static_cast<uint64_t>(result) < piece.bytes) {
    piece.file_offset += result;  // a short transfer: the rest goes again, before any new piece
    piece.buffer += result;
    piece.bytes -= result;
    again_.push_back(piece);
  } else {
    tickets_.finish_piece(piece.ticket);
  }
}

template <class Visit>
void UringPump::visit_entries_not_taken(Visit visit) const {
  // Entries between the kernel's head and our tail; liburing maps entry i to sqes[i & mask].
  for (unsigned entry = *ring_.sq.khead; entry != ring_.sq.sqe_tail; ++entry) {
    visit(ring_.sq.sqes[entry & ring_.sq.ring_mask].user_data);
  }
}

unsigned UringPump::pieces_in_kernel() const {
  unsigned not_taken = 0;
  visit_entries_not_taken([&](uint64_t tag) { not_taken += tag != kWakeTag; });
  return in_flight_ - not_taken;
}

void UringPump::stop_broken(const std::string& error) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    broken_error_ = error;
    requests_.splice(requests_.end(), handed_over_);
  }
  // Entries the kernel has not taken never will be (nothing is submitted again): their pieces
  // fail now.
  visit_entries_not_taken([&](uint64_t tag) {
    if (tag != kWakeTag) tickets_.finish_piece(release_slot(tag).ticket, error);
  });
  // The others are in the kernel and may still land in callers' buffers: wait for every one.
  std::string wait_error;
  while (in_flight_ > 0) {
    io_uring_cqe* cqe = nullptr;
    int rc = io_uring_wait_cqe(&ring_, &cqe);
    if (rc == -EINTR || rc == -EAGAIN) continue;  // a signal, not an answer: wait on
    if (rc < 0) {
      // Only a ring whose descriptor is gone gets here: nothing more can be learnt of the pieces.
      wait_error = "; waiting for the requests in the kernel then failed too: " + errno_text(-rc);
      break;
    }
    if (cqe->user_data != kWakeTag) complete(*cqe);  // may put a short transfer's rest in again_
    io_uring_cqe_seen(&ring_, cqe);
  }
  for (unsigned slot = 0; slot < queue_depth_ && in_flight_ > 0; ++slot) {
    if (std::find(free_slots_.begin(), free_slots_.end(), slot) == free_slots_.end()) {
      tickets_.finish_piece(release_slot(slot).ticket, error + wait_error);
    }
  }
  for (const IoPiece& piece : again_) tickets_.finish_piece(piece.ticket, error);
  again_.clear();
  for (const IoRequest& request : requests_) {
    tickets_.finish_pieces(request.ticket, pieces_in(request.bytes, request.block_bytes), error);
  }
  requests_.clear();
}

void UringPump::run() {
  arm_wake();
  for (;;) {
    bool stopping;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      requests_.splice(requests_.end(), handed_over_);
      stopping = stopping_;
    }
    issue();
    if (stopping && in_flight_ == 0 && again_.empty() && requests_.empty()) return;
    int rc = submit_and_wait(ring_, 1);
    if (rc == -EAGAIN && pieces_in_kernel() > 0) {
      io_uring_cqe* returned;
      (void)io_uring_wait_cqe(&ring_, &returned);  // reaped below; after an EINTR the loop comes back here
    } else if (rc < 0 && rc != -EINTR && rc != -EAGAIN) {
      // The ring itself failed (not one request): nothing more can be issued on it.
      stop_broken("nvme engine: io_uring_submit failed: " + errno_text(-rc) +
                  "; the engine's ring takes no more requests");
      return;
    }
    unsigned head;
    unsigned seen = 0;
    io_uring_cqe* cqe;
    io_uring_for_each_cqe(&ring_, head, cqe) {
      seen++;
      if (cqe->user_data == kWakeTag) {
        arm_wake();
      } else {
        complete(*cqe);
      }
    }
    io_uring_cq_advance(&ring_, seen);
  }
}

}  // namespace keel_offload
