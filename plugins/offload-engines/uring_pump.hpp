// The nvme engine's I/O thread: it owns an io_uring, keeps up to queue_depth block requests in
// flight, reaps their completions, resubmits short transfers, and finishes each piece in the
// ticket book. One thread owns the ring, so no lock guards it; the caller hands pieces over
// through a queue and an eventfd that the ring itself waits on.
#pragma once

#include <liburing.h>

#include <cstdint>
#include <deque>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "ticket_book.hpp"

namespace keel_offload {

// One block request: at most the engine's block size, inside one file.
struct IoPiece {
  Ticket ticket;
  Direction direction;
  int fd;
  const std::string* path;  // names the file in messages; the engine's, outlives the pump
  uint64_t file_offset;
  char* buffer;
  uint64_t bytes;
};

// Tests only (the fault-injection seam of tests/unit/offload): called on the pump's thread just
// before each submit with the number of entries about to go to the kernel (the wake-up read
// included); a non-zero return fails that submit with that errno, as a broken ring would.
// nullptr, the default, removes it.
using BeforeSubmitHookForTests = int (*)(unsigned entries_ready);
void set_before_submit_hook_for_tests(BeforeSubmitHookForTests hook);

class UringPump {
 public:
  // Throws KEEL_ERR_IO if the kernel refuses io_uring (disabled by sysctl or seccomp).
  UringPump(unsigned queue_depth, TicketBook& tickets);
  UringPump(const UringPump&) = delete;
  UringPump& operator=(const UringPump&) = delete;
  // Issues and waits for every piece handed over, then stops: callers' buffers may be freed after.
  ~UringPump();

  void submit(std::vector<IoPiece> pieces);

 private:
  struct InFlight {
    std::vector<IoPiece> slots;          // by slot number, the SQE's user data
    std::vector<unsigned> free_slots;
    unsigned count = 0;
  };
  void run();
  void arm_wake();
  void issue(std::deque<IoPiece>& pending, InFlight& in_flight);
  void complete(const io_uring_cqe& cqe, std::deque<IoPiece>& pending, InFlight& in_flight);
  // After the ring itself fails: waits out what is in the kernel, fails every other piece, and
  // makes later submit() calls fail their pieces at once.
  void stop_broken(const std::string& error, std::deque<IoPiece>& pending, InFlight& in_flight);

  unsigned queue_depth_;
  TicketBook& tickets_;
  io_uring ring_{};
  int wake_fd_ = -1;
  uint64_t wake_value_ = 0;  // the eventfd read's target, written by the kernel
  std::mutex mutex_;
  std::deque<IoPiece> handed_over_;
  bool stopping_ = false;
  std::string broken_error_;  // set once the ring failed
  std::thread thread_;  // last: starts once the ring exists
};

}  // namespace keel_offload
