// The nvme engine's I/O thread: it owns an io_uring, keeps up to queue_depth block requests in
// flight, reaps their completions, resubmits short transfers, and finishes each piece in the
// ticket book. One thread owns the ring, so no lock guards it; the caller hands requests over
// through a queue and an eventfd that the ring itself waits on. Requests are cut into block
// pieces only as queue slots free up, so a request of any size costs the same small memory.
#pragma once

#include <keel_support/offload/offload_tickets.hpp>
#include <liburing.h>

#include <cstdint>
#include <list>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace keel_offload {

using keel_support::Direction;
using keel_support::Ticket;
using keel_support::TicketBook;

// What is left to issue of one caller request, inside one file: the pump cuts it into pieces of
// at most block_bytes from the front.
struct IoRequest {
  Ticket ticket;
  Direction direction;
  int fd;
  const std::string* path;  // names the file in messages; the engine's, outlives the pump
  uint64_t file_offset;
  char* buffer;
  uint64_t bytes;
  uint64_t block_bytes;
};

// The number of pieces `bytes` is cut into (the count a ticket is opened with).
inline uint64_t pieces_in(uint64_t bytes, uint64_t block_bytes) { return (bytes + block_bytes - 1) / block_bytes; }

// A list, not a vector: the engine allocates a request's node before it opens the ticket, and
// handing it over is a splice, which cannot fail.
using IoRequests = std::list<IoRequest>;

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

  // Takes the requests' nodes (their tickets already open). After the ring broke, finishes
  // their tickets at once with its error.
  void submit(IoRequests requests);

 private:
  // One block request in the ring.
  struct IoPiece {
    Ticket ticket;
    Direction direction;
    int fd;
    const std::string* path;
    uint64_t file_offset;
    char* buffer;
    uint64_t bytes;
  };
  void run();
  void arm_wake();
  void issue();
  IoPiece release_slot(uint64_t slot);
  void complete(const io_uring_cqe& cqe);
  // Calls `visit` with the user data of each entry prepared but not yet taken by the kernel.
  template <class Visit>
  void visit_entries_not_taken(Visit visit) const;
  unsigned pieces_in_kernel() const;
  // After the ring itself fails: fails the pieces the kernel never took, waits out (however
  // long) the ones it did, fails everything else, and makes later submit() calls fail at once.
  void stop_broken(const std::string& error);
  static std::string describe(const IoPiece& piece);

  unsigned queue_depth_;
  TicketBook& tickets_;
  io_uring ring_{};
  int wake_fd_ = -1;
  uint64_t wake_value_ = 0;  // the eventfd read's target, written by the kernel

  std::mutex mutex_;  // guards the three below
  IoRequests handed_over_;
  bool stopping_ = false;
  std::string broken_error_;  // set once the ring failed

  // The pump thread's own (no lock): requests not yet fully cut, pieces to issue again before
  // any new one (short transfers' remainders; at most one per slot, room reserved up front), and
  // the pieces in the ring by slot number, the entries' user data.
  IoRequests requests_;
  std::vector<IoPiece> again_;
  std::vector<IoPiece> slots_;
  std::vector<unsigned> free_slots_;
  unsigned in_flight_ = 0;

  std::thread thread_;  // last: starts once the ring exists
};

}  // namespace keel_offload
