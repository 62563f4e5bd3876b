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
  /* --- appended in 0.16; optional (NULL: the source restarts from its beginning on resume) --- */
  /* The train split's position after the batches handed out so far, for a checkpoint: JSON
     text that only this source reads back. Writes at most capacity bytes with the terminating
     NUL into out, and the text's whole length without the NUL into *out_length; when
     *out_length >= capacity the text was cut and the caller asks again with more room. Each
     rank's source saves its own position. Threading: the training thread, between batches. */
  keel_status (*save_position)(void* source, char* out, size_t capacity, size_t* out_length);
  /* Continues the train split from a save_position text, before its next batch. The text
     comes from a checkpoint on disk, untrusted input: a source checks it and fails with a
     message (host set_error) rather than trusting it. */
  keel_status (*restore_position)(void* source, const char* position_json);
} keel_data_api;

#ifdef __cplusplus
}
#endif
#endif
