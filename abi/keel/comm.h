/* The comm kind (0.4): collectives and point-to-point on one group of ranks, and splitting it
   into groups (the core builds the pp × dp × tp mesh with split; share/doc/keel/plugin-contract.md §4, §6). The `mpi`
   plugin works on host memory; a device communicator (NCCL) works on its backend's memory.
   Threading: one communicator is used from one thread at a time (the mpi plugin refuses a
   second thread that enters while the first is inside a call); a request may be waited on from
   the thread that issued it only. Two threads that both communicate, such as a strategy's
   training thread and its communication thread, each need a communicator: split one off. */
#ifndef KEEL_COMM_H
#define KEEL_COMM_H

#include "keel/backend.h"
#include "keel/host.h"
#include "keel/types.h"

#ifdef __cplusplus
extern "C" {
#endif

enum { KEEL_REDUCE_SUM = 0, KEEL_REDUCE_MAX = 1 };

/* Operations, as counted by keel_comm_counters. */
enum {
  KEEL_COMM_ALL_REDUCE = 0,
  KEEL_COMM_REDUCE_SCATTER = 1,
  KEEL_COMM_ALL_GATHER = 2,
  KEEL_COMM_BROADCAST = 3,
  KEEL_COMM_SEND = 4,
  KEEL_COMM_RECV = 5,
  KEEL_COMM_BARRIER = 6,
  KEEL_COMM_OP_COUNT = 7 /* the length of keel_comm_counters' calls and bytes, fixed since 0.4 */
};
/* --- appended in 0.19 --- */
/* all_to_all_v's index. It comes after KEEL_COMM_OP_COUNT, so the counters' arrays keep their
   layout: keel_comm_counters counts it in its appended all_to_all_calls and all_to_all_bytes. */
enum { KEEL_COMM_ALL_TO_ALL = 7 };

/* An operation in flight, returned by the non-blocking forms; completed and freed by wait. */
typedef struct keel_comm_request keel_comm_request;

typedef struct keel_comm_counters {
  size_t struct_size;
  uint64_t calls[KEEL_COMM_OP_COUNT];
  /* Communication volume of each operation by the ZeRO paper's convention (independent of the
     algorithm; a ring moves (p-1)/p of it): all_reduce of n bytes counts 2n, reduce_scatter
     counts its n input bytes, all_gather its n output bytes, broadcast n on every rank, send n,
     recv n, all_to_all_v the bytes this rank sends to the other ranks (its own block stays
     put). In a group of one nothing moves and nothing is counted. */
  uint64_t bytes[KEEL_COMM_OP_COUNT];

  /* --- appended in 0.19 --- */
  uint64_t all_to_all_calls; /* KEEL_COMM_ALL_TO_ALL: calls of all_to_all_v */
  uint64_t all_to_all_bytes; /* and their bytes, by the rule above */
} keel_comm_counters;

typedef struct keel_comm_api {
  size_t struct_size;
  keel_status (*validate_config)(const keel_host* host, const char* config_json, const char* json_path);
  /* Joins the world the launcher started (mpirun, srun); a process started without a launcher
     is a world of one. The caller destroys the returned communicator. */
  keel_status (*create_world)(const keel_host* host, const char* config_json, const char* json_path, void** out_comm);
  void (*destroy)(void* comm);
  keel_status (*rank)(void* comm, int32_t* out_rank);
  keel_status (*size)(void* comm, int32_t* out_size);
  /* The ranks with the same color form a new communicator, ordered by key (MPI_Comm_split).
     Collective over `comm`. The caller destroys the new one. */
  keel_status (*split)(void* comm, int32_t color, int32_t key, void** out_comm);

  /* Collectives: when out_request is NULL the call completes before returning; otherwise it
     starts the operation and *out_request must be passed to wait before the buffers are used.
     count is in elements of dtype. send may equal recv (in place) for all_reduce.
     Element types a comm plugin must accept, because the core and the built-in strategies use
     them: all_reduce and reduce_scatter: fp32 (SUM, MAX); all_gather, broadcast, send and
     recv: fp32, int32 and fp64 (cores built before November 2026 gathered one fp64 per rank;
     the core now moves its sums and strings as int32 words). A type the plugin cannot
     move is refused with KEEL_ERR_UNIMPLEMENTED naming it (the mpi plugin also takes int64;
     from 0.8 every comm also takes bf16: moved as is, reduced in fp32 and rounded once). */
  keel_status (*all_reduce)(void* comm, const void* send, void* recv, size_t count, keel_dtype dtype, int32_t op,
                            keel_comm_request** out_request);
  /* send holds size*count elements; rank r receives the reduction of block r (count elements). */
  keel_status (*reduce_scatter)(void* comm, const void* send, void* recv, size_t count, keel_dtype dtype, int32_t op,
                                keel_comm_request** out_request);
  /* Each rank contributes count elements; recv holds size*count, block r from rank r. */
  keel_status (*all_gather)(void* comm, const void* send, void* recv, size_t count, keel_dtype dtype,
                            keel_comm_request** out_request);
  keel_status (*broadcast)(void* comm, void* buffer, size_t count, keel_dtype dtype, int32_t root,
                           keel_comm_request** out_request);
  keel_status (*send)(void* comm, const void* buffer, size_t count, keel_dtype dtype, int32_t peer, int32_t tag,
                      keel_comm_request** out_request);
  keel_status (*recv)(void* comm, void* buffer, size_t count, keel_dtype dtype, int32_t peer, int32_t tag,
                      keel_comm_request** out_request);
  keel_status (*barrier)(void* comm);
  /* Completes and frees a request. */
  keel_status (*wait)(void* comm, keel_comm_request* request);
  /* Counters since creation of this communicator, including the traffic of every communicator
     split from it (so a plugin that splits its group for a thread of its own still reports all
     of its traffic through the group it was given). The caller sets out->struct_size. */
  keel_status (*counters)(void* comm, keel_comm_counters* out);
  /* Ends every rank of the world with `reason` (a rank that hit an error no collective can
     recover from): the others must not hang in a collective. Does not return on success. */
  keel_status (*abort_world)(void* comm, int32_t exit_code, const char* reason);

  /* --- appended in 0.8: device communicators --- */
  /* As create_world, on the backend whose memory the collectives will move (it outlives the
     communicator). A device communicator (nccl) takes its device and queue from it: every
     operation, on this communicator and those split from it, is queued on the backend's queue
     after the ops issued before it, and ops issued after it see its result. A host
     communicator (mpi) may ignore the backend. The core calls this slot when it exists. */
  keel_status (*create_world_on)(const keel_host* host, const char* config_json, const char* json_path,
                                 const keel_backend_api* backend, void* backend_obj, void** out_comm);
  /* How this communicator reaches memory on `device` (KEEL_COMM_REACH_*). */
  keel_status (*reaches)(void* comm, keel_device device, int32_t* out_reach);

  /* --- appended in 0.19: expert parallelism --- */
  /* Every rank sends send_counts[p] elements to rank p and receives recv_counts[p] elements
     from rank p (p = 0..size-1, itself included). Both buffers hold their blocks contiguous in
     rank order, without gaps: the block for rank p starts at element send_counts[0] + ... +
     send_counts[p-1] of send, the block from rank p at recv_counts[0] + ... + recv_counts[p-1]
     of recv. send_counts and recv_counts are host arrays of size entries, borrowed for the call
     (the plugin copies what a non-blocking form still needs). recv_counts[p] must equal what
     rank p passes as send_counts[this rank]: exchange the counts first
     (keel_support/comm/all_to_all.hpp does both in one call). A rank with every count zero
     still calls, as for any collective. send and recv may not overlap. Element types as
     all_gather's, moved as they are. Totals whose bytes do not fit a size_t, and counts the
     plugin's transport cannot carry, are refused with the numbers before anything moves.
     Optional: NULL in a comm built before 0.19 (and in a bridged one whose plugin lacks it); a
     caller that needs it refuses such a comm, naming the slot. */
  keel_status (*all_to_all_v)(void* comm, const void* send, const size_t* send_counts, void* recv,
                              const size_t* recv_counts, keel_dtype dtype, keel_comm_request** out_request);
} keel_comm_api;

/* --- appended in 0.8 --- */
/* keel_comm_api.reaches. The core hands plugins communicators that keep the backend's
   ordering whatever the plugin's reach: with SYNCED it synchronizes the backend before each
   operation; with NONE it stages the buffers through the backend's host memory (alloc_host)
   and says so once in the log. A comm built before 0.8 is SYNCED on host memory (KEEL_DEVICE_CPU)
   and NONE elsewhere. */
enum {
  KEEL_COMM_REACH_NONE = 0,   /* cannot read or write that memory */
  KEEL_COMM_REACH_SYNCED = 1, /* reads and writes it directly once the backend's queue has drained */
  KEEL_COMM_REACH_QUEUED = 2  /* orders itself on the backend's queue (created with create_world_on) */
};

#ifdef __cplusplus
}
#endif
#endif
