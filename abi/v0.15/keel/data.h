/* The data kind (0.3): a source of token batches the core trains on instead of its built-in
   sources, selected with "data": {"plugin": NAME, ...}. Bindings use it to feed training from
   a language's own iterators (a Python generator of NumPy arrays). */
#ifndef KEEL_DATA_H
#define KEEL_DATA_H

#include "keel/host.h"
#include "keel/types.h"

#ifdef __cplusplus
extern "C" {
#endif

enum { KEEL_SPLIT_TRAIN = 0, KEEL_SPLIT_VALIDATION = 1 };

typedef struct keel_data_api {
  size_t struct_size;
  keel_status (*validate_config)(const keel_host* host, const char* config_json, const char* json_path);
  keel_status (*create)(const keel_host* host, const char* config_json, const char* json_path, void** out_source);
  void (*destroy)(void* source);
  /* Fills tokens (B,T) and next-token targets (B,T), host memory owned by the caller. For the
     validation split the core asks for data.val_batches batches per evaluation and calls
     reset_split first, so every evaluation sees the same batches.
     Threading: called from the training thread only. */
  keel_status (*next_batch)(void* source, int32_t split, int32_t batch, int32_t seq_len, int32_t* tokens,
                            int32_t* targets);
  /* Restarts a split from its beginning; may be NULL when the source cannot restart. */
  keel_status (*reset_split)(void* source, int32_t split);
} keel_data_api;

#ifdef __cplusplus
}
#endif
#endif
