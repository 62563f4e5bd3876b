/* The strategy kind: where parameters, gradients and optimizer state live, and when they
   move. It serves the model's acquire/release, runs the optimizer on what it owns, and reads
   and writes parameters by flat range for checkpoints and bindings.

   Pieces (0.6). Under tensor parallelism a rank holds a piece of each parameter: the box
   params[i].local_offset + local_shape of the global tensor. Every flat range below counts
   elements of that piece in its own row-major order ("piece-local"); at tp 1 the piece is the
   whole tensor, so the ranges are the global ones of 0.5. The core turns pieces and ranges
   into checkpoint slices (a box plus a flat range in it), so any layout loads any checkpoint.

   The contract, as the core keeps it (a strategy may rely on each point):

   Threads. Every slot is called from the core's training thread, one call at a time. The
   communicator in create_args (dp_comm_obj) is the strategy's alone: the core reduces the loss
   and its own values on a communicator of its own over the same ranks, so the strategy may use
   dp_comm_obj from one thread of its choosing at a time (comm.h); a strategy that communicates
   from two threads at once splits a second communicator off it (counters include it).

   One optimizer step (0.7: the schedule's order; at pp 1 forward m, backward m, m = 0 .. n-1):
     zero_grads
     the schedule's forwards and backwards of n micro-batches over this rank's chunks, in its
     order (under 1F1B a forward may come between the backwards of earlier micro-batches):
       model forward:  per layer acquire(FORWARD) ... release(FORWARD)
       begin_microbatch(m, is_last) immediately before each backward of micro-batch m; is_last
                       says this backward is the step's last to write the gradients of the
                       layers it touches (the chunk's last), so their reduction may start at
                       release. Before 0.7 it came before each forward, with is_last = m == n-1:
                       at pp 1 the two orders are the same sequence of backwards.
       model backward: per layer, in reverse, acquire(BACKWARD) ... release(BACKWARD, grads_final)
                       (a tied layer, such as GPT-2's embedding, is acquired twice; grads_final
                       is 1 only at its last release)
     grad_sq_norm      always called once per step, also when clipping is off (the core logs
                       the norm and checks it is finite)
     step              skipped when the loss or the norm is not finite and train.on_nonfinite
                       is "skip": the strategy sees zero_grads next, as after any step; with
                       "stop" the run ends and no further slot is called but destroy

   Gradients. The model's backward ADDS into the gradient buffers acquire hands out, already
   multiplied by 1/n (n micro-batches), so after the last micro-batch they hold this rank's
   mean gradient over its own samples. Making it the mean over the data-parallel group is the
   strategy's job: sum over the dp ranks and scale by 1/dp_size. The clip factor arrives in
   step_args.grad_scale, computed by the core from grad_sq_norm; the strategy applies it (by
   passing it to the optimizer).

   Other forwards. Evaluation, sampling and the bindings' logits run the model's forward only
   (acquire/release FORWARD), without zero_grads or begin_microbatch, between steps, on every
   rank of the group at once, so a strategy that gathers on acquire may communicate there.
   read_/write_ slots are called between steps (checkpoints, bindings); every rank calls
   owned_range and the read slots for the ranges it reports, and no rank expects the others to
   take part in a read or write. */
#ifndef KEEL_STRATEGY_H
#define KEEL_STRATEGY_H

