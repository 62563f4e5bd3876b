/* The model kind: parameter layout and the hand-written forward/backward of a network,
   written against the backend op set. A model owns its activations but never its
   parameters: it reaches them through the keel_param_access it is handed in each call. */
#ifndef KEEL_MODEL_H
#define KEEL_MODEL_H

#include "keel/backend.h"
#include "keel/comm.h"
#include "keel/host.h"
#include "keel/params.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct keel_model_create_args {
  size_t struct_size;
  const char* config_json;         /* the "model" section as JSON text; borrowed for the call */
  const char* json_path;           /* "model", for messages */
  const keel_backend_api* backend; /* the op set; outlives the model */
  void* backend_obj;
  int32_t tp_rank;                 /* tensor-parallel position in the tp group (0.6; 0 and 1 before) */
  int32_t tp_size;
  /* --- appended in 0.6 --- */
  /* The tensor-parallel group (tp_size ranks), the model's alone, used from the thread that calls
     forward/backward; NULL when tp_size is 1. A model that cannot split refuses tp_size > 1. */
  const keel_comm_api* tp_comm;
  void* tp_comm_obj;
  /* "parallel.sequence_parallel": hold 1/tp of the token rows in the norm and residual regions
     (Megatron's sequence parallelism); only with tp_size > 1. */
  int32_t sequence_parallel;
  /* --- appended in 0.7: pipeline parallelism --- */
  /* The model is cut into pp_size * virtual_stages chunks of consecutive layers. Chunk c (0-based,
     in model order) runs on pipeline rank c % pp_size, so this rank holds chunks pp_rank,
     pp_rank + pp_size, ... (Megatron's interleaved placement; one chunk per rank when
     virtual_stages is 1). The first chunk also holds the input embedding, the last the output
     head. stage_blocks: n_stage_blocks (= pp_size * virtual_stages) counts of the model's
     repeated blocks (gpt: transformer blocks) per chunk, in chunk order, each at least 1; NULL:
     an even split, which the model refuses with the numbers when the chunks do not divide its
     blocks. The model describes only the parameters of its own chunks, with the whole model's
     layer ids. A model that cannot be cut refuses pp_size > 1. At pp 1: 0, 1, 1, NULL, 0. */
  int32_t pp_rank;
  int32_t pp_size;
  int32_t virtual_stages;
  const int32_t* stage_blocks;
  int32_t n_stage_blocks;
  /* --- appended in 0.19: expert parallelism --- */
  /* The expert-parallel group (parallel.ep; docs/architecture.md §4): ep_size consecutive ranks of
     the data-parallel group that split each sparse layer's experts between them, ep_rank this
     rank's place in it. The model declares only its own experts' tensors, flagged
     KEEL_PARAM_EXPERT (params.h), and moves each token's rows to its experts' ranks and back with
     the group's all_to_all_v (comm.h), from the thread that calls forward/backward; every rank of
     the group takes part in every exchange, with no rows when its experts got none. NULL when
     ep_size is 1 (every expert on every rank). A model without experts refuses ep_size > 1. */
  int32_t ep_rank;
  int32_t ep_size;
  const keel_comm_api* ep_comm;
  void* ep_comm_obj;
  /* --- appended in 0.19: context parallelism --- */
  /* The context-parallel group (parallel.cp; docs/parallelism.md §6a): cp_size consecutive ranks of
     the data-parallel group that split every sequence. Each holds chunks cp_rank and
     2·cp_size−1−cp_rank of 2·cp_size equal chunks, and its forward gets them as 2·B rows of
     T/(2·cp_size) tokens, chunk-major (the first chunk of every sequence, then the second), with
     their true positions in keel_forward_args.positions (no document boundaries: the mask is
     causal over the whole sequence). The model's attention sees every chunk's keys and values
     through cp_comm (point-to-point, its backend's memory); everything else is per token. cp_comm
     is NULL when cp_size is 1. A model that cannot split its sequences refuses cp_size > 1. */
  int32_t cp_rank;
  int32_t cp_size;
  const keel_comm_api* cp_comm;
  void* cp_comm_obj;
  /* How the keys and values reach every rank of the group (parallel.cp_exchange): 0 round a ring
     of point-to-point messages, 1 all gathered at once (an all_gather, the gradients
     reduce-scattered back). */
  int32_t cp_all_gather;
} keel_model_create_args;

