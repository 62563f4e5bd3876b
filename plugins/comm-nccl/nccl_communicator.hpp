// One group of ranks as an NCCL communicator on the backend's CUDA device and stream. NCCL runs
// non-blocking (ncclConfig.blocking = 0): init and split return at once and are polled with
// ncclCommGetAsyncError against the config's deadline, and every operation is queued on the
// backend's stream with an event behind it that the watchdog (nccl_watchdog.hpp) looks at, so a
// rank whose peer died or hung ends the world with a message instead of hanging on the GPU.
//
// Completion: comm.h's blocking form and wait both return once the operation is queued on the
// stream (after everything the backend issued before it; later backend ops see its result).
// Host code reads the result through the backend (copy, synchronize, an event), as the ABI's
// ordering rule asks; barrier alone blocks the host until the stream has drained.
#pragma once

#include <cuda_runtime_api.h>
#include <keel/comm.h>
#include <nccl.h>

#include <atomic>
#include <chrono>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include <keel_support/comm/comm_slots.hpp>  // defines: KEEL_COMM_OPERATIONS
#include <keel_support/comm/comm_state.hpp>  // defines: CommState

#include "nccl_config.hpp"

namespace keel_nccl {

// Throws StatusError (KEEL_ERR_IO) naming `what` and CUDA's error when `error` is not cudaSuccess.
void check_cuda(cudaError_t error, const std::string& what);

// A recv from this rank itself, paired by tag with a send as a device copy on the stream; set
// done (or error, when the message did not fit) by the send that matches it.
struct SelfReceive {
  void* buffer;
  size_t bytes;
  int32_t tag;
  bool done = false;
  std::string error;
};

}  // namespace keel_nccl

// What the ABI calls keel_comm_request: an operation already queued on the stream, so waiting
// on it only frees it (the stream orders it before whatever the backend issues next); a recv
// from itself may still wait for its send.
struct keel_comm_request {
  std::string what;
  std::shared_ptr<keel_nccl::SelfReceive> self;  // a recv from this rank itself, else NULL
};

namespace keel_nccl {

class Communicator : public keel_support::CommState {
 public:
  static constexpr const char* kSource = "comm nccl";  // the messages' prefix

  // Joins the launcher's world (the unique id broadcast over MPI from rank 0) or, without a
  // launcher, a world of one, on the backend's device and queue.
  static std::unique_ptr<Communicator> create_world_on(const keel_host* host, const NcclCommConfig& config,
                                                       const keel_backend_api* backend, void* backend_obj);
  ~Communicator();
  int device() const { return device_; }
  std::unique_ptr<Communicator> split(int32_t color, int32_t key);

  // The comm.h operations (nccl_operations.cpp), queued on the stream; `out` NULL or not, they
  // return once queued.
  KEEL_COMM_OPERATIONS(KEEL_DECLARE_COMM_OPERATION)
  // An all_reduce of one int32, then the host waits (under the deadline) for the stream.
  void barrier();
  void wait(keel_comm_request* request);
  // QUEUED for memory on this communicator's own CUDA device, NONE for anything else.
  int32_t reaches(keel_device device) const;

  // Prints "keel: rank R of N: REASON" (R, N in the whole world), aborts NCCL so no kernel
  // waits on a peer any more, then MPI_Abort (a launcher's world) or exit ends every rank.
  [[noreturn]] void abort_world(int32_t exit_code, const std::string& reason);

  // For the watchdog: the oldest queued operation still unfinished past the deadline, or an
  // error NCCL reported in the background; "" when all is well. Thread-safe.
  std::string overdue_or_failed(std::chrono::steady_clock::time_point now);

 private:
  Communicator(const keel_host* host, const NcclCommConfig& config, int device, cudaStream_t stream);
  // Polls ncclCommGetAsyncError on `comm` until it leaves ncclInProgress, ending the world past
  // the deadline; throws StatusError on an NCCL error.
  void settle(ncclComm_t comm, const std::string& what);
  void check_nccl(ncclResult_t result, const std::string& what);
  // Records an event behind the operation just queued, for the watchdog, and counts it.
  void queued(int op, uint64_t bytes, const std::string& what);
  void hand_out(const std::string& what, keel_comm_request** out);
  template <typename Reduce>
  void sum_bf16_in_fp32(const void* send, void* recv, size_t elements, size_t result_elements, const char* name,
                        Reduce&& reduce);
  // A rank sending to itself (a world of one): NCCL's separate send and recv would deadlock on
  // one stream, so they pair up here by tag, in order, as device copies.
  void self_send(const void* buffer, size_t bytes, int32_t tag);
  std::shared_ptr<SelfReceive> self_recv(void* buffer, size_t bytes, int32_t tag);

  NcclCommConfig config_;
  int device_;
  cudaStream_t stream_;  // the backend's; borrowed
  ncclComm_t comm_ = nullptr;


  struct InFlight {
    cudaEvent_t event;
    std::chrono::steady_clock::time_point queued_at;
    std::string what;
  };
  std::mutex in_flight_mutex_;  // the watchdog reads in_flight_ from its own thread
  std::deque<InFlight> in_flight_;
  std::vector<cudaEvent_t> spare_events_;

  // Sends to itself waiting for a recv (staged in device memory), and recvs waiting for a send.
  struct SelfMessage {
    int32_t tag;
    void* staged;  // cudaMallocAsync'd on the stream, freed by the recv that takes it
    size_t bytes;
  };
  std::deque<SelfMessage> unreceived_;
  std::deque<std::shared_ptr<SelfReceive>> posted_;
};

}  // namespace keel_nccl
