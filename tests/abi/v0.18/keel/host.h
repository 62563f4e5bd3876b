/* What the core offers every plugin: error reporting, logging, and the layout-free parameter
   initialiser. A plugin receives the host table in its create call and may keep the pointer
   for its whole life. */
#ifndef KEEL_HOST_H
#define KEEL_HOST_H

#include <stdarg.h>
#include <stdio.h>

#include "keel/params.h"
#include "keel/types.h"

#ifdef __cplusplus
extern "C" {
#endif

enum { KEEL_LOG_DEBUG = 0, KEEL_LOG_INFO = 1, KEEL_LOG_WARN = 2, KEEL_LOG_ERROR = 3 };

typedef struct keel_host {
  size_t struct_size;
  uint32_t abi_major; /* of the running core */
  uint32_t abi_minor;
  /* Sets the calling thread's last error (copied) and returns `code`. Thread-safe. */
  keel_status (*set_error)(keel_status code, const char* message);
  /* One line to the core's logger; `source` names the plugin. Thread-safe. The core prints
     lines at or above KEEL_LOG_LEVEL (environment: debug, info (the default), warn, error) to
     stderr; ranks other than 0 print warnings and errors only, prefixed with their rank. */
  void (*log)(int32_t level, const char* source, const char* message);
  /* Writes elements [begin, begin+count) of the row-major global tensor `spec` into out_host,
     following spec->init. Values depend only on (seed, spec->name, element index), so every
     layout and every shard of a parameter gets identical numbers. Thread-safe. */
  keel_status (*init_param)(const keel_param_spec* spec, uint64_t seed, int64_t begin,
                            int64_t count, float* out_host);
  /* --- appended in 0.4 --- */
  /* The calling thread's last error message ("" if none), as keel_last_error() gives it: lets a
     plugin pass on the message another plugin set (a comm call failing on a plugin's own thread).
     Valid until the thread's next call that sets an error. */
  const char* (*last_error)(void);
  /* --- appended in 0.6 --- */
  /* As init_param, but [begin, begin+count) counts elements of this rank's piece, the box
     spec->local_offset + spec->local_shape in its own row-major order: the numbers are those of
     the same elements of the global tensor, so every (tp, dp) layout starts identical. */
  keel_status (*init_piece)(const keel_param_spec* spec, uint64_t seed, int64_t begin, int64_t count,
                            float* out_host);
} keel_host;

/* printf-style helpers for plugins, so every plugin reports errors the same way. */
static inline keel_status keel_errorf(const keel_host* host, keel_status code, const char* fmt, ...) {
  char message[1024];
  va_list args;
  va_start(args, fmt);
  vsnprintf(message, sizeof message, fmt, args);
  va_end(args);
  return host->set_error(code, message);
}

static inline void keel_logf(const keel_host* host, int32_t level, const char* source, const char* fmt, ...) {
  char message[1024];
  va_list args;
  va_start(args, fmt);
  vsnprintf(message, sizeof message, fmt, args);
  va_end(args);
  host->log(level, source, message);
}

#ifdef __cplusplus
}
#endif
#endif