typedef struct keel_model_info {
  size_t struct_size;
  const keel_param_spec* params; /* owned by the model, valid for its life */
  size_t n_params;
  int32_t n_layers;              /* acquire/release units: params[i].layer < n_layers */
  int32_t vocab_size;            /* true vocabulary; token ids must be below it */
  int32_t padded_vocab_size;     /* row stride of logits */
  int32_t max_seq_len;
  /* --- appended in 0.7 --- */
  int32_t n_blocks;              /* repeated blocks the pipeline chunks split (gpt: n_layer) */
  /* --- appended in 0.19 --- */
  int32_t reserved;              /* 0; keeps the field below clear of 0.7's tail padding */
  int32_t splits_sequences;      /* 1: the model honours the create args' cp_* (context
                                    parallelism); 0, or a model older than the field: the core
                                    refuses parallel.cp > 1 */
} keel_model_info;

typedef struct keel_forward_args {
  size_t struct_size;
  const keel_param_access* access;
  int32_t microbatch;       /* id: activations are kept per id until its backward */
  int32_t batch;            /* B */
  int32_t seq_len;          /* T <= max_seq_len */
  const int32_t* tokens;    /* (B,T) in backend memory */
  const int32_t* targets;   /* (B,T) in backend memory, or NULL for inference (no loss) */
  /* outputs */
  float loss;               /* mean cross-entropy over targets >= 0; set when targets given */
  const float* logits;      /* (B,T,Vp) backend memory, set when targets is NULL; valid until
                               the model's next call */
  /* --- appended in 0.7: pipeline chunks --- */
  int32_t chunk;            /* the global chunk to run (create args); 0 at pp 1. tokens are read on
                               chunk 0 only; targets, when given, on every chunk: they mark a
                               training forward whose activations are kept for the backward, and
                               the last chunk computes the loss from them (loss is set there only) */
  const float* input;       /* chunk > 0: the previous chunk's output for this micro-batch,
                               stage_io_numel floats in backend memory, read during the call only;
                               NULL on chunk 0 */
  float* output;            /* chunk < last: the caller's buffer of stage_io_numel floats in backend
                               memory, which the model overwrites with this chunk's output; NULL on
                               the last chunk (logits and loss as above) */
  /* --- appended in 0.8: device-true --- */
  /* When not NULL (an fp32 scalar in backend memory), the chunk that computes the loss adds
     loss_weight × its mean loss there, queued on the backend, and leaves `loss` alone: the core
     reads the step's loss once. Under compute type bf16 (backend.h compute_dtype) input and
     output hold bf16 elements, whatever their C type; logits stay fp32 (an output for the host). */
  float* loss_sum;
  float loss_weight;
  /* --- appended in 0.19: packed batches --- */
  /* (B,T) int32 in backend memory, or NULL: each token's position in its document, restarting at
     0 where a document starts (a packed row holds several). Read on every chunk: attention stays
     inside each document (backend.h keel_attention_args) and rotary embeddings turn by these
     positions. A model that cannot honour them returns KEEL_ERR_UNIMPLEMENTED. */
  const int32_t* positions;
  /* --- appended in 0.19: dropout --- */
  /* Non-zero in a training forward: the seed of this micro-batch's dropout masks (backend.h
     dropout_dt), the same on every rank that holds a part of the micro-batch (tensor and pipeline
     parallel), different for each micro-batch, step and data-parallel replica; the backward of the
     micro-batch and any recomputation use the seed its forward got. 0: no dropout (evaluation,
     inference, and a core older than the field). */
  uint64_t dropout_seed;
} keel_forward_args;

typedef struct keel_backward_args {
  size_t struct_size;
  const keel_param_access* access;
  int32_t microbatch;       /* a micro-batch whose forward had targets */
  float loss_scale;         /* d(total objective)/d(this micro-batch's mean loss), e.g. 1/accum */
  /* --- appended in 0.7: pipeline chunks --- */
  int32_t chunk;            /* the chunk whose forward of this micro-batch is undone; 0 at pp 1 */
  const float* output_grad; /* chunk < last: gradient of the chunk's output (stage_io_numel floats,
                               backend memory, read during the call only); NULL on the last chunk,
                               whose gradient starts at its loss (0.8: compute-type elements, as
                               forward's input and output) */
  float* input_grad;        /* chunk > 0: the caller's buffer of stage_io_numel floats the model
                               overwrites with the gradient of the chunk's input; NULL on chunk 0 */
  int32_t part;             /* KEEL_BACKWARD_*: zero-bubble schedules split a backward in two */
} keel_backward_args;

/* --- appended in 0.7 --- */
/* keel_backward_args.part. INPUT computes input_grad (and everything the chunk below waits
   for) and keeps what WEIGHT needs; a later WEIGHT call of the same micro-batch and chunk
   accumulates the weight gradients and ends the micro-batch. A model that cannot split returns
   KEEL_ERR_UNIMPLEMENTED for INPUT, and the core refuses a splitting schedule at start-up. */
