/* The embedding API: what an application (the keel CLI, Python, Rust, Julia) calls on the
   core. Exported by libkeel-core. Threading: distinct trainers may be used from distinct
   threads; one trainer from one thread at a time. Strings returned live as stated. */
#ifndef KEEL_EMBED_H
#define KEEL_EMBED_H

#include "keel/types.h"

#ifdef __cplusplus
extern "C" {
#endif

#if defined(_WIN32)
#define KEEL_API __declspec(dllexport)
#else
#define KEEL_API __attribute__((visibility("default")))
#endif

typedef struct keel_trainer keel_trainer;

typedef struct keel_step_metrics {
  size_t struct_size;
  int64_t step;          /* optimizer steps done, after this one */
  float loss;            /* mean training loss over the step's micro-batches */
  float lr;
  float grad_norm;       /* before clipping */
  double tokens_per_s;
  double mfu;            /* fraction of the backend's peak */
  double step_ms;
} keel_step_metrics;

/* The calling thread's last error message; "" if none. Valid until the thread's next Keel call. */
KEEL_API const char* keel_last_error(void);
/* Adds one plugin library by path ahead of every search folder. */
KEEL_API keel_status keel_register_plugin_library(const char* path);
/* Builds a trainer from a JSON config file or JSON text; the caller destroys it. */
KEEL_API keel_status keel_trainer_create_from_file(const char* path, keel_trainer** out_trainer);
KEEL_API keel_status keel_trainer_create_from_json(const char* json_text, keel_trainer** out_trainer);
KEEL_API void keel_trainer_destroy(keel_trainer* trainer);
/* One optimizer step (all micro-batches of the accumulation). */
KEEL_API keel_status keel_trainer_step(keel_trainer* trainer, keel_step_metrics* out_metrics);
/* Mean validation loss over the configured number of validation batches. */
KEEL_API keel_status keel_trainer_evaluate(keel_trainer* trainer, float* out_val_loss);

#ifdef __cplusplus
}
#endif
#endif
