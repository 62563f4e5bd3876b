// The comm table of a plugin, written once: every slot of keel_comm_api runs its body under guard
// (no exception crosses the ABI), checks its output pointers, holds the communicator for one
// thread while an operation talks to the other ranks, and forwards to the communicator class.
// A plugin then writes only validate_config, create_world and create_world_on, which parse its
// section and join the world:
//
//   const keel_comm_api kApi = keel_support::CommSlots<Communicator>::table(validate_config, create_world,
//                                                                           create_world_on);
//
// The communicator class derives from CommState (comm_state.hpp: host, rank, size, counters and
// the one-thread rule) and provides:
//   static constexpr const char* kSource;   // "comm mpi": the messages' prefix
//   std::unique_ptr<Communicator> split(int32_t color, int32_t key);
//   KEEL_COMM_OPERATIONS(KEEL_DECLARE_COMM_OPERATION)   // the data-moving operations, below
//   void barrier(); void wait(keel_comm_request*);      // wait completes and frees the request
//   int32_t reaches(keel_device) const;                 // comm.h's KEEL_COMM_REACH_*
//   void abort_world(int32_t exit_code, const std::string& reason);  // does not return
// A handle the plugin hands out is a Communicator* (create_world's *out_comm); destroy deletes it.
#pragma once

#include <keel/comm.h>

#include <algorithm>
#include <cstring>
#include <string>

#include "keel_support/comm/comm_state.hpp"
#include "keel_support/common/abi_guard.hpp"

// comm.h's data-moving operations, listed once: OP(name, (arguments), parameters...). A
// communicator class declares them with KEEL_COMM_OPERATIONS(KEEL_DECLARE_COMM_OPERATION) and
// defines each with these parameters; CommSlots makes a slot of each. The request out-pointer
// comes last: NULL asks the call to complete before it returns.
#define KEEL_COMM_OPERATIONS(OP)                                                                                 \
  OP(all_reduce, (send, recv, count, dtype, op, out), const void* send, void* recv, size_t count, keel_dtype dtype, \
     int32_t op, keel_comm_request** out)                                                                        \
  OP(reduce_scatter, (send, recv, count, dtype, op, out), const void* send, void* recv, size_t count,             \
     keel_dtype dtype, int32_t op, keel_comm_request** out)                                                      \
  OP(all_gather, (send, recv, count, dtype, out), const void* send, void* recv, size_t count, keel_dtype dtype,   \
     keel_comm_request** out)                                                                                    \
  OP(broadcast, (buffer, count, dtype, root, out), void* buffer, size_t count, keel_dtype dtype, int32_t root,    \
     keel_comm_request** out)                                                                                    \
  OP(send, (buffer, count, dtype, peer, tag, out), const void* buffer, size_t count, keel_dtype dtype,            \
     int32_t peer, int32_t tag, keel_comm_request** out)                                                         \
  OP(recv, (buffer, count, dtype, peer, tag, out), void* buffer, size_t count, keel_dtype dtype, int32_t peer,    \
     int32_t tag, keel_comm_request** out)                                                                       \
  OP(all_to_all_v, (send, send_counts, recv, recv_counts, dtype, out), const void* send, const size_t* send_counts, \
     void* recv, const size_t* recv_counts, keel_dtype dtype, keel_comm_request** out)
#define KEEL_DECLARE_COMM_OPERATION(name, args, ...) void name(__VA_ARGS__);

namespace keel_support {

template <typename Communicator>
struct CommSlots {
  static void require_out(const void* out, const char* what) {
    if (!out) throw StatusError(KEEL_ERR_INVALID_ARGUMENT, std::string(what) + " is NULL");
  }

  // Runs `body` on a live communicator, with its host carrying any error message.
  template <typename Body>
  static keel_status with(void* comm, Body&& body) noexcept {
    auto* communicator = static_cast<Communicator*>(comm);
    if (!communicator) return KEEL_ERR_INVALID_ARGUMENT;  // no host to carry a message
    return guard(communicator->host(), Communicator::kSource, [&] { body(*communicator); });
  }

  // The same for an operation that talks to the other ranks: refused while another thread is in one.
  template <typename Body>
  static keel_status exclusively(void* comm, const char* operation, Body&& body) noexcept {
    return with(comm, [&](Communicator& c) {
      OneThreadAtATime::Turn turn(c.one_thread(), operation);
      body(c);
    });
  }

  static void destroy(void* comm) { delete static_cast<Communicator*>(comm); }

  static keel_status rank(void* comm, int32_t* out_rank) {
    return with(comm, [&](Communicator& c) {
      require_out(out_rank, "rank: out_rank");
      *out_rank = c.rank();
    });
  }
  static keel_status size(void* comm, int32_t* out_size) {
    return with(comm, [&](Communicator& c) {
      require_out(out_size, "size: out_size");
      *out_size = c.size();
    });
  }
  static keel_status split(void* comm, int32_t color, int32_t key, void** out_comm) {
    return exclusively(comm, "split", [&](Communicator& c) {
      require_out(out_comm, "split: out_comm");
      *out_comm = c.split(color, key).release();
    });
  }

  // One slot per operation of KEEL_COMM_OPERATIONS, each run under exclusively().
#define KEEL_COMM_OPERATION_SLOT_(name, args, ...)                                          \
  static keel_status name(void* comm, __VA_ARGS__) {                                        \
    return exclusively(comm, #name, [&](Communicator& c) { c.name args; });                 \
  }
  KEEL_COMM_OPERATIONS(KEEL_COMM_OPERATION_SLOT_)
#undef KEEL_COMM_OPERATION_SLOT_

  static keel_status barrier(void* comm) {
    return exclusively(comm, "barrier", [&](Communicator& c) { c.barrier(); });
  }
  static keel_status wait(void* comm, keel_comm_request* request) {
    return exclusively(comm, "wait", [&](Communicator& c) {
      require_out(request, "wait: request");
      c.wait(request);
    });
  }

  static keel_status counters(void* comm, keel_comm_counters* out) {
    return with(comm, [&](Communicator& c) {
      require_out(out, "counters: out");
      if (out->struct_size < sizeof(out->struct_size))
        throw StatusError(KEEL_ERR_INVALID_ARGUMENT, "counters: out->struct_size is not set");
      // A caller built against an older, shorter struct gets the prefix it knows.
      keel_comm_counters value = c.counters();
      value.struct_size = out->struct_size;
      std::memcpy(out, &value, std::min(out->struct_size, sizeof value));
    });
  }
  static keel_status reaches(void* comm, keel_device device, int32_t* out_reach) {
    return with(comm, [&](Communicator& c) {
      require_out(out_reach, "reaches: out_reach");
      *out_reach = c.reaches(device);
    });
  }
  static keel_status abort_world(void* comm, int32_t exit_code, const char* reason) {
    return with(comm, [&](Communicator& c) { c.abort_world(exit_code, reason ? reason : "(no reason)"); });
  }

  // The whole 0.19 table around the plugin's own three slots.
  static constexpr keel_comm_api table(decltype(keel_comm_api::validate_config) validate_config,
                                       decltype(keel_comm_api::create_world) create_world,
                                       decltype(keel_comm_api::create_world_on) create_world_on) {
    return keel_comm_api{sizeof(keel_comm_api), validate_config, create_world, destroy, rank, size, split,
                         all_reduce, reduce_scatter, all_gather, broadcast, send, recv, barrier, wait, counters,
                         abort_world, create_world_on, reaches, all_to_all_v};
  }
};

}  // namespace keel_support