enum { KEEL_BACKWARD_FULL = 0, KEEL_BACKWARD_INPUT = 1, KEEL_BACKWARD_WEIGHT = 2 };

/* How one parameter appears in an external format (appended in 0.2), e.g. "huggingface". */
typedef struct keel_external_tensor {
  size_t struct_size;
  const char* name;   /* the external name; owned by the model, valid for its life; NULL: not exported */
  int32_t transpose;  /* 1: the external tensor is the 2-D transpose of Keel's (HF GPT-2's Conv1D) */
  int64_t rows;       /* leading rows of Keel's global tensor that exist externally (a padded
                         vocabulary is cut back); -1: all */
  /* --- appended in 0.6 --- */
  int32_t flatten;    /* 1: the external tensor is Keel's as one dimension (gpt's qkv bias: (3, C) in
                         Keel, so that a tensor-parallel piece is a box; (3C) in Hugging Face's
                         GPT-2). A transposed tensor is always the 2-D transpose of Keel's with its
                         leading dimensions merged: gpt's qkv weight (3, C, C) is (C, 3C) there. */
  /* --- appended in 0.19 --- */
  int32_t reserved;   /* 0; keeps the next field past 0.6's tail padding, which older models may not zero */
  int32_t merge_leading; /* 1: the external tensor is Keel's with its leading dimensions merged into one
                            and its last kept: a LoRA factor Keel declares (3, C, r), so that a
                            tensor-parallel piece is a box, is PEFT's (3C, r). The same bytes in the
                            same order, as with flatten. */
} keel_external_tensor;

/* --- appended in 0.19: a model's per-step metrics (keel_model_api.step_metrics) --- */
/* keel_model_metric.combine: how the core combines a metric over the data-parallel group. */
enum { KEEL_METRIC_MEAN = 0, KEEL_METRIC_MAX = 1 };
#define KEEL_MODEL_METRICS_MAX 64     /* metrics one step reports at most */
#define KEEL_MODEL_METRIC_NAME_MAX 64 /* bytes of a name, its NUL included */

typedef struct keel_model_metric {
  const char* name; /* letters, digits, '_' and '.', shorter than KEEL_MODEL_METRIC_NAME_MAX; owned by
                       the model, valid until its next call */
  double value;     /* finite or not: the core reports what it is given */
  int32_t combine;  /* KEEL_METRIC_MEAN or KEEL_METRIC_MAX */
  int32_t reserved; /* 0 */
} keel_model_metric;

