/* A strategy plugin ("frozen_resident") written in C99 as a released plugin is: declaring an
   older minor and passing that release's struct sizes, or against the frozen 0.18 headers alone
   (declared_minor.h). Every parameter whole and resident in backend memory, one allocation per
   parameter, its gradient and each optimizer state slot. The compatibility test trains with it
   beside the built-in ddp, so a core that hands a strategy built before 0.6 a spec array of
   another stride (keel_param_spec grew local_offset in 0.6) fails here: this file walks
   args->params with ITS release's size of keel_param_spec, as any released strategy does, and
   hands the optimizer step arguments of its release's size, the bytes past it poisoned, as an
   old binary's stack holds no field it never knew. Single rank, tp 1: whole tensors. */
#include "declared_minor.h"

#include <stdlib.h>
#include <string.h>

static const char kSource[] = "strategy frozen_resident";

typedef struct resident_param {
  const keel_param_spec* spec;                 /* the core's array, indexed with our stride */
  int64_t numel;
  float* value;                                /* backend memory, numel floats each */
  float* grad;                                 /* zero-filled at alloc; the model adds into it */
  float* state[KEEL_OPTIMIZER_MAX_STATE_SLOTS];
} resident_param;

typedef struct frozen_resident {
  const keel_host* host;
  const keel_backend_api* backend;
  void* backend_obj;
  const keel_optimizer_api* optimizer;
  void* optimizer_obj;
  keel_optimizer_info optimizer_info;
  keel_device device;
  size_t n_params;
  int32_t n_layers;
  resident_param* params;
  size_t* layer_params;  /* parameter indices grouped by layer, spec order within a layer */
  size_t* layer_begin;   /* layer l's indices are layer_params[layer_begin[l] .. layer_begin[l+1]) */
} frozen_resident;

static keel_status failf(const keel_host* host, keel_status code, const char* what) {
  return keel_errorf(host, code, "%s: %s", kSource, what);
}

static keel_status validate_config(const keel_host* host, const char* config_json, const char* json_path) {
  (void)host;
  (void)config_json;
  (void)json_path;
  return KEEL_OK;  /* {"plugin": "frozen_resident"}: nothing to configure */
}

static int64_t element_count(const keel_param_spec* spec) {
  int64_t numel = 1;
  for (int32_t d = 0; d < spec->ndim; ++d) numel *= spec->local_shape[d];
  return numel;
}

static void destroy(void* handle) {
  frozen_resident* self = (frozen_resident*)handle;
  if (!self) return;
  for (size_t i = 0; self->params && i < self->n_params; ++i) {
    resident_param* p = &self->params[i];
    if (p->value) self->backend->free_memory(self->backend_obj, p->value);
    if (p->grad) self->backend->free_memory(self->backend_obj, p->grad);
    for (int32_t s = 0; s < KEEL_OPTIMIZER_MAX_STATE_SLOTS; ++s)
      if (p->state[s]) self->backend->free_memory(self->backend_obj, p->state[s]);
  }
  free(self->params);
  free(self->layer_params);
  free(self->layer_begin);
  free(self);
}

static keel_status alloc_floats(frozen_resident* self, int64_t numel, float** out) {
  void* memory = NULL;
  keel_status status = self->backend->alloc(self->backend_obj, (size_t)(numel > 0 ? numel : 1) * sizeof(float), &memory);
  if (status != KEEL_OK) return status;
  *out = (float*)memory;
  return KEEL_OK;
}

/* Every parameter, gradient and state slot allocated (zero-filled), values from host->init_param. */
static keel_status allocate_and_initialise(frozen_resident* self, uint64_t seed) {
  for (size_t i = 0; i < self->n_params; ++i) {
    resident_param* p = &self->params[i];
    keel_status status = alloc_floats(self, p->numel, &p->value);
    if (status == KEEL_OK) status = alloc_floats(self, p->numel, &p->grad);
    for (int32_t s = 0; status == KEEL_OK && s < self->optimizer_info.n_state_slots; ++s)
      status = alloc_floats(self, p->numel, &p->state[s]);
    if (status != KEEL_OK) return status;
    float* staging = (float*)malloc((size_t)(p->numel > 0 ? p->numel : 1) * sizeof(float));
    if (!staging) return failf(self->host, KEEL_ERR_OUT_OF_MEMORY, "out of host memory for initialisation");
    status = self->host->init_param(p->spec, seed, 0, p->numel, staging);
    if (status == KEEL_OK)
      status = self->backend->copy(self->backend_obj, p->value, staging, (size_t)p->numel * sizeof(float),
                                   KEEL_COPY_HOST_TO_DEVICE);
    free(staging);
    if (status != KEEL_OK) return status;
  }
  return KEEL_OK;
}