#include "keel/backend.h"
#include "keel/comm.h"
#include "keel/host.h"
#include "keel/offload.h"
#include "keel/optimizer.h"
#include "keel/params.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct keel_strategy_create_args {
  size_t struct_size;
  const char* config_json;             /* the "parallel.strategy" section; borrowed for the call */
  const char* json_path;               /* "parallel.strategy", for messages */
  const keel_backend_api* backend;     /* outlives the strategy */
  void* backend_obj;
  const keel_optimizer_api* optimizer; /* outlives the strategy */
  void* optimizer_obj;
  const keel_param_spec* params;       /* the model's list; outlives the strategy */
  size_t n_params;
  int32_t n_layers;
  uint64_t seed;                       /* for host->init_param */
  /* --- appended in 0.4 --- */
  const keel_comm_api* dp_comm;        /* the data-parallel group; NULL for a single rank */
  void* dp_comm_obj;                   /* outlives the strategy; the strategy's alone (see the top) */
  int32_t dp_rank;
  int32_t dp_size;
  /* --- appended in 0.6 --- */
  /* This rank's tensor-parallel position. Parameters are the model's pieces (params[i]
     local_offset/local_shape); parameters with tp_dim -1 are replicated over the tp group and
     receive identical gradients on every tp rank. */
  int32_t tp_rank;
  int32_t tp_size;
  /* --- appended in 0.7 --- */
  /* This rank's pipeline position. The params are this rank's chunks' only (their layer ids stay
     the whole model's, so some layers hold no parameter here). Gradients of STAGE_TIED params
     (params.h) are summed over embedding_comm, the first and last stage of this rank's pipeline,
     after their last backward and before the data-parallel reduction; embedding_comm is NULL on
     a rank that holds none. grad_sq_norm skips STAGE_COPY params; the core sums it over the
     pipeline group too. A strategy built before 0.7 is refused at pp_size > 1. */
  int32_t pp_rank;
  int32_t pp_size;
  const keel_comm_api* embedding_comm;
  void* embedding_comm_obj;
  /* The offload tier of the "offload" section (offload.h), or NULL: the arrays flagged in
     offload_arrays (KEEL_OFFLOAD_*) live there instead of in backend memory, and the strategy
     streams them through backend memory when it needs them (its step, its acquire). The tier is
     the strategy's alone to call; the core created it, reads its counters between steps, and
     destroys it after the strategy. A strategy that cannot offload an array it is asked to
     refuses at create, naming offload.<key>. */
  const keel_offload_api* offload;
  void* offload_obj;
  uint32_t offload_arrays;
  /* --- appended in 0.19: the data-parallel group's levels (parallel.dp_groups) --- */
  uint32_t reserved_0_19;              /* 0 */
  /* The dp group split in two levels: dp_inner holds the ranks of this rank's inner group (one
     host's, one site's, or N consecutive dp ranks'), dp_outer the ranks at this rank's place in
     every inner group; dp_inner_size * dp_outer_size == dp_size, and dp rank = (the inner
     group's index) * dp_inner_size + dp_inner_rank only when the groups are consecutive (not in
     general: a host may hold dp ranks 0 and 2). The strategy works inside a group and exchanges
     across (ddp reduces hierarchically, zero shards inside and replicates across). The groups
     hold the same owned ranges (keel_strategy_info.dp_levels), so a checkpoint takes its slices
     from the ranks of outer rank 0 alone. Both comms
     NULL and both sizes 1 at one level: the strategy works flat, as before. Each is the
     strategy's alone, under dp_comm's thread rules; the core reads their counters (the bytes
     that cross groups). A strategy that uses them says so (keel_strategy_info.dp_levels); the
     core refuses parallel.dp_groups for one that does not, or one built before 0.19. */
  const keel_comm_api* dp_inner_comm;
  void* dp_inner_comm_obj;
  int32_t dp_inner_rank;
  int32_t dp_inner_size;
  const keel_comm_api* dp_outer_comm;
  void* dp_outer_comm_obj;
  int32_t dp_outer_rank;
  int32_t dp_outer_size;
} keel_strategy_create_args;

typedef struct keel_strategy_info {
  size_t struct_size;
  int32_t params_resident;  /* 1: acquire returns memory that stays valid and whole between calls
                               (a zero-copy view of a parameter may be handed out); 0: gathered on demand */
  int32_t reserved;         /* 0 */
  /* Bytes this rank keeps allocated for the run's whole life (transient per-layer buffers of a
     sharding strategy excluded), for memory tables and benchmarks. */
  uint64_t param_bytes;
  uint64_t grad_bytes;
  uint64_t state_bytes;

  /* --- appended in 0.19 --- */
  /* What this rank holds whole at data-parallel sizes above one, as one rank alone would
     (KEEL_STRATEGY_HOLDS_* bits; 0 from a strategy older than 0.19, or one that says nothing):
     the core and the bindings read and write whole tensors on each rank with no collective only
     where the strategy says so (Hugging Face export and import, read_grad). */
  uint32_t holds_whole;
  /* 1: given the data-parallel group's levels (create_args dp_inner_*, dp_outer_*), this strategy
     works in them: what it reports by owned_range is the same in every group, as a checkpoint
     assumes (state that differs between groups, such as diloco's workers' parameters between
     outer steps, goes in its own per-rank state); 0 (and from a strategy that says nothing): the
     core refuses parallel.dp_groups for it. */
  uint32_t dp_levels;
} keel_strategy_info;