typedef struct keel_model_api {
  size_t struct_size;
  keel_status (*validate_config)(const keel_host* host, const char* config_json, const char* json_path);
  keel_status (*create)(const keel_host* host, const keel_model_create_args* args, void** out_model);
  void (*destroy)(void* model);
  /* The caller sets out_info->struct_size; the model writes only the fields that fit in it. */
  keel_status (*describe)(void* model, keel_model_info* out_info);
  /* Model FLOPs per trained token (forward + backward) at sequence length seq_len, for MFU. */
  keel_status (*flops_per_token)(void* model, int32_t seq_len, double* out_flops);
  keel_status (*forward)(void* model, keel_forward_args* args);
  keel_status (*backward)(void* model, const keel_backward_args* args);

  /* --- appended in 0.2; optional (NULL: the model has no external formats) --- */
  /* Parameter `index` in `format`; KEEL_ERR_UNIMPLEMENTED for a format the model does not know.
     The caller sets out->struct_size. */
  keel_status (*external_name)(void* model, const char* format, size_t index, keel_external_tensor* out);
  /* The format's model config as JSON text (HF's config.json); owned by the model, valid for its life. */
  keel_status (*external_config)(void* model, const char* format, const char** out_json);

  /* --- appended in 0.7: pipeline parallelism; required of a model that accepts pp_size > 1 --- */
  /* Floats in the activation one chunk hands the next for a (batch, seq_len) micro-batch (gpt:
     B·T·C, or B·T·C/tp with sequence parallelism): the size of forward's input/output and
     backward's output_grad/input_grad. */
  keel_status (*stage_io_numel)(void* model, int32_t batch, int32_t seq_len, int64_t* out_numel);
  /* 1 when backward implements KEEL_BACKWARD_INPUT / _WEIGHT (zero-bubble schedules), else 0. */
  keel_status (*splits_backward)(void* model, int32_t* out_splits);

  /* --- appended in 0.10; optional (NULL: the model takes no dimensions from an external format) --- */
  /* Completes the model section config_json (found at json_path) from an external format's model
     config, external_json (for "huggingface": the text of a checkpoint folder's config.json),
     before validate_config and create see it: a key the section leaves out is taken from the
     external config, a key it gives must agree (KEEL_ERR_INVALID_CONFIG naming both values
     otherwise), and an external config of another architecture is refused. Called with no
     model object. Writes the completed section as JSON text into out, at most capacity bytes
     with the terminating NUL, and its whole length without the NUL into *out_length; when
     *out_length >= capacity the text was cut and the caller asks again with more room. */
  keel_status (*complete_config)(const keel_host* host, const char* format, const char* external_json,
                                 const char* config_json, const char* json_path, char* out, size_t capacity,
                                 size_t* out_length);
  /* --- appended in 0.18; optional (NULL: the core generates by running the whole window at
     every token) --- */
  /* Generation with a key/value cache, in the backend's memory (backend.h attention_decode_dt).
     decode_reset starts an empty cache for `batch` rows of up to `capacity` positions (at most
     the model's seq_len), dropping any earlier one. decode runs `count` new tokens per row
     (tokens: backend memory, (batch, count)) at the positions after those already cached, adds
     their keys and values to the cache, and points *out_logits at their fp32 logits, (batch,
     count, padded_vocab_size) in backend memory, valid until the model's next call (a forward
     may drop the cache: generation starts with decode_reset). Parameters
     come through `access` as in a forward. A model holding less than the whole network (tensor
     or pipeline parallelism), or on a backend without the op or at a compute type it does not
     cache, returns KEEL_ERR_UNIMPLEMENTED from decode_reset, and the core runs whole windows. */
  keel_status (*decode_reset)(void* model, int32_t batch, int32_t capacity);
  keel_status (*decode)(void* model, const keel_param_access* access, const int32_t* tokens, int32_t batch,
                        int32_t count, const float** out_logits);
  /* --- appended in 0.19; optional (NULL: the model reports no metrics) --- */
  /* The model's own named scalars of the step (a mixture of experts' balancing loss, each layer's
     expert load). The core calls it once per optimizer step on every rank, after the step's last
     backward: the model writes at most `capacity` (KEEL_MODEL_METRICS_MAX) metrics of the
     micro-batches since the previous call into out, their number into *out_count (0: an empty
     step), and starts afresh. Every data-parallel rank must report the same names with the same
     combine rule in the same order; the core refuses a mismatch naming the rank and the metric,
     combines each value over the group, and writes the results under "model" in metrics.jsonl. */
  keel_status (*step_metrics)(void* model, keel_model_metric* out, int32_t capacity, int32_t* out_count);
  /* --- appended in 0.19; optional, all four of own_state_* or none (NULL: the model keeps no
     state besides its parameters) --- */
  /* State a model changes by a rule once per optimizer step rather than through its gradient,
     identical on every data-parallel rank: loss-free balancing's per-expert selection bias
     (DeepSeek-V3), moved each step by the sign of each expert's load error over the whole batch.
     step_tallies: once per optimizer step on every rank, after the step's last backward (beside
       step_metrics), the counts this rank kept over the step's training micro-batches (each sparse
       layer's tokens per expert): at most `capacity` values into out, their number into *out_count
       (the same on every data-parallel rank; 0: nothing to tally). When it exceeds capacity the
       core asks again with room for all; the values stay the same until end_step.
     end_step: then, after the strategy's step, with those tallies summed over the data-parallel
       group in rank order (the same values on every rank, so every replica keeps the same state),
       and `applied` 0 when the update was skipped (a non-finite step): the model updates its
       state from them, or leaves it, and starts the next step's tallies afresh.
     own_state_*: the state as named fp32 arrays (names as a strategy's own arrays: letters,
       digits, '_', '.', '-'; owned by the model, valid for its life). A checkpoint saves them once
       per pipeline stage (from data-parallel and tensor-parallel rank 0) and a resume writes them
       into every rank holding an array of that name, at any layout. */
  keel_status (*step_tallies)(void* model, double* out, int64_t capacity, int64_t* out_count);
  keel_status (*end_step)(void* model, const double* summed_tallies, int64_t count, int32_t applied);
  keel_status (*own_state_count)(void* model, int32_t* out_count);
  keel_status (*own_state_info)(void* model, int32_t index, const char** out_name, int64_t* out_count);
  keel_status (*read_own_state)(void* model, int32_t index, float* dst_host);
  keel_status (*write_own_state)(void* model, int32_t index, const float* src_host);
} keel_model_api;

#ifdef __cplusplus
}
#endif
#endif
