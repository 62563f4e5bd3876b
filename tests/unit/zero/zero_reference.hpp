// The single-rank reference a zero run must reproduce: the parameters start from the test
// host's initial values and each step applies the real sgd plugin, once per parameter, to the
// MEAN over ranks of every rank's gradients accumulated over its micro-batches.
#pragma once

#include "zero_rank_driver.hpp"

namespace keel_test {

struct Reference {
  std::vector<std::vector<float>> params;    // per parameter, after the steps
  std::vector<std::vector<float>> momentum;  // sgd's state slot 0, per parameter
  std::vector<double> norms;                 // Σ (mean gradient)² per step
  std::vector<std::vector<std::vector<float>>> params_before;  // [step][param]; step = steps: after the last
};

inline Reference single_rank_reference(const ZeroPlugins& plugins, int32_t ranks, const DriverOptions& options) {
  const std::vector<keel_param_spec> specs = zero_model_specs();
  const keel_optimizer_api& sgd = plugins.sgd_api();
  keel_optimizer_info info{};
  info.struct_size = sizeof(info);
  EXPECT_EQ(sgd.describe(plugins.sgd_obj, &info), KEEL_OK);
  Reference ref;
  for (size_t i = 0; i < specs.size(); ++i) {
    ref.params.emplace_back(size_t(kParamNumel[i]));
    ref.momentum.emplace_back(size_t(kParamNumel[i]), 0.0f);
    for (int64_t e = 0; e < kParamNumel[i]; ++e) ref.params[i][size_t(e)] = zero_init_value(specs[i], e);
  }
  for (int32_t step = 1; step <= options.steps; ++step) {
    ref.params_before.push_back(ref.params);
    double norm = 0.0;
    for (size_t i = 0; i < specs.size(); ++i) {
      std::vector<float> mean(size_t(kParamNumel[i]));
      for (int64_t e = 0; e < kParamNumel[i]; ++e) {
        double sum = 0.0;
        for (int32_t r = 0; r < ranks; ++r)
          for (int32_t m = 0; m < options.micro_batches; ++m)
            sum += double(main_grad(step, r, m, i, e)) + (i == 0 ? double(head_grad(step, r, m, e)) : 0.0);
        mean[size_t(e)] = float(sum / ranks);
        norm += double(mean[size_t(e)]) * mean[size_t(e)];
      }
      float* state[KEEL_OPTIMIZER_MAX_STATE_SLOTS] = {ref.momentum[i].data()};
      keel_optimizer_step_args args{};
      args.struct_size = sizeof(args);
      args.device = keel_device{KEEL_DEVICE_CPU, 0};
      args.params = ref.params[i].data();
      args.grads = mean.data();
      args.state = state;
      args.n = kParamNumel[i];
      args.lr = options.lr;
      args.grad_scale = options.grad_scale;
      args.step = step;
      args.apply_weight_decay = (specs[i].flags & info.decay_flags) == 0;
      EXPECT_EQ(sgd.step(plugins.sgd_obj, &args), KEEL_OK) << zero_last_error();
    }
    ref.norms.push_back(norm);
  }
  ref.params_before.push_back(ref.params);
  return ref;
}

}  // namespace keel_test
