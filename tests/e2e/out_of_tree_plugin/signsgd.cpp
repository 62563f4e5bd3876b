// signSGD (Bernstein et al., 2018): p -= lr · sign(g). A third-party optimizer in one file,
// using only the installed headers.
#include <keel/keel.h>
// The flat path from before keel_support's rooms (now keel_support/common/abi_guard.hpp): its
// installed forwarding header keeps plugin source like this compiling for one more release.
#include <keel_support/abi_guard.hpp>

namespace {

struct SignSgd {
  const keel_host* host;
  float lr;
};

float read_lr(const char* json, const char* path) {
  auto section = keel_support::JsonSection::parse(json, path);
  section.allow("plugin");
  float lr = section.get_in_range<float>("lr", 1e-3f, 0.0f, 10.0f);
  section.finish();
  return lr;
}

keel_status validate(const keel_host* host, const char* json, const char* path) {
  return keel_support::guard(host, "optimizer signsgd", [&] { read_lr(json, path); });
}

keel_status create(const keel_host* host, const char* json, const char* path, void** out) {
  return keel_support::guard(host, "optimizer signsgd", [&] { *out = new SignSgd{host, read_lr(json, path)}; });
}

void destroy(void* self) { delete static_cast<SignSgd*>(self); }

keel_status describe(void* self, keel_optimizer_info* info) {
  info->n_state_slots = 0;
  info->base_lr = static_cast<SignSgd*>(self)->lr;
  info->decay_flags = 0;
  return KEEL_OK;
}

keel_status step(void*, const keel_optimizer_step_args* a) {
  for (int64_t i = 0; i < a->n; ++i) a->params[i] -= a->lr * float((a->grads[i] > 0) - (a->grads[i] < 0));
  return KEEL_OK;
}

const keel_optimizer_api table = {sizeof(keel_optimizer_api), validate, create, destroy, describe, step};
const keel_plugin_info info = {sizeof(keel_plugin_info), KEEL_KIND_OPTIMIZER, "signsgd", "1.0.0",
                               KEEL_ABI_VERSION_MAJOR, KEEL_ABI_VERSION_MINOR, &table, "sign of the gradient, scaled by lr"};
const keel_plugin_list list = {sizeof(keel_plugin_list), KEEL_ABI_VERSION_MAJOR, KEEL_ABI_VERSION_MINOR, 1, &info};

}  // namespace

extern "C" KEEL_EXPORT const keel_plugin_list* keel_plugin_entry(void) { return &list; }
