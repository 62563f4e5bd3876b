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

#include <keel_support/comm/comm_slots.hpp>  // defines: KEEL_COMM_OPERATIONS
#include <keel_support/comm/comm_state.hpp>  // defines: CommState

#include "local_mailbox.hpp"
#include "mpi_config.hpp"

// What the ABI calls keel_comm_request: one operation in flight, freed by wait.
struct keel_comm_request {
  MPI_Request mpi = MPI_REQUEST_NULL;              // NULL when the world of one completed it at once
  std::shared_ptr<keel_mpi::LocalReceive> local;   // world of one: a receive waiting for its send
  std::string what;                                // "collective all_reduce", for the timeout message
  std::string stalled_because;                     // the likely cause, for the same message
  std::vector<int> all_to_all_layout;              // all_to_all_v's int counts and displacements, kept until MPI is done
};

namespace keel_mpi {

class Communicator : public keel_support::CommState {
 public:
  static constexpr const char* kSource = "comm mpi";  // the messages' prefix

  // Joins the launcher's world (a duplicate of MPI_COMM_WORLD) or, without one, a world of one.
  static std::unique_ptr<Communicator> create_world(const keel_host* host, const MpiCommConfig& config);
  ~Communicator();
  std::unique_ptr<Communicator> split(int32_t color, int32_t key);

  // The comm.h operations (mpi_operations.cpp); `out` NULL means complete before returning.
  KEEL_COMM_OPERATIONS(KEEL_DECLARE_COMM_OPERATION)
  void barrier();
  // Completes and frees `request`, also when completing it fails.
  void wait(keel_comm_request* request);
  // MPI moves host memory; the core drains the backend's queue before each call on it.
  int32_t reaches(keel_device device) const {
    return device.device_type == KEEL_DEVICE_CPU ? KEEL_COMM_REACH_SYNCED : KEEL_COMM_REACH_NONE;
  }
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
  void check_tag(int32_t tag, const char* operation) const;
  // With an MPI communicator: `start` the non-blocking form into request.mpi, or run the
  // `blocking` one (MPI's own, faster than non-blocking plus wait) armed with the watchdog.
  void run_on_mpi(keel_comm_request& request, bool non_blocking, const char* name, const std::function<int()>& blocking,
                  const std::function<int(MPI_Request*)>& start);
  void complete_or_hand_out(std::unique_ptr<keel_comm_request> request, keel_comm_request** out);
  void complete(keel_comm_request& request);
  // A blocking collective's request: no MPI request, only the names the watchdog reports.
  std::unique_ptr<keel_comm_request> new_collective(const char* name) const;

  MpiCommConfig config_;
  MPI_Comm comm_;  // owned (freed on destruction); MPI_COMM_NULL in a world of one
  int world_rank_ = 0, world_size_ = 1;  // for abort messages: MPI_Abort ends the whole world
  LocalMailbox mailbox_;  // world of one only
};

}  // namespace keel_mpi
