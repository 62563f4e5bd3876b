/* Plain SGD (p -= lr · grad_scale · g), written in C99 as a released plugin is: declaring an
   older minor with that release's table size, or against the frozen 0.18 headers alone
   (declared_minor.h). The compatibility test loads it into today's core and trains with it, so
   a change to abi/keel/ that breaks released plugins fails here. */
#include "declared_minor.h"

#include <stdlib.h>
#include <string.h>

typedef struct frozen_sgd {
  float lr;
} frozen_sgd;

/* The config is {"plugin": "frozen_sgd", "lr": X}; a tiny reader keeps this file header-only. */
static float read_lr(const char* json) {
  const char* at = json ? strstr(json, "\"lr\"") : NULL;
  if (!at) return 0.01f;
  at = strchr(at, ':');
  return at ? strtof(at + 1, NULL) : 0.01f;
}

static keel_status validate_config(const keel_host* host, const char* json, const char* path) {
  (void)path;
  if (read_lr(json) <= 0.0f) return host->set_error(KEEL_ERR_INVALID_CONFIG, "optimizer.lr: expected a positive number");
  return KEEL_OK;
}

static keel_status create(const keel_host* host, const char* json, const char* path, void** out) {
  keel_status status = validate_config(host, json, path);
  if (status != KEEL_OK) return status;
  frozen_sgd* self = (frozen_sgd*)malloc(sizeof *self);
  if (!self) return host->set_error(KEEL_ERR_OUT_OF_MEMORY, "frozen_sgd: out of memory");
  self->lr = read_lr(json);
  *out = self;
  return KEEL_OK;
}

static void destroy(void* self) { free(self); }

static keel_status describe(void* self, keel_optimizer_info* out) {
  out->n_state_slots = 0;
  out->base_lr = ((frozen_sgd*)self)->lr;
  out->decay_flags = 0;
  return KEEL_OK;
}

static keel_status step(void* self, const keel_optimizer_step_args* a) {
  (void)self;
  for (int64_t i = 0; i < a->n; ++i) a->params[i] -= a->lr * (a->grads[i] * a->grad_scale);
  return KEEL_OK;
}

static const keel_optimizer_api table = {RELEASED_SIZE(OPTIMIZER_API, keel_optimizer_api), validate_config, create, destroy, describe, step};
static const keel_plugin_info info = {sizeof(keel_plugin_info), KEEL_KIND_OPTIMIZER, "frozen_sgd", "1.0.0",
                                      KEEL_ABI_VERSION_MAJOR, PLUGIN_MINOR, &table,
                                      "plain SGD built as a plugin of an older ABI minor"};
static const keel_plugin_list list = {sizeof(keel_plugin_list), KEEL_ABI_VERSION_MAJOR, PLUGIN_MINOR, 1, &info};

KEEL_EXPORT const keel_plugin_list* keel_plugin_entry(void) { return &list; }