/* The specs, read with this release's stride, and the per-layer index lists acquire serves. */
static keel_status adopt_specs(frozen_resident* self, const keel_strategy_create_args* args) {
  self->params = (resident_param*)calloc(args->n_params ? args->n_params : 1, sizeof(resident_param));
  self->layer_params = (size_t*)calloc(args->n_params ? args->n_params : 1, sizeof(size_t));
  self->layer_begin = (size_t*)calloc((size_t)args->n_layers + 1, sizeof(size_t));
  if (!self->params || !self->layer_params || !self->layer_begin)
    return failf(self->host, KEEL_ERR_OUT_OF_MEMORY, "out of host memory for the parameter table");
  for (size_t i = 0; i < args->n_params; ++i) {
    const size_t stride = RELEASED_SIZE(PARAM_SPEC, keel_param_spec);
    const keel_param_spec* spec = (const keel_param_spec*)((const char*)args->params + i * stride);
    if (spec->struct_size != stride)
      return keel_errorf(self->host, KEEL_ERR_ABI_MISMATCH,
                         "%s: params[%zu].struct_size is %zu, this plugin was built for %zu (ABI 0.%d)", kSource, i,
                         spec->struct_size, stride, PLUGIN_MINOR);
    if (spec->layer < 0 || spec->layer >= args->n_layers || spec->ndim < 0 || spec->ndim > KEEL_MAX_DIMS)
      return keel_errorf(self->host, KEEL_ERR_INVALID_ARGUMENT, "%s: params[%zu] has layer %d and ndim %d; expected a "
                         "layer in [0, %d) and ndim in [0, %d]", kSource, i, spec->layer, spec->ndim, args->n_layers,
                         KEEL_MAX_DIMS);
    self->params[i].spec = spec;
    self->params[i].numel = element_count(spec);
    self->layer_begin[spec->layer + 1]++;
  }
  for (int32_t l = 0; l < args->n_layers; ++l) self->layer_begin[l + 1] += self->layer_begin[l];
  {
    size_t* fill = (size_t*)calloc((size_t)args->n_layers + 1, sizeof(size_t));
    if (!fill) return failf(self->host, KEEL_ERR_OUT_OF_MEMORY, "out of host memory for the layer table");
    for (size_t i = 0; i < args->n_params; ++i) {
      const int32_t layer = self->params[i].spec->layer;
      self->layer_params[self->layer_begin[layer] + fill[layer]++] = i;
    }
    free(fill);
  }
  return KEEL_OK;
}

static keel_status create(const keel_host* host, const keel_strategy_create_args* args, void** out_strategy) {
  if (!host || !args || !out_strategy) return KEEL_ERR_INVALID_ARGUMENT;
  if (args->dp_size > 1)
    return keel_errorf(host, KEEL_ERR_UNIMPLEMENTED, "%s: runs on one rank; dp_size is %d", kSource, args->dp_size);
  frozen_resident* self = (frozen_resident*)calloc(1, sizeof *self);
  if (!self) return failf(host, KEEL_ERR_OUT_OF_MEMORY, "out of host memory");
  self->host = host;
  self->backend = args->backend;
  self->backend_obj = args->backend_obj;
  self->optimizer = args->optimizer;
  self->optimizer_obj = args->optimizer_obj;
  self->n_params = args->n_params;
  self->n_layers = args->n_layers;
  self->optimizer_info.struct_size = RELEASED_SIZE(OPTIMIZER_INFO, keel_optimizer_info);
  keel_status status = self->backend->device(self->backend_obj, &self->device);
  if (status == KEEL_OK) status = self->optimizer->describe(self->optimizer_obj, &self->optimizer_info);
  if (status == KEEL_OK && (self->optimizer_info.n_state_slots < 0 ||
                            self->optimizer_info.n_state_slots > KEEL_OPTIMIZER_MAX_STATE_SLOTS))
    status = keel_errorf(host, KEEL_ERR_INVALID_ARGUMENT, "%s: the optimizer asks for %d state slots, at most %d",
                         kSource, self->optimizer_info.n_state_slots, KEEL_OPTIMIZER_MAX_STATE_SLOTS);
  if (status == KEEL_OK) status = adopt_specs(self, args);
  if (status == KEEL_OK) status = allocate_and_initialise(self, args->seed);
  if (status != KEEL_OK) {
    destroy(self);
    return status;
  }
  *out_strategy = self;
  return KEEL_OK;
}

