/* The schedule kind (0.7): a pipeline schedule as a pure function from the pipeline's shape to
   one rank's ordered action list. The core runs the list: it computes chunks through the
   model, moves activations and their gradients over the pipeline group, and tells the strategy
   which backward is a chunk's last. A schedule never runs anything itself, so it can be checked
   by simulating every rank's list together: the core does so at start-up, `keel schedule-check`
   does it for an author, and keel_support/schedule_check.hpp lets a schedule's own tests.

   Chunks. The model is cut into stages * virtual_stages chunks; chunk c runs on stage
   c % stages (model.h). Every action names a global chunk. A transfer names the chunk that
   CONSUMES the data, on both sides: SEND_ACTIVATION(mb, c) follows FORWARD(mb, c-1) on its
   stage and RECV_ACTIVATION(mb, c) precedes FORWARD(mb, c); SEND_GRADIENT(mb, c) follows the
   input gradient of chunk c+1 and RECV_GRADIENT(mb, c) precedes chunk c's backward. So a send
   and its receive carry the same (kind pair, micro-batch, chunk).

   Sends are asynchronous: the core issues a send without waiting for the peer's receive and
   completes it before the buffer is reused; receives complete before the action that reads
   them. A schedule must be deadlock-free under those rules. */
#ifndef KEEL_SCHEDULE_H
#define KEEL_SCHEDULE_H

#include "keel/host.h"
#include "keel/types.h"

#ifdef __cplusplus
extern "C" {
#endif

enum {
  KEEL_ACTION_FORWARD = 0,
  KEEL_ACTION_BACKWARD = 1,          /* input and weight gradients together */
  KEEL_ACTION_BACKWARD_INPUT = 2,    /* input gradient only (model.h KEEL_BACKWARD_INPUT) */
  KEEL_ACTION_BACKWARD_WEIGHT = 3,   /* the weight gradients of an earlier BACKWARD_INPUT */
  KEEL_ACTION_SEND_ACTIVATION = 4,
  KEEL_ACTION_RECV_ACTIVATION = 5,
  KEEL_ACTION_SEND_GRADIENT = 6,
  KEEL_ACTION_RECV_GRADIENT = 7
};

enum {
  /* On the BACKWARD or BACKWARD_WEIGHT that writes the chunk's weight gradients for the last
     time this step: the strategy's is_last (strategy.h begin_microbatch). */
  KEEL_ACTION_LAST_FOR_CHUNK = 1u << 0
};

typedef struct keel_schedule_action {
  int32_t kind;        /* KEEL_ACTION_* */
  int32_t microbatch;  /* 0 .. microbatches-1 */
  int32_t chunk;       /* global chunk, 0 .. stages*virtual_stages-1 */
  int32_t peer_stage;  /* transfers: the other rank's stage in the pipeline group; else -1 */
  uint32_t flags;      /* KEEL_ACTION_LAST_FOR_CHUNK */
} keel_schedule_action;

typedef struct keel_schedule_shape {
  size_t struct_size;
  int32_t stages;          /* p, ranks in the pipeline group */
  int32_t microbatches;    /* m per optimizer step, per data-parallel rank */
  int32_t stage;           /* this rank, 0 .. p-1 */
  int32_t virtual_stages;  /* v, chunks per rank */
} keel_schedule_shape;

typedef struct keel_schedule_api {
  size_t struct_size;
  /* config_json, here and in check_shape and build: the "parallel.schedule" section as written,
     its "plugin" key included, so a parser that refuses unknown keys must accept "plugin";
     a schedule's own keys sit beside it. Borrowed for the call. */
  keel_status (*validate_config)(const keel_host* host, const char* config_json, const char* json_path);
  /* Whether the shape is one this schedule can run; when not, KEEL_ERR_INVALID_CONFIG with a
     message through host->set_error naming the numbers (interleaved: microbatches a multiple
     of stages). */
  keel_status (*check_shape)(const keel_host* host, const char* config_json, const keel_schedule_shape* shape);
  /* The rank's action list. Writes at most `capacity` actions to out (may be NULL when capacity
     is 0) and the list's full length to *out_count: a caller with too small a buffer calls again. */
  keel_status (*build)(const keel_host* host, const char* config_json, const keel_schedule_shape* shape,
                       keel_schedule_action* out, size_t capacity, size_t* out_count);
  /* 1 when the list holds BACKWARD_INPUT/BACKWARD_WEIGHT (the model must split its backward). */
  int32_t splits_backward;
} keel_schedule_api;

#ifdef __cplusplus
}
#endif
#endif
