// ddp's step: one optimizer call per maximal run of neighbouring parameters that agree on
// weight decay, with params, grads and every state slot offset to the run, and the step's
// lr, grad_scale and step number passed through; then the real sgd plugin end to end.
#include <cmath>

#include "ddp_test_fixture.hpp"

namespace keel_test {
namespace {

struct ExpectedRun {
  int64_t begin, count;
  int32_t apply_weight_decay;
};

keel_strategy_step_args step_args(float lr, float grad_scale, int64_t step) {
  keel_strategy_step_args args{};
  args.struct_size = sizeof(args);
  args.lr = lr;
  args.grad_scale = grad_scale;
  args.step = step;
  return args;
}

class DdpStepTest : public DdpTest {
 public:
  // Where the flat parameter and gradient buffers start, found through acquire of layer 0.
  void find_bases() {
    std::vector<keel_tensor> params(2), grads(2);
    ASSERT_EQ(access.acquire(access.ctx, 0, KEEL_PHASE_BACKWARD, params.data(), grads.data(), 2), KEEL_OK);
    param_base = static_cast<float*>(params[0].data);
    grad_base = static_cast<float*>(grads[0].data);
  }

  void expect_runs(const std::vector<ExpectedRun>& expected, size_t first_call = 0) {
    ASSERT_EQ(optimizer.steps.size() - first_call, expected.size());
    const std::vector<float*>& state_base = optimizer.steps[first_call].state;  // run 0 starts at offset 0
    for (size_t r = 0; r < expected.size(); ++r) {
      SCOPED_TRACE("optimizer call " + std::to_string(r));
      const RecordedStep& call = optimizer.steps[first_call + r];
      EXPECT_EQ(call.args.n, expected[r].count);
      EXPECT_EQ(call.args.apply_weight_decay, expected[r].apply_weight_decay);
      EXPECT_EQ(call.args.params, param_base + expected[r].begin);
      EXPECT_EQ(call.args.grads, grad_base + expected[r].begin);
      EXPECT_EQ(call.args.device.device_type, KEEL_DEVICE_CPU);
      ASSERT_EQ(call.state.size(), state_base.size());
      for (size_t k = 0; k < call.state.size(); ++k) EXPECT_EQ(call.state[k], state_base[k] + expected[r].begin);
    }
  }

