/* The optimizer kind: an update rule on flat fp32 arrays (0.8: in the backend's memory). It
   knows nothing of layers or ranks: the strategy calls it once per contiguous range it owns.
   0.12: an optimizer may keep its state packed (8-bit codes, factored moments) and ask for one
   call per tensor; the n_state_slots fp32 arrays per element stay the state's exchange form,
   the one checkpoints store and reshard (docs/plugin-contract.md). */
#ifndef KEEL_OPTIMIZER_H
#define KEEL_OPTIMIZER_H

#include "keel/backend.h"
#include "keel/host.h"
#include "keel/params.h"
#include "keel/types.h"

#ifdef __cplusplus
extern "C" {
#endif

#define KEEL_OPTIMIZER_MAX_STATE_SLOTS 4

typedef struct keel_optimizer_info {
  size_t struct_size;
  int32_t n_state_slots; /* fp32 arrays per parameter element (momentum: 1, AdamW: 2) */
  float base_lr;         /* the configured peak learning rate */
  uint32_t decay_flags;  /* KEEL_PARAM_* flags whose ranges get no weight decay */
  /* --- appended in 0.12 --- */
  /* KEEL_OPTIMIZER_* below. This word was padding before 0.12 (the struct's size did not
     change), so a caller reads it only from an optimizer whose table is long enough to hold
     unpack_state (struct_size), and takes 0 otherwise. */
  uint32_t flags;
} keel_optimizer_info;

enum {
  /* The state lives packed in one host buffer per call range (packed_state_bytes long, zero
     bytes at the first step, which must mean a zero state), not as n_state_slots fp32 arrays.
     Those arrays remain the exchange form: pack_state and unpack_state convert a range's
     state between the two, and unpack(pack(x)) must give back x's bits for any x that an
     unpack produced, so a checkpoint resumes exactly. The step computes on the host
     (KEEL_DEVICE_CPU memory). Requires the three 0.12 slots. A packed buffer is at least
     16-byte aligned. */
  KEEL_OPTIMIZER_PACKED_STATE = 1u << 0,
  /* Every call covers one whole tensor (args spec; offset 0, n = the tensor's elements): rules
     that reduce over rows, columns or the tensor (a factored second moment, an update's RMS).
     A strategy that splits tensors (ZeRO shards, tensor-parallel pieces) refuses it. Only
     together with KEEL_OPTIMIZER_PACKED_STATE. */
  KEEL_OPTIMIZER_WHOLE_TENSORS = 1u << 1
};

/* One call range, as packed_state_bytes, pack_state and unpack_state see it (0.12). */
typedef struct keel_optimizer_range {
  size_t struct_size;
  int64_t n;                    /* elements */
  const keel_param_spec* spec;  /* the tensor the range lies in; NULL when it spans several */
  int64_t offset;               /* the range's first element within the spec's piece */
} keel_optimizer_range;

typedef struct keel_optimizer_step_args {
  size_t struct_size;
  keel_device device;         /* where params, grads and state live */
  float* params;              /* n elements, updated in place */
  const float* grads;         /* n elements, not yet multiplied by grad_scale */
  float* const* state;        /* n_state_slots arrays of n elements, zero at the first step */
  int64_t n;
  float lr;                   /* this step's learning rate (schedule applied) */
  float grad_scale;           /* multiply grads by this first (clipping) */
  int64_t step;               /* 1-based count of optimizer steps, for bias correction */
  int32_t apply_weight_decay; /* 0 for ranges whose parameters are excluded */
  /* --- appended in 0.8 --- */
  /* The backend that owns params, grads and state. Where host code cannot read the device's
     memory (anything but KEEL_DEVICE_CPU), the optimizer queues its update as backend ops
     (backend.h adamw_update, sgd_update) instead of computing on the host. */
  const keel_backend_api* backend;
  void* backend_obj;
  /* --- appended in 0.12 --- */
  void* packed_state;           /* KEEL_OPTIMIZER_PACKED_STATE: this range's buffer (state is then NULL) */
  keel_optimizer_range range;   /* what the range is; struct_size 0: not described (a strategy
                                   that does not know packed state) */
} keel_optimizer_step_args;

typedef struct keel_optimizer_api {
  size_t struct_size;
  keel_status (*validate_config)(const keel_host* host, const char* config_json, const char* json_path);
  keel_status (*create)(const keel_host* host, const char* config_json, const char* json_path,
                        void** out_optimizer);
  void (*destroy)(void* optimizer);
  /* The caller sets out_info->struct_size; the optimizer writes only the fields that fit in it. */
  keel_status (*describe)(void* optimizer, keel_optimizer_info* out_info);
  /* Threading: may be called concurrently on disjoint ranges. */
  keel_status (*step)(void* optimizer, const keel_optimizer_step_args* args);
  /* --- appended in 0.12, KEEL_OPTIMIZER_PACKED_STATE only --- */
  keel_status (*packed_state_bytes)(void* optimizer, const keel_optimizer_range* range, int64_t* out_bytes);
  /* state: n_state_slots host arrays of range->n floats, read; packed: written. */
  keel_status (*pack_state)(void* optimizer, const keel_optimizer_range* range, const float* const* state,
                            void* packed);
  /* packed: read; state: n_state_slots host arrays of range->n floats, written. */
  keel_status (*unpack_state)(void* optimizer, const keel_optimizer_range* range, const void* packed,
                              float* const* state);
} keel_optimizer_api;

#ifdef __cplusplus
}
#endif
#endif
