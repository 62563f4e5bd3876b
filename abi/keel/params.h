/* The contract where model, strategy, optimizer and checkpoint meet (docs/plugin-contract.md, installed as share/doc/keel/plugin-contract.md): the model
   declares its parameters as a list of specs, and reaches their memory only through the
   strategy's access table, one layer at a time. */
#ifndef KEEL_PARAMS_H
#define KEEL_PARAMS_H

#include "keel/types.h"

#ifdef __cplusplus
extern "C" {
#endif

enum {
  KEEL_PARAM_NO_WEIGHT_DECAY = 1u << 0, /* biases, norm gains, position embeddings */
  KEEL_PARAM_TIED = 1u << 1,            /* used by more than one computation (GPT-2's wte and lm_head) */
  /* --- appended in 0.7: pipeline parallelism --- */
  /* A parameter used on two pipeline stages (GPT-2's wte: the
     embedding on the first, the lm_head on the last) is held by both, under the same name,
     flagged STAGE_TIED on both: its gradient is summed over the embedding group (the two
     stages, strategy.h embedding_comm) before the data-parallel reduction, so the two copies
     take identical steps. The later stage's copy is also flagged STAGE_COPY: it is counted in
     no gradient norm and saved in no checkpoint (the first stage's is). */
  KEEL_PARAM_STAGE_TIED = 1u << 2,
  KEEL_PARAM_STAGE_COPY = 1u << 3,
  /* --- appended in 0.19: expert parallelism --- */
  /* One expert's tensor of a sparse (mixture-of-experts) layer. At ep_size > 1 (model.h) only the
     ranks at the same place of every expert-parallel group hold it: its expert-data-parallel
     group (dp_size / ep_size ranks), over which the core has its gradient reduced and its shards
     and optimizer state spread, in place of the data-parallel group. The model's backward adds
     into its gradient the contributions of every token routed to it from the whole
     expert-parallel group, each scaled as the dense parameters' are and then by 1 / ep_size, so
     the expert-data-parallel mean is the data-parallel mean a single rank would form. At
     ep_size 1 the flag changes nothing. A layer's expert tensors may come in any order among its
     others. */
  KEEL_PARAM_EXPERT = 1u << 4,
  /* A tensor that does not train (the base of a LoRA fine-tune, docs/finetuning.md). The core
     holds it apart from the strategy, which never sees it: no gradient buffer, no optimizer
     state, replicated on every data-parallel rank at the backend's compute type. In a backward
     acquire its gradient descriptor has data NULL: the model forms no gradient for it (it still
     carries the gradient through it to the layer's input). Checkpoints save it as any other. */
  KEEL_PARAM_FROZEN = 1u << 5,
  /* With KEEL_PARAM_FROZEN (appended in 0.19): QLoRA's base. The core keeps the tensor in NF4
     (backend.h nf4_dequantize_dt's layout: 4-bit codes in blocks of 64, double-quantized scales)
     and hands the model the layer dequantized at the compute type at each acquire, forward and
     backward. Checkpoints and export see the dequantized values. */
  KEEL_PARAM_NF4 = 1u << 6
};

enum { KEEL_INIT_ZEROS = 0, KEEL_INIT_ONES = 1, KEEL_INIT_NORMAL = 2 };

typedef struct keel_param_spec {
  size_t struct_size;
  const char* name;              /* global, stable across layouts: "h.3.attn.qkv.weight"; owned by the model */
  int32_t layer;                 /* unit of acquire/release and of pipeline stages, 0-based */
  int32_t ndim;
  int64_t global_shape[KEEL_MAX_DIMS]; /* the whole tensor, as a checkpoint stores it */
  int32_t tp_dim;                /* -1: replicated across tensor-parallel ranks; else the split dim */
  int64_t local_shape[KEEL_MAX_DIMS];  /* this rank's piece; equals global_shape when tp_size is 1 */
  uint32_t flags;                /* KEEL_PARAM_* */
  int32_t init;                  /* KEEL_INIT_* */
  float init_std;                /* for KEEL_INIT_NORMAL (mean 0) */
  int64_t init_rows;             /* rows [0, init_rows) follow `init`, later rows are zero
                                    (padded vocabulary); -1: every row */
  /* --- appended in 0.6 --- */
  /* This rank's piece is the box local_offset + local_shape of the global tensor: the global
     index of its first element along each dimension (nonzero only along tp_dim). A model built
     before 0.6 describes whole tensors; the core hands strategies specs of this size (it widens
     older ones, offset 0), so a strategy may read this field whatever the model's minor. */
  int64_t local_offset[KEEL_MAX_DIMS];
} keel_param_spec;

/* A strategy built against minor m walks the core's spec array with this stride. */
#define KEEL_PARAM_SPEC_SIZE(m) ((m) < 6 ? KEEL_STRUCT_SIZE(keel_param_spec, init_rows) : sizeof(keel_param_spec))

enum { KEEL_PHASE_FORWARD = 0, KEEL_PHASE_BACKWARD = 1 };

/* Handed to the model in every forward and backward call; filled by the strategy.
   Threading: called only from the thread running the model's forward/backward. */
typedef struct keel_param_access {
  size_t struct_size;
  void* ctx; /* the strategy's; valid as long as the strategy object */
  /* Layer `layer`'s parameters in param-spec order (n tensors, local shapes, backend memory)
     and, in KEEL_PHASE_BACKWARD, its gradient buffers to ACCUMULATE into (grads may be NULL
     in the forward phase: the model chooses, and a strategy must accept NULL there). The
     descriptors' memory stays valid until the matching release. Gradients are fp32; from 0.8 the
     parameters are at the backend's compute type (backend.h compute_dtype): under bf16, a bf16
     copy of the fp32 masters the strategy keeps for the optimizer and checkpoints. */
  keel_status (*acquire)(void* ctx, int32_t layer, int32_t phase,
                         keel_tensor* params, keel_tensor* grads, size_t n);
  /* Done with the layer. `grads_final` (backward only) says this was the layer's last use in
     this backward pass: its gradients for this micro-batch are complete, so the strategy may
     start reducing them. A tied layer is acquired twice and released final only once. */
  keel_status (*release)(void* ctx, int32_t layer, int32_t phase, int32_t grads_final);
} keel_param_access;

#ifdef __cplusplus
}
#endif
#endif
