/* The one symbol a plugin library exports, keel_plugin_entry, and what it returns: the
   plugins the library holds, each with its kind, name, version, ABI version and kind table.
   Everything the entry returns is static: it lives as long as the library is loaded. */
#ifndef KEEL_PLUGIN_H
#define KEEL_PLUGIN_H

#include "keel/types.h"
#include "keel/version.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Kinds added later take the next numbers. */
enum {
  KEEL_KIND_BACKEND = 1,
  KEEL_KIND_MODEL = 2,
  KEEL_KIND_OPTIMIZER = 3,
  KEEL_KIND_STRATEGY = 4,
  KEEL_KIND_DATA = 5,      /* 0.3: a source of token batches (data.h) */
  KEEL_KIND_COMM = 6,      /* 0.4: collectives and point-to-point (comm.h) */
  KEEL_KIND_SCHEDULE = 7,  /* 0.7: a pipeline schedule, each rank's action list (schedule.h) */
  KEEL_KIND_OFFLOAD = 8    /* 0.7: a tier for offloaded arrays, host memory or NVMe (offload.h) */
};

typedef struct keel_plugin_info {
  size_t struct_size;
  int32_t kind;            /* KEEL_KIND_* */
  const char* name;        /* unique within a kind: the config's "plugin" value */
  const char* version;     /* the plugin's own, "1.0.0" */
  uint32_t abi_major;      /* KEEL_ABI_VERSION_* it was built against */
  uint32_t abi_minor;
  const void* api;         /* the kind's table (keel_backend_api, ...), starting with struct_size */
  const char* description; /* one line for `keel plugins` */
} keel_plugin_info;

typedef struct keel_plugin_list {
  size_t struct_size;
  uint32_t abi_major;      /* repeated here so the loader checks it before reading further */
  uint32_t abi_minor;
  size_t count;
  const keel_plugin_info* plugins;
} keel_plugin_list;

#define KEEL_PLUGIN_ENTRY_SYMBOL "keel_plugin_entry"
typedef const keel_plugin_list* (*keel_plugin_entry_fn)(void);

#if defined(_WIN32)
#define KEEL_EXPORT __declspec(dllexport)
#else
#define KEEL_EXPORT __attribute__((visibility("default")))
#endif

/* A slot is callable only when the plugin's table is long enough to hold it (a plugin built
   against an older minor has a shorter table) and it is not NULL. */
#define KEEL_HAS_SLOT(table, slot)                                                         \
  ((table) != NULL &&                                                                      \
   (table)->struct_size >= offsetof(__typeof__(*(table)), slot) + sizeof((table)->slot) && \
   (table)->slot != NULL)

#ifdef __cplusplus
}
#endif
#endif
