/* The offload kind (0.7): a tier outside the backend's memory (host memory, files on an NVMe
   drive) that holds named extents and moves byte ranges between them and host buffers
   asynchronously (ZeRO-Offload, ZeRO-Infinity). The core creates the tier from the "offload"
   section and hands it to the strategy (strategy.h offload), whose parameter store keeps the
   arrays the config names there and streams them through the backend's memory.

   The contract every engine keeps:
   - An extent is reserved up front with add_extent(name, bytes), which checks that the tier has
     room (a full disk is refused there, at start-up, not at the first step); its bytes read as
     zeros until written.
   - Buffers, offsets and sizes are multiples of info.alignment_bytes; a request that is not, or
     that reaches past its extent's end, is refused at submit with a message saying which.
     alloc_buffer hands out host memory that meets the alignment (pinned where the backend is a
     device, so copies to it run at full speed).
   - submit_read/submit_write return at once with a ticket; the buffer must stay alive and
     untouched until wait(ticket) or wait_all() returns. Many requests may be in flight; they
     complete in any order, so a read of a range whose write is still in flight may see old or
     new bytes: the caller orders them by waiting.
   - Ticket 0 is never issued, so a caller may hold 0 for "no request" (and not wait on it);
     wait(0), like a wait on any ticket the engine never issued, is KEEL_ERR_INVALID_ARGUMENT.
   - wait(ticket) returns that request's error; wait_all() waits for every request and returns
     the first error among those not yet waited on. Each error is returned once: a second wait
     on a ticket, or a wait on a ticket a wait_all() already covered, returns KEEL_OK at once.
   - Errors reach the caller on the thread that called: set_error is per thread, so when a
     request fails on one of the engine's own threads, the engine keeps the message with the
     ticket and sets it from wait or wait_all, on the waiting thread.
   - One thread calls the engine at a time; the engine runs its own threads inside.
   - destroy finishes what is in flight, then removes every file the engine made.
   keel_support (offload_engine_base.hpp, offload_slots.hpp) keeps all of this for an engine that
   only reserves, reads and writes synchronously, and keel_support/testing/offload_conformance.hpp
   checks an engine against it through this table. */
#ifndef KEEL_OFFLOAD_H
#define KEEL_OFFLOAD_H

#include "keel/host.h"
#include "keel/types.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Which of a strategy's arrays live in the tier (strategy.h offload_arrays). */
enum {
  KEEL_OFFLOAD_OPTIMIZER_STATE = 1u << 0, /* "offload.optimizer_state": the optimizer's moments */
  KEEL_OFFLOAD_PARAMS = 1u << 1,          /* "offload.params": the fp32 parameter shards (ZeRO-Infinity) */
  KEEL_OFFLOAD_GRADIENTS = 1u << 2        /* "offload.gradients": the reduced gradient shards */
};

typedef struct keel_offload_create_args {
  size_t struct_size;
  const char* config_json;  /* the "offload" section less the core's keys (plugin, optimizer_state,
                               params, gradients); borrowed for the call */
  const char* json_path;    /* "offload", for messages */
  int32_t world_rank;       /* ranks may share a folder: names stay apart by rank */
  int32_t device_backend;   /* 1: the backend is a device, so alloc_buffer should pin */
} keel_offload_create_args;

typedef struct keel_offload_info {
  size_t struct_size;
  uint64_t alignment_bytes;      /* buffers, offsets, sizes and extents are multiples of it */
  uint64_t ideal_request_bytes;  /* the smallest request that keeps the engine's pipeline busy */
  uint64_t capacity_bytes;       /* the most bytes all extents together may hold */
} keel_offload_info;

typedef struct keel_offload_counters {
  size_t struct_size;
  uint64_t bytes_read;          /* tier to caller buffers, since create */
  uint64_t bytes_written;       /* caller buffers to tier */
  uint64_t requests_completed;
  double busy_seconds;          /* wall time during which at least one request was unfinished */
} keel_offload_counters;

typedef struct keel_offload_api {
  size_t struct_size;
  /* config_json: as in keel_offload_create_args, the "offload" section less the core's keys
     (plugin, optimizer_state, params, gradients); borrowed for the call. */
  keel_status (*validate_config)(const keel_host* host, const char* config_json, const char* json_path);
  keel_status (*create)(const keel_host* host, const keel_offload_create_args* args, void** out_engine);
  void (*destroy)(void* engine);
  /* The caller sets out->struct_size. */
  keel_status (*describe)(void* engine, keel_offload_info* out);
  keel_status (*add_extent)(void* engine, const char* name, uint64_t bytes);
  keel_status (*submit_write)(void* engine, const char* name, uint64_t offset, const void* src, uint64_t bytes,
                              uint64_t* out_ticket);
  keel_status (*submit_read)(void* engine, const char* name, uint64_t offset, void* dst, uint64_t bytes,
                             uint64_t* out_ticket);
  /* A ticket from submit_*; see the contract above for 0, repeats and what wait_all covered. */
  keel_status (*wait)(void* engine, uint64_t ticket);
  keel_status (*wait_all)(void* engine);
  /* The caller sets out->struct_size. */
  keel_status (*counters)(void* engine, keel_offload_counters* out);
  /* Host memory of `bytes` (a multiple of alignment_bytes) aligned for I/O, zero-filled. */
  keel_status (*alloc_buffer)(void* engine, uint64_t bytes, void** out_buffer);
  void (*free_buffer)(void* engine, void* buffer);
} keel_offload_api;

#ifdef __cplusplus
}
#endif
#endif