/* --- the model's access: views of the resident tensors --- */

static keel_tensor view_of(const frozen_resident* self, const resident_param* p, float* data) {
  keel_tensor tensor;
  memset(&tensor, 0, sizeof tensor);
  tensor.data = data;
  tensor.device = self->device;
  tensor.ndim = p->spec->ndim;
  tensor.dtype.code = KEEL_DTYPE_FLOAT;
  tensor.dtype.bits = 32;
  tensor.dtype.lanes = 1;
  for (int32_t d = 0; d < p->spec->ndim; ++d) tensor.shape[d] = p->spec->local_shape[d];
  return tensor;
}

static keel_status acquire(void* ctx, int32_t layer, int32_t phase, keel_tensor* params, keel_tensor* grads, size_t n) {
  frozen_resident* self = (frozen_resident*)ctx;
  if (layer < 0 || layer >= self->n_layers)
    return keel_errorf(self->host, KEEL_ERR_INVALID_ARGUMENT, "%s: acquire: layer %d is outside [0, %d)", kSource,
                       layer, self->n_layers);
  const size_t first = self->layer_begin[layer], count = self->layer_begin[layer + 1] - first;
  if (n != count)
    return keel_errorf(self->host, KEEL_ERR_INVALID_ARGUMENT, "%s: acquire: layer %d has %zu parameters, asked for %zu",
                       kSource, layer, count, n);
  if (n > 0 && (!params || (phase == KEEL_PHASE_BACKWARD && !grads)))
    return failf(self->host, KEEL_ERR_INVALID_ARGUMENT, "acquire: params, or grads in the backward phase, is NULL");
  for (size_t k = 0; k < n; ++k) {
    const resident_param* p = &self->params[self->layer_params[first + k]];
    params[k] = view_of(self, p, p->value);
    if (grads) grads[k] = view_of(self, p, p->grad);
  }
  return KEEL_OK;
}

static keel_status release(void* ctx, int32_t layer, int32_t phase, int32_t grads_final) {
  (void)ctx;
  (void)layer;
  (void)phase;
  (void)grads_final;
  return KEEL_OK;  /* resident: nothing moves */
}

static keel_status param_access(void* handle, keel_param_access* out_access) {
  out_access->ctx = handle;
  out_access->acquire = acquire;
  out_access->release = release;
  return KEEL_OK;
}

static keel_status begin_microbatch(void* handle, int32_t index, int32_t is_last) {
  (void)handle;
  (void)index;
  (void)is_last;
  return KEEL_OK;
}

/* --- the step --- */

static keel_status zero_grads(void* handle) {
  frozen_resident* self = (frozen_resident*)handle;
  for (size_t i = 0; i < self->n_params; ++i) {
    const resident_param* p = &self->params[i];
    keel_status status = self->backend->fill_zero(self->backend_obj, p->grad, (size_t)p->numel * sizeof(float));
    if (status != KEEL_OK) return status;
  }
  return KEEL_OK;
}

static keel_status grad_sq_norm(void* handle, double* out_sum_squares) {
  frozen_resident* self = (frozen_resident*)handle;
  double total = 0.0;
  for (size_t i = 0; i < self->n_params; ++i) {
    double sum = 0.0;
    keel_status status = self->backend->sum_squares(self->backend_obj, self->params[i].grad, self->params[i].numel, &sum);
    if (status != KEEL_OK) return status;
    total += sum;
  }
  *out_sum_squares = total;
  return KEEL_OK;
}

