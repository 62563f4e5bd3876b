/* A strategy that says it was built against ABI 0.6, before the offload tier: its create args
   end before offload/offload_obj/offload_arrays, so with an "offload" section the core must
   refuse it by name rather than let it keep everything resident. Only validate_config is ever
   called; the other slots exist because the loader requires them. */
#include <keel/keel.h>

static keel_status validate(const keel_host* h, const char* j, const char* p) { (void)h, (void)j, (void)p; return KEEL_OK; }
static keel_status create(const keel_host* h, const keel_strategy_create_args* a, void** o) {
  (void)a, (void)o;
  return h->set_error(KEEL_ERR_INTERNAL, "strategy ddp-abi06: create must not be reached");
}
static void destroy(void* o) { (void)o; }
static keel_status access(void* o, keel_param_access* a) { (void)o, (void)a; return KEEL_ERR_INTERNAL; }
static keel_status begin(void* o, int32_t i, int32_t l) { (void)o, (void)i, (void)l; return KEEL_ERR_INTERNAL; }
static keel_status zero(void* o) { (void)o; return KEEL_ERR_INTERNAL; }
static keel_status norm(void* o, double* n) { (void)o, (void)n; return KEEL_ERR_INTERNAL; }
static keel_status step(void* o, const keel_strategy_step_args* a) { (void)o, (void)a; return KEEL_ERR_INTERNAL; }
static keel_status range(void* o, size_t i, int64_t b, int64_t c, float* d) {
  (void)o, (void)i, (void)b, (void)c, (void)d;
  return KEEL_ERR_INTERNAL;
}
static keel_status write(void* o, size_t i, int64_t b, int64_t c, const float* s) {
  (void)o, (void)i, (void)b, (void)c, (void)s;
  return KEEL_ERR_INTERNAL;
}

static keel_strategy_api make_table(void) {
  keel_strategy_api t = {0};
  t.struct_size = sizeof t;
  t.validate_config = validate;
  t.create = create;
  t.destroy = destroy;
  t.param_access = access;
  t.begin_microbatch = begin;
  t.zero_grads = zero;
  t.grad_sq_norm = norm;
  t.step = step;
  t.read_param = range;
  t.write_param = write;
  t.read_grad = range;
  return t;
}

static keel_strategy_api table;
static keel_plugin_info info = {sizeof(keel_plugin_info), KEEL_KIND_STRATEGY, "ddp-abi06", "0.1.0",
                                KEEL_ABI_VERSION_MAJOR, 6, &table, "a strategy built against ABI 0.6"};
static const keel_plugin_list list = {sizeof(keel_plugin_list), KEEL_ABI_VERSION_MAJOR, 6, 1, &info};

KEEL_EXPORT const keel_plugin_list* keel_plugin_entry(void) {
  table = make_table();
  return &list;
}
