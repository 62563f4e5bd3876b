/* The optimizer kind: an update rule on flat fp32 arrays (0.8: in the backend's memory). It
   knows nothing of layers or ranks: the strategy calls it once per contiguous range it owns. */
#ifndef KEEL_OPTIMIZER_H
#define KEEL_OPTIMIZER_H

#include "keel/backend.h"
#include "keel/host.h"
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
} keel_optimizer_info;

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
} keel_optimizer_api;

#ifdef __cplusplus
}
#endif
#endif
