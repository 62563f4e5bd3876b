// The loop: take what the caller handed over, fill the ring up to the queue depth, submit and
// wait for at least one completion, handle every completion that is there, repeat. Pieces of a
// ticket that already failed are dropped unissued; a short transfer goes back to the front of
// the queue for its remainder; EAGAIN and EINTR are retried.
#include "uring_pump.hpp"

#include <sys/eventfd.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <utility>

#include "keel_support/abi_guard.hpp"

namespace keel_offload {

using keel_support::StatusError;

namespace {

constexpr uint64_t kWakeTag = ~uint64_t(0);  // user data of the eventfd read; slots are small

std::string errno_text(int error) { return std::string(std::strerror(error)) + " (errno " + std::to_string(error) + ")"; }

std::string describe(const IoPiece& piece) {
  return std::string("nvme engine: ") + (piece.direction == Direction::read ? "read" : "write") + " of " +
         std::to_string(piece.bytes) + " bytes at offset " + std::to_string(piece.file_offset) + " of \"" +
         *piece.path + "\"";
}

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

UringPump::UringPump(unsigned queue_depth, TicketBook& tickets) : queue_depth_(queue_depth), tickets_(tickets) {
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

void UringPump::submit(std::vector<IoPiece> pieces) {
  std::string broken_error;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (broken_error_.empty()) {
      for (IoPiece& piece : pieces) handed_over_.push_back(piece);
    } else {
      broken_error = broken_error_;
    }
  }
  if (!broken_error.empty()) {
    for (const IoPiece& piece : pieces) tickets_.finish_piece(piece.ticket, broken_error);
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

void UringPump::issue(std::deque<IoPiece>& pending, InFlight& in_flight) {
  while (in_flight.count < queue_depth_ && !pending.empty()) {
    IoPiece piece = pending.front();
    pending.pop_front();
    if (tickets_.failed(piece.ticket)) {
      tickets_.finish_piece(piece.ticket);  // the ticket already carries its error
      continue;
    }
    unsigned slot = in_flight.free_slots.back();
    in_flight.free_slots.pop_back();
    in_flight.slots[slot] = piece;
    in_flight.count++;
    io_uring_sqe* sqe = io_uring_get_sqe(&ring_);
    if (piece.direction == Direction::write) {
      io_uring_prep_write(sqe, piece.fd, piece.buffer, static_cast<unsigned>(piece.bytes), piece.file_offset);
    } else {
      io_uring_prep_read(sqe, piece.fd, piece.buffer, static_cast<unsigned>(piece.bytes), piece.file_offset);
    }
    io_uring_sqe_set_data64(sqe, slot);
  }
}

void UringPump::complete(const io_uring_cqe& cqe, std::deque<IoPiece>& pending, InFlight& in_flight) {
  auto slot = static_cast<unsigned>(cqe.user_data);
  IoPiece piece = in_flight.slots[slot];
  in_flight.free_slots.push_back(slot);
  in_flight.count--;
  int result = cqe.res;
  if (result == -EAGAIN || result == -EINTR) {
    pending.push_front(piece);
  } else if (result < 0) {
    tickets_.finish_piece(piece.ticket, describe(piece) + " failed: " + errno_text(-result));
  } else if (result == 0) {
    tickets_.finish_piece(piece.ticket, describe(piece) + " moved 0 bytes (the file ends early or the disk is full)");
  } else if (static_cast<uint64_t>(result) < piece.bytes) {
    piece.file_offset += result;  // a short transfer: the rest goes again, first in line
    piece.buffer += result;
    piece.bytes -= result;
    pending.push_front(piece);
  } else {
    tickets_.finish_piece(piece.ticket);
  }
}

void UringPump::stop_broken(const std::string& error, std::deque<IoPiece>& pending, InFlight& in_flight) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    broken_error_ = error;
    for (IoPiece& piece : handed_over_) pending.push_back(piece);
    handed_over_.clear();
  }
  // Pieces already in the kernel may still land in callers' buffers: wait for them first (with
  // a time limit, since the failed submit may have left some never issued).
  while (in_flight.count > 0) {
    io_uring_cqe* cqe = nullptr;
    __kernel_timespec limit{1, 0};
    if (io_uring_wait_cqe_timeout(&ring_, &cqe, &limit) < 0) break;
    if (cqe->user_data != kWakeTag) complete(*cqe, pending, in_flight);
    io_uring_cqe_seen(&ring_, cqe);
  }
  for (const IoPiece& piece : pending) tickets_.finish_piece(piece.ticket, error);
  for (unsigned slot = 0; slot < queue_depth_ && in_flight.count > 0; ++slot) {
    bool free = false;
    for (unsigned f : in_flight.free_slots) free = free || f == slot;
    if (!free) tickets_.finish_piece(in_flight.slots[slot].ticket, error);
  }
}

void UringPump::run() {
  std::deque<IoPiece> pending;
  InFlight in_flight;
  in_flight.slots.resize(queue_depth_);
  for (unsigned slot = queue_depth_; slot-- > 0;) in_flight.free_slots.push_back(slot);
  arm_wake();
  for (;;) {
    bool stopping;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      for (IoPiece& piece : handed_over_) pending.push_back(piece);
      handed_over_.clear();
      stopping = stopping_;
    }
    issue(pending, in_flight);
    if (stopping && in_flight.count == 0 && pending.empty()) return;
    int rc = submit_and_wait(ring_, 1);
    if (rc < 0 && rc != -EINTR && rc != -EAGAIN) {
      // The ring itself failed (not one request): nothing more can be issued on it.
      stop_broken("nvme engine: io_uring_submit failed: " + errno_text(-rc), pending, in_flight);
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
        complete(*cqe, pending, in_flight);
      }
    }
    io_uring_cq_advance(&ring_, seen);
  }
}

}  // namespace keel_offload
