// SGD plugin vs a double-precision reference of torch.optim.SGD (plain, momentum, dampening,
// Nesterov, coupled weight decay, grad_scale) over 5 steps with a changing learning rate.
// Tolerance: fp32 arithmetic against double, 1e-6 absolute + 1e-6 relative after 5 steps
// (observed worst: 8e-7 absolute on a momentum buffer near 2, 4e-7 relative); each setting
// moves the parameters by ~1e-2 or more.
#include <gtest/gtest.h>

#include "optimizer_harness.hpp"
#include "optimizer_reference.hpp"
#include "random_arrays.hpp"

namespace keel_test {
namespace {

constexpr double kAbsTol = 1e-6;
constexpr double kRelTol = 1e-6;
constexpr float kLrPerStep[] = {0.1f, 0.08f, 0.06f, 0.04f, 0.02f};

struct SgdRun {
  std::string config_json;
  SgdHyper hyper;
  size_t n = 1000;
  float grad_scale = 1.0f;
  bool apply_weight_decay = true;
};

void run_and_compare(const SgdRun& run) {
  LoadedPlugin plugin(KEEL_SGD_PLUGIN_PATH, KEEL_KIND_OPTIMIZER, "sgd");
  const std::vector<float> initial = random_normal(run.n, 7);
  OptimizerHarness harness(plugin.api<keel_optimizer_api>(), run.config_json, initial);
  ASSERT_EQ(harness.info.n_state_slots, run.hyper.momentum > 0 ? 1 : 0);
  SgdReference reference{std::vector<double>(initial.begin(), initial.end()), std::nullopt};
  int64_t step = 0;
  for (float lr : kLrPerStep) {
    ++step;
    const std::vector<float> grads = random_normal(run.n, 200 + static_cast<uint32_t>(step));
    EXPECT_EQ(harness.step(grads, lr, run.grad_scale, step, run.apply_weight_decay), KEEL_OK) << last_error();
    reference.step(run.hyper, grads, lr, run.grad_scale, run.apply_weight_decay);
    const std::string at = " after step " + std::to_string(step);
    expect_all_close(harness.params, reference.param, kAbsTol, kRelTol, "params" + at);
    if (reference.momentum_buffer)
      expect_all_close(harness.state[0], *reference.momentum_buffer, kAbsTol, kRelTol, "momentum buffer" + at);
  }
}

TEST(SgdStep, PlainWithGradScale) {
  SgdRun run{R"({"plugin": "sgd", "lr": 0.1})", SgdHyper{}};
  run.grad_scale = 0.5f;
  run_and_compare(run);
}

TEST(SgdStep, Momentum) {
  run_and_compare(SgdRun{R"({"momentum": 0.9})", SgdHyper{0.9, 0, 0, false}});
}

TEST(SgdStep, MomentumWithDampening) {
  run_and_compare(SgdRun{R"({"momentum": 0.9, "dampening": 0.5})", SgdHyper{0.9, 0.5, 0, false}});
}

TEST(SgdStep, Nesterov) {
  SgdRun run{R"({"momentum": 0.9, "nesterov": true})", SgdHyper{0.9, 0, 0, true}};
  run.grad_scale = 0.3f;
  run_and_compare(run);
}

TEST(SgdStep, CoupledWeightDecayWithMomentum) {
  run_and_compare(SgdRun{R"({"momentum": 0.5, "weight_decay": 0.05})", SgdHyper{0.5, 0, 0.05, false}});
}

TEST(SgdStep, RangeWithoutWeightDecayIsNotDecayed) {
  SgdRun run{R"({"momentum": 0.5, "weight_decay": 0.05})", SgdHyper{0.5, 0, 0.05, false}};
  run.apply_weight_decay = false;
  run_and_compare(run);
}

TEST(SgdStep, LargeRangeTakesTheParallelPathAndMatches) {
  SgdRun run{R"({"momentum": 0.9, "nesterov": true, "weight_decay": 0.01})", SgdHyper{0.9, 0, 0.01, true}};
  run.n = 100003;
  run.grad_scale = 0.7f;
  run_and_compare(run);
}

TEST(SgdStep, FirstStepSeedsTheBufferWithTheUndampenedGradient) {
  // PyTorch's rule, checked by hand: step 1 sets buf = g (dampening is not applied), so
  // p1 = p0 - lr·g; step 2 sets buf = momentum·g1 + (1 - dampening)·g2.
  LoadedPlugin plugin(KEEL_SGD_PLUGIN_PATH, KEEL_KIND_OPTIMIZER, "sgd");
  OptimizerHarness harness(plugin.api<keel_optimizer_api>(), R"({"momentum": 0.9, "dampening": 0.5})", {1.0f, -2.0f});
  ASSERT_EQ(harness.step({0.5f, 0.25f}, 0.1f, 1.0f, 1, true), KEEL_OK) << last_error();
  EXPECT_FLOAT_EQ(harness.params[0], 1.0f - 0.1f * 0.5f);
  EXPECT_FLOAT_EQ(harness.params[1], -2.0f - 0.1f * 0.25f);
  EXPECT_FLOAT_EQ(harness.state[0][0], 0.5f);
  ASSERT_EQ(harness.step({1.0f, -1.0f}, 0.1f, 1.0f, 2, true), KEEL_OK) << last_error();
  EXPECT_FLOAT_EQ(harness.state[0][0], 0.9f * 0.5f + 0.5f * 1.0f);
  EXPECT_FLOAT_EQ(harness.state[0][1], 0.9f * 0.25f + 0.5f * -1.0f);
  EXPECT_FLOAT_EQ(harness.params[0], 0.95f - 0.1f * 0.95f);
}

TEST(SgdStep, DeviceMemoryWithoutABackendIsRefused) {
  LoadedPlugin plugin(KEEL_SGD_PLUGIN_PATH, KEEL_KIND_OPTIMIZER, "sgd");
  OptimizerHarness harness(plugin.api<keel_optimizer_api>(), "{}", {1.0f});
  EXPECT_EQ(harness.step({1.0f}, 0.1f, 1.0f, 1, true, {KEEL_DEVICE_CUDA, 0}), KEEL_ERR_INVALID_ARGUMENT);
  EXPECT_NE(last_error().find("optimizer sgd: "), std::string::npos) << last_error();
  EXPECT_EQ(harness.params[0], 1.0f);
}

TEST(SgdStep, DeviceMemoryIsUpdatedByTheBackendsFusedOpWithTheConfigsNumbers) {
  LoadedPlugin plugin(KEEL_SGD_PLUGIN_PATH, KEEL_KIND_OPTIMIZER, "sgd");
  OptimizerHarness harness(plugin.api<keel_optimizer_api>(),
                           R"({"momentum": 0.9, "nesterov": true, "weight_decay": 0.125})", {1.0f, 2.0f});
  RecordingUpdates backend;
  const keel_backend_api table = RecordingUpdates::table();
  const std::vector<float> grads{0.5f, -0.5f};
  ASSERT_EQ(harness.step(grads, 0.1f, 0.25f, 3, false, {KEEL_DEVICE_CUDA, 0}, &table, &backend), KEEL_OK)
      << last_error();
  EXPECT_EQ(backend.calls, 1);
  EXPECT_EQ(backend.params, harness.params.data());
  EXPECT_EQ(backend.grads, grads.data());
  EXPECT_EQ(backend.m, harness.state[0].data());  // the momentum buffer
  EXPECT_EQ(backend.n, 2);
  EXPECT_EQ(backend.lr, 0.1f);
  EXPECT_EQ(backend.momentum, 0.9);
  EXPECT_EQ(backend.dampening, 0.0);
  EXPECT_EQ(backend.nesterov, 1);
  EXPECT_EQ(backend.weight_decay, 0.0);  // this range takes no decay
  EXPECT_EQ(backend.grad_scale, 0.25f);
  EXPECT_EQ(backend.step, 3);
  EXPECT_EQ(harness.params, (std::vector<float>{1.0f, 2.0f}));
}

TEST(SgdDescribe, StateSlotOnlyWithMomentum) {
  LoadedPlugin plugin(KEEL_SGD_PLUGIN_PATH, KEEL_KIND_OPTIMIZER, "sgd");
  OptimizerHarness plain(plugin.api<keel_optimizer_api>(), "{}", {});
  EXPECT_EQ(plain.info.n_state_slots, 0);
  EXPECT_FLOAT_EQ(plain.info.base_lr, 1e-2f);
  EXPECT_EQ(plain.info.decay_flags, static_cast<uint32_t>(KEEL_PARAM_NO_WEIGHT_DECAY));
  OptimizerHarness with_momentum(plugin.api<keel_optimizer_api>(), R"({"lr": 0.05, "momentum": 0.9})", {});
  EXPECT_EQ(with_momentum.info.n_state_slots, 1);
  EXPECT_FLOAT_EQ(with_momentum.info.base_lr, 0.05f);
}

}  // namespace
}  // namespace keel_test
