// The embedding API (abi/keel/embed.h): C entry points over Trainer. Exceptions stop here and
// become a status code plus the thread's last error.
#include <keel/embed.h>

#include <cmath>

#include "host/errors.h"
#include "loader/plugin_registry.h"
#include "train/trainer.h"

struct keel_trainer {
  std::unique_ptr<keel::Trainer> trainer;
};

namespace {

template <typename Body>
keel_status embed_call(Body&& body) noexcept {
  try {
    keel::set_last_error("");
    body();
    return KEEL_OK;
  } catch (const keel::KeelError& e) {
    keel::set_last_error(e.what());
    return e.code;
  } catch (const std::bad_alloc&) {
    keel::set_last_error("out of memory");
    return KEEL_ERR_OUT_OF_MEMORY;
  } catch (const std::exception& e) {
    keel::set_last_error(e.what());
    return KEEL_ERR_INTERNAL;
  }
}

}  // namespace

extern "C" {

KEEL_API const char* keel_last_error(void) { return keel::last_error(); }

KEEL_API keel_status keel_register_plugin_library(const char* path) {
  return embed_call([&] { keel::PluginRegistry::instance().register_library(path ? path : ""); });
}

KEEL_API keel_status keel_trainer_create_from_file(const char* path, keel_trainer** out_trainer) {
  return embed_call([&] {
    auto trainer = std::make_unique<keel::Trainer>(keel::RunConfig::from_file(path ? path : ""));
    *out_trainer = new keel_trainer{std::move(trainer)};
  });
}

KEEL_API keel_status keel_trainer_create_from_json(const char* json_text, keel_trainer** out_trainer) {
  return embed_call([&] {
    auto trainer = std::make_unique<keel::Trainer>(keel::RunConfig::from_json_text(json_text ? json_text : ""));
    *out_trainer = new keel_trainer{std::move(trainer)};
  });
}

KEEL_API void keel_trainer_destroy(keel_trainer* trainer) { delete trainer; }

KEEL_API keel_status keel_trainer_step(keel_trainer* trainer, keel_step_metrics* out) {
  return embed_call([&] {
    keel::StepResult r = trainer->trainer->train_step();
    if (out && out->struct_size >= sizeof(keel_step_metrics)) {
      const double tokens_per_s = r.tokens / std::max(r.step_seconds, 1e-9);
      *out = {sizeof(keel_step_metrics), r.step, float(r.loss), float(r.lr), float(r.grad_norm), tokens_per_s,
              trainer->trainer->flops_per_token() * tokens_per_s / trainer->trainer->peak_flops(), 1e3 * r.step_seconds};
    }
  });
}

KEEL_API keel_status keel_trainer_evaluate(keel_trainer* trainer, float* out_val_loss) {
  return embed_call([&] { *out_val_loss = float(trainer->trainer->evaluate()); });
}

}  // extern "C"