/* The optimizer once per parameter; weight decay unless the parameter carries one of the
   optimizer's decay_flags, as the built-in store decides it. */
static keel_status step(void* handle, const keel_strategy_step_args* args) {
  frozen_resident* self = (frozen_resident*)handle;
  for (size_t i = 0; i < self->n_params; ++i) {
    resident_param* p = &self->params[i];
    keel_optimizer_step_args step_args;
    memset(&step_args, 0xA5, sizeof step_args);  /* past this release's size: bytes it never wrote */
    memset(&step_args, 0, RELEASED_SIZE(OPTIMIZER_STEP_ARGS, keel_optimizer_step_args));
    step_args.struct_size = RELEASED_SIZE(OPTIMIZER_STEP_ARGS, keel_optimizer_step_args);
    step_args.device = self->device;
    step_args.params = p->value;
    step_args.grads = p->grad;
    step_args.state = p->state;
    step_args.n = p->numel;
    step_args.lr = args->lr;
    step_args.grad_scale = args->grad_scale;
    step_args.step = args->step;
    step_args.apply_weight_decay = (p->spec->flags & self->optimizer_info.decay_flags) == 0;
    keel_status status = self->optimizer->step(self->optimizer_obj, &step_args);
    if (status != KEEL_OK) return status;
  }
  return KEEL_OK;
}

/* --- host access by flat range of the whole tensor --- */

static keel_status check_range(const frozen_resident* self, const char* what, size_t index, int64_t begin, int64_t count,
                               const void* host_memory) {
  if (index >= self->n_params)
    return keel_errorf(self->host, KEEL_ERR_INVALID_ARGUMENT, "%s: %s: parameter index %zu is outside [0, %zu)",
                       kSource, what, index, self->n_params);
  const int64_t numel = self->params[index].numel;
  if (begin < 0 || count < 0 || begin > numel - count || (count > 0 && !host_memory))
    return keel_errorf(self->host, KEEL_ERR_INVALID_ARGUMENT,
                       "%s: %s: range [%lld, %lld) of \"%s\" is outside [0, %lld) or its host pointer is NULL", kSource,
                       what, (long long)begin, (long long)(begin + count), self->params[index].spec->name,
                       (long long)numel);
  return KEEL_OK;
}

static keel_status copy_floats(const frozen_resident* self, void* dst, const void* src, int64_t count, int32_t direction) {
  if (count == 0) return KEEL_OK;
  return self->backend->copy(self->backend_obj, dst, src, (size_t)count * sizeof(float), direction);
}

static keel_status state_slot(const frozen_resident* self, const char* what, int32_t slot) {
  if (slot < 0 || slot >= self->optimizer_info.n_state_slots)
    return keel_errorf(self->host, KEEL_ERR_INVALID_ARGUMENT, "%s: %s: state slot %d is outside [0, %d)", kSource, what,
                       slot, self->optimizer_info.n_state_slots);
  return KEEL_OK;
}

static keel_status read_param(void* handle, size_t index, int64_t begin, int64_t count, float* dst_host) {
  const frozen_resident* self = (const frozen_resident*)handle;
  keel_status status = check_range(self, "read_param", index, begin, count, dst_host);
  if (status != KEEL_OK) return status;
  return copy_floats(self, dst_host, self->params[index].value + begin, count, KEEL_COPY_DEVICE_TO_HOST);
}

static keel_status write_param(void* handle, size_t index, int64_t begin, int64_t count, const float* src_host) {
  const frozen_resident* self = (const frozen_resident*)handle;
  keel_status status = check_range(self, "write_param", index, begin, count, src_host);
  if (status != KEEL_OK) return status;
  return copy_floats(self, self->params[index].value + begin, src_host, count, KEEL_COPY_HOST_TO_DEVICE);
}

static keel_status read_grad(void* handle, size_t index, int64_t begin, int64_t count, float* dst_host) {
  const frozen_resident* self = (const frozen_resident*)handle;
  keel_status status = check_range(self, "read_grad", index, begin, count, dst_host);
  if (status != KEEL_OK) return status;
  return copy_floats(self, dst_host, self->params[index].grad + begin, count, KEEL_COPY_DEVICE_TO_HOST);
}