  float* param_base = nullptr;
  float* grad_base = nullptr;
};

TEST_F(DdpStepTest, OneCallPerRunOfEqualWeightDecay) {
  // wte is TIED but not NO_WEIGHT_DECAY: only decay_flags decide.
  optimizer.info.decay_flags = KEEL_PARAM_NO_WEIGHT_DECAY;
  ASSERT_EQ(create(), KEEL_OK) << last_error();
  find_bases();
  const keel_strategy_step_args args = step_args(3e-4f, 0.25f, 7);
  ASSERT_EQ(api.step(strategy, &args), KEEL_OK) << last_error();
  expect_runs({{0, 40, 1}, {40, 40, 0}, {80, 24, 1}, {104, 14, 0}, {118, 12, 1}});
  for (const RecordedStep& call : optimizer.steps) {
    EXPECT_EQ(call.args.lr, 3e-4f);
    EXPECT_EQ(call.args.grad_scale, 0.25f);
    EXPECT_EQ(call.args.step, 7);
  }
  // Every element was handed to exactly one call (each adds 1 to the parameters it gets).
  for (size_t i = 0; i < specs.size(); ++i) {
    const std::vector<float> values = read_param(i);
    for (int64_t e = 0; e < kToyNumel[i]; ++e)
      ASSERT_EQ(values[static_cast<size_t>(e)], test_init_value(specs[i], e) + 1.0f) << specs[i].name << "[" << e << "]";
  }
}

TEST_F(DdpStepTest, DecayFlagsZeroMakesOneCallOverEverything) {
  optimizer.info.decay_flags = 0;
  ASSERT_EQ(create(), KEEL_OK) << last_error();
  find_bases();
  const keel_strategy_step_args args = step_args(1e-3f, 1.0f, 1);
  ASSERT_EQ(api.step(strategy, &args), KEEL_OK) << last_error();
  expect_runs({{0, kToyTotal, 1}});
}

TEST_F(DdpStepTest, StateSlotsAreDisjointZeroedAndKeptAcrossSteps) {
  optimizer.info.n_state_slots = 3;
  ASSERT_EQ(create(), KEEL_OK) << last_error();
  find_bases();
  const keel_strategy_step_args first = step_args(1e-3f, 1.0f, 1), second = step_args(1e-3f, 1.0f, 2);
  ASSERT_EQ(api.step(strategy, &first), KEEL_OK) << last_error();
  ASSERT_EQ(api.step(strategy, &second), KEEL_OK) << last_error();
  expect_runs({{0, 40, 1}, {40, 40, 0}, {80, 24, 1}, {104, 14, 0}, {118, 12, 1}}, 5);
  const std::vector<float*>& slots = optimizer.steps[0].state;
  ASSERT_EQ(slots.size(), 3u);
  EXPECT_EQ(optimizer.steps[5].state, slots) << "the same state memory on every step";
  for (size_t k = 0; k < slots.size(); ++k) {
    for (size_t j = 0; j < slots.size(); ++j)
      if (j != k) {
        EXPECT_TRUE(slots[j] >= slots[k] + kToyTotal || slots[k] >= slots[j] + kToyTotal) << k << " " << j;
      }
    // Slot k started at zero and got k + 1 added on each of the two steps.
    for (int64_t e = 0; e < kToyTotal; ++e) ASSERT_EQ(slots[k][e], 2.0f * static_cast<float>(k + 1)) << k << "," << e;
  }
}

TEST_F(DdpStepTest, RejectsStepZeroAndTooShortArgs) {
  ASSERT_EQ(create(), KEEL_OK) << last_error();
  keel_strategy_step_args args = step_args(1e-3f, 1.0f, 0);
  EXPECT_EQ(api.step(strategy, &args), KEEL_ERR_INVALID_ARGUMENT);
  EXPECT_NE(last_error().find("1-based"), std::string::npos) << last_error();
  args = step_args(1e-3f, 1.0f, 1);
  args.struct_size = sizeof(size_t);
  EXPECT_EQ(api.step(strategy, &args), KEEL_ERR_INVALID_ARGUMENT);
  EXPECT_TRUE(optimizer.steps.empty());
}

TEST_F(DdpStepTest, RealSgdUpdatesEachParameterWithItsOwnWeightDecay) {
  LoadedPlugin sgd(KEEL_SGD_PLUGIN_PATH, KEEL_KIND_OPTIMIZER, "sgd");
  const auto& sgd_api = sgd.api<keel_optimizer_api>();
  void* sgd_obj = nullptr;
  ASSERT_EQ(sgd_api.create(&host, R"({"lr": 0.1, "weight_decay": 0.5})", "optimizer", &sgd_obj), KEEL_OK);
  optimizer_api_in_use = &sgd_api;
  optimizer_obj_in_use = sgd_obj;
  ASSERT_EQ(create(), KEEL_OK) << last_error();
  std::vector<std::vector<keel_tensor>> layer_grads = {acquire_grads(0, 2), acquire_grads(1, 4), acquire_grads(2, 3)};
  auto grad_value = [](size_t index, int64_t e) { return 0.3f - 0.05f * static_cast<float>(index) + 0.01f * e; };
  size_t index = 0;
  for (auto& grads : layer_grads) {
    for (keel_tensor& g : grads) {
      for (int64_t e = 0; e < kToyNumel[index]; ++e) static_cast<float*>(g.data)[e] = grad_value(index, e);
      ++index;
    }
  }

  const keel_strategy_step_args args = step_args(0.1f, 0.5f, 1);
  ASSERT_EQ(api.step(strategy, &args), KEEL_OK) << last_error();
  for (size_t i = 0; i < specs.size(); ++i) {
    const bool decays = !(specs[i].flags & KEEL_PARAM_NO_WEIGHT_DECAY);
    const std::vector<float> values = read_param(i);
    for (int64_t e = 0; e < kToyNumel[i]; ++e) {
      const double p0 = test_init_value(specs[i], e);
      const double g = 0.5 * grad_value(i, e) + (decays ? 0.5 * p0 : 0.0);  // torch.optim.SGD, coupled L2
      ASSERT_NEAR(values[static_cast<size_t>(e)], p0 - 0.1 * g, 4e-7 * (1 + std::fabs(p0)))  // a few fp32 roundings
          << specs[i].name << "[" << e << "] decays=" << decays;
    }
  }
  api.destroy(strategy);
  strategy = nullptr;
  sgd_api.destroy(sgd_obj);
}

}  // namespace
}  // namespace keel_test
