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
} keel_model_create_args;

typedef struct keel_model_info {
  size_t struct_size;
  const keel_param_spec* params; /* owned by the model, valid for its life */
  size_t n_params;
  int32_t n_layers;              /* acquire/release units: params[i].layer < n_layers */
  int32_t vocab_size;            /* true vocabulary; token ids must be below it */
  int32_t padded_vocab_size;     /* row stride of logits */
  int32_t max_seq_len;
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
} keel_forward_args;

typedef struct keel_backward_args {
  size_t struct_size;
  const keel_param_access* access;
  int32_t microbatch;       /* a micro-batch whose forward had targets */
  float loss_scale;         /* d(total objective)/d(this micro-batch's mean loss), e.g. 1/accum */
} keel_backward_args;

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
} keel_external_tensor;

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
} keel_model_api;

#ifdef __cplusplus
}
#endif
#endif
