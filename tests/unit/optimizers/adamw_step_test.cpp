// AdamW plugin vs a double-precision reference of torch.optim.AdamW over several steps with a
// changing learning rate. Tolerance: the plugin computes in fp32, so after 5 steps params and
// moments agree within 2e-6 absolute + 2e-6 relative (observed worst: 1.2e-6 absolute on an
// element near 4, 3e-7 relative); every setting tested moves the result by far more than that.
#include <gtest/gtest.h>

#include <cmath>

#include "optimizer_harness.hpp"
#include "optimizer_reference.hpp"
#include "random_arrays.hpp"

namespace keel_test {
namespace {

constexpr double kAbsTol = 2e-6;
constexpr double kRelTol = 2e-6;
constexpr float kLrPerStep[] = {1e-2f, 8e-3f, 6e-3f, 4e-3f, 2e-3f};  // a decaying schedule

struct AdamwRun {
  std::string config_json;
  AdamwHyper hyper;
  size_t n = 1000;
  float grad_scale = 1.0f;
  float grad_stddev = 1.0f;
  bool apply_weight_decay = true;
};

// Runs the plugin and the reference side by side and compares params, m and v after each step.
AdamwReference run_and_compare(const AdamwRun& run) {
  LoadedPlugin plugin(KEEL_ADAMW_PLUGIN_PATH, KEEL_KIND_OPTIMIZER, "adamw");
  const std::vector<float> initial = random_normal(run.n, 1);
  OptimizerHarness harness(plugin.api<keel_optimizer_api>(), run.config_json, initial);
  AdamwReference reference(initial);
  int64_t step = 0;
  for (float lr : kLrPerStep) {
    ++step;
    const std::vector<float> grads = random_normal(run.n, 100 + static_cast<uint32_t>(step), run.grad_stddev);
    EXPECT_EQ(harness.step(grads, lr, run.grad_scale, step, run.apply_weight_decay), KEEL_OK) << last_error();
    reference.step(run.hyper, grads, lr, run.grad_scale, run.apply_weight_decay);
    const std::string at = " after step " + std::to_string(step);
    expect_all_close(harness.params, reference.param, kAbsTol, kRelTol, "params" + at);
    expect_all_close(harness.state[0], reference.exp_avg, kAbsTol, kRelTol, "m (state slot 0)" + at);
    expect_all_close(harness.state[1], reference.exp_avg_sq, kAbsTol, kRelTol, "v (state slot 1)" + at);
  }
  return reference;
}

const char* kDecayConfig = R"({"plugin": "adamw", "lr": 1e-2, "betas": [0.9, 0.95], "eps": 1e-8, "weight_decay": 0.1})";

TEST(AdamwStep, MatchesPyTorchRuleWithWeightDecay) {
  run_and_compare(AdamwRun{kDecayConfig, AdamwHyper{0.9, 0.95, 1e-8, 0.1}});
}

TEST(AdamwStep, FirstStepMovesEveryElementByLr) {
  // A property independent of the reference: with bias correction, step 1 gives m̂ = g and
  // v̂ = g², so each element moves by lr·g/(|g| + eps) ≈ ±lr whatever the gradient's size.
  LoadedPlugin plugin(KEEL_ADAMW_PLUGIN_PATH, KEEL_KIND_OPTIMIZER, "adamw");
  const std::vector<float> initial = random_normal(256, 1);
  OptimizerHarness harness(plugin.api<keel_optimizer_api>(), R"({"weight_decay": 0})", initial);
  const std::vector<float> grads = random_normal(256, 2, 0.1f);
  ASSERT_EQ(harness.step(grads, 1e-2f, 1.0f, 1, true), KEEL_OK) << last_error();
  for (size_t i = 0; i < initial.size(); ++i) {
    if (std::fabs(grads[i]) < 1e-4f) continue;  // eps would matter
    EXPECT_NEAR(initial[i] - harness.params[i], grads[i] > 0 ? 1e-2 : -1e-2, 1e-6) << "element " << i;
  }
}

TEST(AdamwStep, RangeWithoutWeightDecayIsNotDecayed) {
  AdamwRun run{kDecayConfig, AdamwHyper{0.9, 0.95, 1e-8, 0.0}};
  run.apply_weight_decay = false;
  AdamwReference undecayed = run_and_compare(run);
  // The decay the range skipped would have changed the result far beyond the tolerance.
  AdamwReference decayed(random_normal(run.n, 1));
  int64_t step = 0;
  for (float lr : kLrPerStep)
    decayed.step(AdamwHyper{}, random_normal(run.n, 100 + static_cast<uint32_t>(++step)), lr, 1.0, true);
  std::vector<float> undecayed_params(undecayed.param.begin(), undecayed.param.end());
  EXPECT_GT(max_abs_difference(undecayed_params, decayed.param), 100 * kAbsTol);
}

TEST(AdamwStep, GradScaleMultipliesGradientsBeforeTheMoments) {
  // Adam is invariant to a gradient scale except through eps, so a large eps against small
  // gradients makes the scale visible in the parameters as well as in m and v.
  AdamwRun run{R"({"lr": 1e-2, "betas": [0.8, 0.99], "eps": 1e-3, "weight_decay": 0.05})",
               AdamwHyper{0.8, 0.99, 1e-3, 0.05}};
  run.grad_scale = 0.25f;
  run.grad_stddev = 1e-3f;
  run_and_compare(run);
}

TEST(AdamwStep, LargeRangeTakesTheParallelPathAndMatches) {
  AdamwRun run{kDecayConfig, AdamwHyper{0.9, 0.95, 1e-8, 0.1}};
  run.n = 100003;  // above the plugin's OpenMP threshold, and not a multiple of any vector width
  run.grad_scale = 0.5f;
  run_and_compare(run);
}

TEST(AdamwStep, DeviceMemoryWithoutABackendIsRefusedAndLeftUntouched) {
  LoadedPlugin plugin(KEEL_ADAMW_PLUGIN_PATH, KEEL_KIND_OPTIMIZER, "adamw");
  const std::vector<float> initial = random_normal(16, 1);
  OptimizerHarness harness(plugin.api<keel_optimizer_api>(), "{}", initial);
  EXPECT_EQ(harness.step(random_normal(16, 2), 1e-2f, 1.0f, 1, true, {KEEL_DEVICE_CUDA, 0}), KEEL_ERR_INVALID_ARGUMENT);
  EXPECT_NE(last_error().find("optimizer adamw: "), std::string::npos) << last_error();
  EXPECT_NE(last_error().find("no backend"), std::string::npos) << last_error();
  EXPECT_EQ(harness.params, initial);
  // A backend without the fused op is named.
  RecordingUpdates backend;
  keel_backend_api table = RecordingUpdates::table();
  table.adamw_update = nullptr;
  EXPECT_EQ(harness.step(random_normal(16, 2), 1e-2f, 1.0f, 1, true, {KEEL_DEVICE_CUDA, 0}, &table, &backend),
            KEEL_ERR_UNIMPLEMENTED);
  EXPECT_NE(last_error().find("adamw_update"), std::string::npos) << last_error();
  EXPECT_EQ(harness.params, initial);
}

TEST(AdamwStep, DeviceMemoryIsUpdatedByTheBackendsFusedOpWithTheConfigsNumbers) {
  LoadedPlugin plugin(KEEL_ADAMW_PLUGIN_PATH, KEEL_KIND_OPTIMIZER, "adamw");
  const std::vector<float> initial = random_normal(16, 1);
  OptimizerHarness harness(plugin.api<keel_optimizer_api>(),
                           R"({"betas": [0.8, 0.99], "eps": 1e-6, "weight_decay": 0.25})", initial);
  RecordingUpdates backend;
  const keel_backend_api table = RecordingUpdates::table();
  const std::vector<float> grads = random_normal(16, 2);
  for (bool decay : {true, false}) {
    ASSERT_EQ(harness.step(grads, 3e-3f, 0.5f, 7, decay, {KEEL_DEVICE_CUDA, 0}, &table, &backend), KEEL_OK)
        << last_error();
    EXPECT_EQ(backend.calls, decay ? 1 : 2);
    EXPECT_EQ(backend.params, harness.params.data());
    EXPECT_EQ(backend.grads, grads.data());
    EXPECT_EQ(backend.m, harness.state[0].data());
    EXPECT_EQ(backend.v, harness.state[1].data());
    EXPECT_EQ(backend.n, 16);
    EXPECT_EQ(backend.lr, 3e-3f);
    EXPECT_EQ(backend.beta1, 0.8);  // the config's doubles, not fp32 roundings of them
    EXPECT_EQ(backend.beta2, 0.99);
    EXPECT_EQ(backend.eps, 1e-6);
    EXPECT_EQ(backend.weight_decay, decay ? 0.25 : 0.0);
    EXPECT_EQ(backend.grad_scale, 0.5f);
    EXPECT_EQ(backend.step, 7);
  }
  EXPECT_EQ(harness.params, initial);  // the host never touched the arrays
}

TEST(AdamwStep, RejectsZeroStepNumber) {
  LoadedPlugin plugin(KEEL_ADAMW_PLUGIN_PATH, KEEL_KIND_OPTIMIZER, "adamw");
  OptimizerHarness harness(plugin.api<keel_optimizer_api>(), "{}", random_normal(4, 1));
  EXPECT_EQ(harness.step(random_normal(4, 2), 1e-2f, 1.0f, 0, true), KEEL_ERR_INVALID_ARGUMENT);
  EXPECT_NE(last_error().find("1-based"), std::string::npos) << last_error();
}

TEST(AdamwDescribe, ReportsTwoSlotsBaseLrAndDecayExclusions) {
  LoadedPlugin plugin(KEEL_ADAMW_PLUGIN_PATH, KEEL_KIND_OPTIMIZER, "adamw");
  OptimizerHarness defaults(plugin.api<keel_optimizer_api>(), R"({"plugin": "adamw"})", {});
  EXPECT_EQ(defaults.info.n_state_slots, 2);
  EXPECT_FLOAT_EQ(defaults.info.base_lr, 6e-4f);
  EXPECT_EQ(defaults.info.decay_flags, static_cast<uint32_t>(KEEL_PARAM_NO_WEIGHT_DECAY));

  OptimizerHarness decay_all(plugin.api<keel_optimizer_api>(), R"({"lr": 3e-4, "decay_all_params": true})", {});
  EXPECT_FLOAT_EQ(decay_all.info.base_lr, 3e-4f);
  EXPECT_EQ(decay_all.info.decay_flags, 0u);
}

}  // namespace
}  // namespace keel_test