#define KEEL_STRATEGY_INFO_SIZE(m) \
  ((m) < 19 ? KEEL_STRUCT_SIZE(keel_strategy_info, state_bytes) : sizeof(keel_strategy_info))

/* keel_strategy_info.holds_whole bits (0.19). */
/* Every parameter's piece is on every data-parallel rank, whole: read_param and write_param take
   any range of it on any rank, and no rank waits for the others (ddp, local SGD). */
#define KEEL_STRATEGY_HOLDS_WHOLE_PARAMS 1u
/* Between steps, read_grad gives the gradient of the last step whole, as the update saw it (the
   data-parallel mean, or the replica's own under local SGD), not a shard or a compressed one. */
#define KEEL_STRATEGY_HOLDS_WHOLE_GRADS 2u

typedef struct keel_strategy_step_args {
  size_t struct_size;
  float lr;          /* this step's learning rate */
  float grad_scale;  /* clip factor the core computed from the global gradient norm */
  int64_t step;      /* 1-based optimizer step */
} keel_strategy_step_args;

typedef struct keel_strategy_api {
  size_t struct_size;
  keel_status (*validate_config)(const keel_host* host, const char* config_json, const char* json_path);
  /* Allocates and initialises (host->init_param) every parameter it holds. */
  keel_status (*create)(const keel_host* host, const keel_strategy_create_args* args, void** out_strategy);
  void (*destroy)(void* strategy);
  /* Fills the table the core hands the model; valid as long as the strategy. */
  keel_status (*param_access)(void* strategy, keel_param_access* out_access);
  /* Called before each backward (0.7; see the top); is_last marks the step's last backward of the
     layers it touches. */
  keel_status (*begin_microbatch)(void* strategy, int32_t index, int32_t is_last);
  keel_status (*zero_grads)(void* strategy);
  /* Σ g² over the gradients of this rank's pieces after the data-parallel reduction: the same
     value on every rank of the dp group (a sharding strategy reduces its shards' sums itself).
     A parameter replicated over tensor-parallel ranks (tp_dim -1) is counted only where
     tp_rank is 0; the core sums the result over the tp group, so each distinct gradient counts
     once (0.6; at tp 1 this is the whole model, as before). A STAGE_COPY param is not counted
     (0.7); the core sums over the pipeline group too. */
  keel_status (*grad_sq_norm)(void* strategy, double* out_sum_squares);
  keel_status (*step)(void* strategy, const keel_strategy_step_args* args);
  /* Piece-local flat element range [begin, begin+count) of parameter `index`, to or from host memory. */
  keel_status (*read_param)(void* strategy, size_t index, int64_t begin, int64_t count, float* dst_host);
  keel_status (*write_param)(void* strategy, size_t index, int64_t begin, int64_t count, const float* src_host);
  keel_status (*read_grad)(void* strategy, size_t index, int64_t begin, int64_t count, float* dst_host);

  /* --- appended in 0.2 --- */
  /* Optimizer state slot `slot` (0..n_state_slots-1) of parameter `index`, piece-local flat range, to
     or from host memory: what a checkpoint saves so a resumed run continues bit for bit. */
  keel_status (*read_state)(void* strategy, int32_t slot, size_t index, int64_t begin, int64_t count, float* dst_host);
  keel_status (*write_state)(void* strategy, int32_t slot, size_t index, int64_t begin, int64_t count,
                             const float* src_host);

  /* --- appended in 0.4 --- */
  /* The piece-local flat range [*begin, *end) of parameter `index` (kind -1) or of its optimizer
     state slot `kind` that this rank holds and saves in a checkpoint; empty when *begin == *end.
     Ranks of a replicated tensor may all report it whole: the core saves rank 0's then. The
     read_/write_ slots accept any sub-range of it. */
  keel_status (*owned_range)(void* strategy, int32_t kind, size_t index, int64_t* begin, int64_t* end);
  /* The caller sets out->struct_size. */
  keel_status (*describe)(void* strategy, keel_strategy_info* out);

  /* --- appended in 0.5 --- */
  /* The strategy's own per-rank state beyond parameters and optimizer state (an error-feedback
     residual, local SGD's diverged parameters): `count` named fp32 arrays in host memory terms.
     A checkpoint saves every rank's arrays in that rank's file. Resuming at the same
     data-parallel size and with the same strategy hands each rank its own arrays back through
     write_own_state, after parameters and optimizer state were written; at another size they
     are not restored and the core says so. NULL slots: no own state. */
  keel_status (*own_state_count)(void* strategy, int32_t* out_count);
  /* Array `index`: its name (unique within the strategy; letters, digits, '_', '.', '-'; owned
     by the strategy, valid for its life) and its element count. */
  keel_status (*own_state_info)(void* strategy, int32_t index, const char** out_name, int64_t* out_count);
  keel_status (*read_own_state)(void* strategy, int32_t index, float* dst_host);
  keel_status (*write_own_state)(void* strategy, int32_t index, const float* src_host);

  /* --- appended in 0.11 --- */
  /* Σ g² over this rank's own gradients of the step, as they were before any data-parallel
     reduction: the mean over this rank's samples alone, counted as grad_sq_norm counts (tp-
     replicated parameters on tp rank 0, no STAGE_COPY; the core sums it over the tp and pipeline
     groups and averages it over the dp group). Called once per step after grad_sq_norm and
     before step, on every rank. With grad_sq_norm it gives the gradient noise scale (McCandlish
     et al., 2018; docs/metrics.md). NULL, or KEEL_ERR_UNIMPLEMENTED with the reason through the
     host: no estimate (a strategy that never forms the dp mean of the gradients, or one that
     reduces each micro-batch as it completes and never holds the step's local gradient). */
  keel_status (*local_grad_sq_norm)(void* strategy, double* out_sum_squares);

  /* --- appended in 0.14 --- */
  /* Replicas that step on their own (A-EDiT; docs/comm-efficient.md). NULL, or *out_independent
     0: the data-parallel replicas step together, as every strategy before 0.14. 1: between syncs
     each replica takes steps at its own pace with no data-parallel communication, so the core
     reduces nothing over the data-parallel group in a step (the loss, the norm grad_sq_norm
     returns and the finiteness check are the replica's own) and asks sync_reached after each
     step. Asked once, after create; the same answer on every rank. */
  keel_status (*independent_replicas)(void* strategy, int32_t* out_independent);
  /* With independent replicas, after each step, a skipped one too (train.on_nonfinite "skip":
     no step call, but its time passed): *out_reached 1 when the interval closed with it; the
     strategy then does what its sync needs. Every replica closes the same intervals in the same
     order, each after its own number of steps. At each, the core makes one collective over the world, in which the
     replicas agree the run's step and tokens and whether to evaluate, save, stop or end: to the
     core an interval is one step. */
  keel_status (*sync_reached)(void* strategy, int32_t* out_reached);
} keel_strategy_api;

#define KEEL_STRATEGY_API_SIZE(m)                                         \
  ((m) < 2    ? KEEL_STRUCT_SIZE(keel_strategy_api, read_grad)       \
   : (m) < 4  ? KEEL_STRUCT_SIZE(keel_strategy_api, write_state)     \
   : (m) < 5  ? KEEL_STRUCT_SIZE(keel_strategy_api, describe)        \
   : (m) < 11 ? KEEL_STRUCT_SIZE(keel_strategy_api, write_own_state) \
   : (m) < 14 ? KEEL_STRUCT_SIZE(keel_strategy_api, local_grad_sq_norm) \
              : sizeof(keel_strategy_api))

#ifdef __cplusplus
}
#endif
#endif