static keel_status read_state(void* handle, int32_t slot, size_t index, int64_t begin, int64_t count, float* dst_host) {
  const frozen_resident* self = (const frozen_resident*)handle;
  keel_status status = state_slot(self, "read_state", slot);
  if (status == KEEL_OK) status = check_range(self, "read_state", index, begin, count, dst_host);
  if (status != KEEL_OK) return status;
  return copy_floats(self, dst_host, self->params[index].state[slot] + begin, count, KEEL_COPY_DEVICE_TO_HOST);
}

static keel_status write_state(void* handle, int32_t slot, size_t index, int64_t begin, int64_t count,
                               const float* src_host) {
  const frozen_resident* self = (const frozen_resident*)handle;
  keel_status status = state_slot(self, "write_state", slot);
  if (status == KEEL_OK) status = check_range(self, "write_state", index, begin, count, src_host);
  if (status != KEEL_OK) return status;
  return copy_floats(self, self->params[index].state[slot] + begin, src_host, count, KEEL_COPY_HOST_TO_DEVICE);
}

/* Whole tensors, parameter and state alike: this is the only rank. */
static keel_status owned_range(void* handle, int32_t kind, size_t index, int64_t* begin, int64_t* end) {
  const frozen_resident* self = (const frozen_resident*)handle;
  keel_status status = kind == -1 ? KEEL_OK : state_slot(self, "owned_range", kind);
  if (status == KEEL_OK) status = check_range(self, "owned_range", index, 0, 0, NULL);
  if (status != KEEL_OK) return status;
  if (!begin || !end) return failf(self->host, KEEL_ERR_INVALID_ARGUMENT, "owned_range: begin or end is NULL");
  *begin = 0;
  *end = self->params[index].numel;
  return KEEL_OK;
}

/* Writes only the fields that fit in the caller's struct_size. */
static keel_status describe(void* handle, keel_strategy_info* out) {
  const frozen_resident* self = (const frozen_resident*)handle;
  const size_t size = RELEASED_SIZE(STRATEGY_INFO, keel_strategy_info);
  if (!out || out->struct_size < size)
    return failf(self->host, KEEL_ERR_INVALID_ARGUMENT, "describe: out is NULL or smaller than this plugin's ABI");
  uint64_t elements = 0;
  for (size_t i = 0; i < self->n_params; ++i) elements += (uint64_t)self->params[i].numel;
  memset(out, 0, size);
  out->struct_size = size;
  out->params_resident = 1;
  out->param_bytes = elements * sizeof(float);
  out->grad_bytes = elements * sizeof(float);
  out->state_bytes = elements * sizeof(float) * (uint64_t)self->optimizer_info.n_state_slots;
  return KEEL_OK;
}

/* Designated initialisers: the slots of 0.4; later ones (0.5's own state) stay NULL. */
static const keel_strategy_api table = {
    .struct_size = RELEASED_SIZE(STRATEGY_API, keel_strategy_api),
    .validate_config = validate_config,
    .create = create,
    .destroy = destroy,
    .param_access = param_access,
    .begin_microbatch = begin_microbatch,
    .zero_grads = zero_grads,
    .grad_sq_norm = grad_sq_norm,
    .step = step,
    .read_param = read_param,
    .write_param = write_param,
    .read_grad = read_grad,
    .read_state = read_state,
    .write_state = write_state,
    .owned_range = owned_range,
    .describe = describe,
};
static const keel_plugin_info info = {sizeof(keel_plugin_info), KEEL_KIND_STRATEGY, "frozen_resident", "1.0.0",
                                      KEEL_ABI_VERSION_MAJOR, PLUGIN_MINOR, &table,
                                      "whole, resident parameters; a strategy built as one of an older ABI minor"};
static const keel_plugin_list list = {sizeof(keel_plugin_list), KEEL_ABI_VERSION_MAJOR, PLUGIN_MINOR, 1, &info};

KEEL_EXPORT const keel_plugin_list* keel_plugin_entry(void) { return &list; }
