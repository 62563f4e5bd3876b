// A fake optimizer for strategy tests: describe answers what the test chose (state slots,
// decay flags), and step records each call and adds a marker to every element it was given
// (params += 1, state slot k += k + 1), so a test sees which memory each call covered.
#pragma once

#include <keel/optimizer.h>

#include <vector>

namespace keel_test {

struct RecordedStep {
  keel_optimizer_step_args args;
  std::vector<float*> state;  // copied: args.state is only valid during the call
};

struct RecordingOptimizer {
  keel_optimizer_info info{sizeof(keel_optimizer_info), 2, 1e-3f, KEEL_PARAM_NO_WEIGHT_DECAY};
  std::vector<RecordedStep> steps;

  static keel_status describe(void* self, keel_optimizer_info* out) {
    *out = static_cast<RecordingOptimizer*>(self)->info;
    return KEEL_OK;
  }
  static keel_status step(void* self, const keel_optimizer_step_args* args) {
    auto* optimizer = static_cast<RecordingOptimizer*>(self);
    RecordedStep record{*args, std::vector<float*>(args->state, args->state + optimizer->info.n_state_slots)};
    record.args.state = nullptr;
    for (int64_t i = 0; i < args->n; ++i) {
      args->params[i] += 1.0f;
      for (int32_t k = 0; k < optimizer->info.n_state_slots; ++k) args->state[k][i] += static_cast<float>(k + 1);
    }
    optimizer->steps.push_back(record);
    return KEEL_OK;
  }

  // validate_config, create and destroy are the core's business, never the strategy's.
  static keel_optimizer_api table() {
    keel_optimizer_api api{};
    api.struct_size = sizeof(api);
    api.describe = describe;
    api.step = step;
    return api;
  }
};

}  // namespace keel_test
