// One group of ranks: an MPI communicator (MPI_ERRORS_RETURN set on it) or, in a process no
// launcher started, a world of one whose collectives are local copies. Every call that blocks
// in MPI (a blocking operation, split, wait) runs armed with the watchdog's deadline (the
// config's timeout_s), so a rank whose peer died or hung ends the world with a message instead
// of hanging in a collective.
#pragma once

#include <keel/comm.h>
#include <mpi.h>

#include <atomic>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "local_mailbox.hpp"
#include "mpi_config.hpp"

// What the ABI calls keel_comm_request: one operation in flight, freed by wait.
struct keel_comm_request {
  MPI_Request mpi = MPI_REQUEST_NULL;              // NULL when the world of one completed it at once
  std::shared_ptr<keel_mpi::LocalReceive> local;   // world of one: a receive waiting for its send
  std::string what;                                // "collective all_reduce", for the timeout message
  std::string stalled_because;                     // the likely cause, for the same message
};

namespace keel_mpi {

class Communicator {
 public:
  // Joins the launcher's world (a duplicate of MPI_COMM_WORLD) or, without one, a world of one.
  static std::unique_ptr<Communicator> create_world(const keel_host* host, const MpiCommConfig& config);
  ~Communicator();
  Communicator(const Communicator&) = delete;
  Communicator& operator=(const Communicator&) = delete;

  const keel_host* host() const { return host_; }
  int rank() const { return rank_; }
  int size() const { return size_; }
  std::unique_ptr<Communicator> split(int32_t color, int32_t key);

  // The comm.h operations; `out` NULL means complete before returning.
  void all_reduce(const void* send, void* recv, size_t count, keel_dtype dtype, int32_t op, keel_comm_request** out);
  void reduce_scatter(const void* send, void* recv, size_t count, keel_dtype dtype, int32_t op,
                      keel_comm_request** out);
  void all_gather(const void* send, void* recv, size_t count, keel_dtype dtype, keel_comm_request** out);
  void broadcast(void* buffer, size_t count, keel_dtype dtype, int32_t root, keel_comm_request** out);
  void send(const void* buffer, size_t count, keel_dtype dtype, int32_t peer, int32_t tag, keel_comm_request** out);
  void recv(void* buffer, size_t count, keel_dtype dtype, int32_t peer, int32_t tag, keel_comm_request** out);
  void barrier();
  // Completes and frees `request`, also when completing it fails.
  void wait(keel_comm_request* request);
  // What this communicator and every one split from it have moved (comm.h's rule).
  keel_comm_counters counters() const;
  // Marks the communicator in use for one operation; a second thread entering meanwhile is
  // refused (comm.h: one thread per communicator at a time). MPI would call the two
  // unordered collectives erroneous and NCCL would deadlock, so the mistake is caught here.
  class ExclusiveUse {
   public:
    explicit ExclusiveUse(Communicator& c, const char* operation);
    ~ExclusiveUse() { communicator_.in_use_.store(false, std::memory_order_release); }
    ExclusiveUse(const ExclusiveUse&) = delete;
    ExclusiveUse& operator=(const ExclusiveUse&) = delete;

   private:
    Communicator& communicator_;
  };
  // Prints "keel: rank R of N: REASON" (R, N in the whole world) and ends every rank.
  [[noreturn]] void abort_world(int32_t exit_code, const std::string& reason) const {
    end_world(exit_code, reason, !is_local());
  }
  // The same; `use_mpi_abort` false only exits this process (mpirun then ends the others), for
  // a thread that may not call MPI.
  [[noreturn]] void end_world(int32_t exit_code, const std::string& reason, bool use_mpi_abort) const;

 private:
  Communicator(const keel_host* host, const MpiCommConfig& config, MPI_Comm comm);  // takes comm
  bool is_local() const { return comm_ == MPI_COMM_NULL; }
  void check_mpi(int code, const char* operation) const;
  int checked_peer(int32_t peer, const char* operation) const;
  void check_tag(int32_t tag, const char* operation) const;
  // Counted here and in every ancestor (a worker thread of the owner may count concurrently).
  void count_call(int op, uint64_t bytes) {
    for (const auto& block : counted_in_) block->calls[op] += 1, block->bytes[op] += bytes;
  }
  // With an MPI communicator: `start` the non-blocking form into request.mpi, or run the
  // `blocking` one (MPI's own, faster than non-blocking plus wait) armed with the watchdog.
  void run_on_mpi(keel_comm_request& request, bool non_blocking, const char* name, const std::function<int()>& blocking,
                  const std::function<int(MPI_Request*)>& start);
  void complete_or_hand_out(std::unique_ptr<keel_comm_request> request, keel_comm_request** out);
  void complete(keel_comm_request& request);
  // A blocking collective's request: no MPI request, only the names the watchdog reports.
  std::unique_ptr<keel_comm_request> new_collective(const char* name) const;

  const keel_host* host_;
  MpiCommConfig config_;
  MPI_Comm comm_;  // owned (freed on destruction); MPI_COMM_NULL in a world of one
  int rank_ = 0, size_ = 1;
  int world_rank_ = 0, world_size_ = 1;  // for abort messages: MPI_Abort ends the whole world
  struct CounterBlock {
    std::atomic<uint64_t> calls[KEEL_COMM_OP_COUNT]{};
    std::atomic<uint64_t> bytes[KEEL_COMM_OP_COUNT]{};
  };
  // This communicator's block first, then its parent's list: a split one's traffic also counts
  // for the communicator it was split from (shared, so a parent may be destroyed first).
  std::vector<std::shared_ptr<CounterBlock>> counted_in_;
  LocalMailbox mailbox_;  // world of one only
  std::atomic<bool> in_use_{false};
};

}  // namespace keel_mpi
