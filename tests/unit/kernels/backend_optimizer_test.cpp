// The cpu backend's fused optimizer updates (ABI 0.8 adamw_update, sgd_update) against the adamw
// and sgd plugins' step on the same numbers, several steps, bit for bit: both must run the one
// rule in kernels/cpu/optimizer_update.h with the same rounding. Sizes on both sides of the
// threading threshold, decay on and off, and each SGD variant.
#include <keel/optimizer.h>

#include <cstring>
#include <string>
#include <vector>

#include "backend_plugin.h"
#include "reference.h"

using namespace keel_test;

namespace {

const keel_optimizer_api* optimizer_api(const char* path) {
  const keel_plugin_info* info = load_plugin(path);
  return info ? static_cast<const keel_optimizer_api*>(info->api) : nullptr;
}

// One optimizer plugin over host arrays, as a strategy steps it.
class PluginOptimizer {
 public:
  PluginOptimizer(const keel_optimizer_api* api, const std::string& config, size_t n) : api_(api) {
    status = api_->create(&kHost, config.c_str(), "optimizer", &handle_);
    keel_optimizer_info info{};
    info.struct_size = sizeof(info);
    if (status == KEEL_OK) status = api_->describe(handle_, &info);
    state.assign(static_cast<size_t>(info.n_state_slots), std::vector<float>(n, 0.0f));
  }
  ~PluginOptimizer() {
    if (handle_) api_->destroy(handle_);
  }
  keel_status step(std::vector<float>& params, const std::vector<float>& grads, float lr, float grad_scale,
                   int64_t step_number, bool decay) {
    std::vector<float*> slots;
    for (auto& s : state) slots.push_back(s.data());
    keel_optimizer_step_args args{};
    args.struct_size = sizeof(args);
    args.device = {KEEL_DEVICE_CPU, 0};
    args.params = params.data();
    args.grads = grads.data();
    args.state = slots.empty() ? nullptr : slots.data();
    args.n = static_cast<int64_t>(params.size());
    args.lr = lr;
    args.grad_scale = grad_scale;
    args.step = step_number;
    args.apply_weight_decay = decay ? 1 : 0;
    return api_->step(handle_, &args);
  }
  keel_status status;
  std::vector<std::vector<float>> state;

 private:
  const keel_optimizer_api* api_;
  void* handle_ = nullptr;
};

void expect_same_bits(const std::vector<float>& got, const std::vector<float>& want, const std::string& what) {
  ASSERT_EQ(got.size(), want.size());
  EXPECT_EQ(std::memcmp(got.data(), want.data(), got.size() * sizeof(float)), 0)
      << what << ": the backend's update and the plugin's step differ";
}

class BackendCpuOptimizer : public ::testing::TestWithParam<size_t> {  // parameter: n, below and above threading
 protected:
  void SetUp() override { ASSERT_EQ(backend_.status, KEEL_OK) << g_last_error; }
  Backend backend_{R"({"peak_tflops": 1})"};
};

TEST_P(BackendCpuOptimizer, AdamwUpdateEqualsTheAdamwPluginBitForBit) {
  const size_t n = GetParam();
  const auto* adamw = optimizer_api(KEEL_ADAMW_PLUGIN_PATH);
  ASSERT_NE(adamw, nullptr);
  const double beta1 = 0.9, beta2 = 0.95, eps = 1e-8, weight_decay = 0.1;  // PyTorch-like, not fp32-exact
  for (const bool decay : {true, false}) {
    PluginOptimizer plugin(adamw, R"({"betas": [0.9, 0.95], "eps": 1e-8, "weight_decay": 0.1})", n);
    ASSERT_EQ(plugin.status, KEEL_OK) << g_last_error;
    ASSERT_EQ(plugin.state.size(), 2u);
    std::vector<float> plugin_params = random_floats(n, 40), params = plugin_params;
    std::vector<float> m(n, 0.0f), v(n, 0.0f);
    for (int64_t step = 1; step <= 3; ++step) {
      const std::vector<float> grads = random_floats(n, 41 + static_cast<uint32_t>(step));
      const float lr = 1e-3f * static_cast<float>(step), grad_scale = 0.5f;
      ASSERT_EQ(plugin.step(plugin_params, grads, lr, grad_scale, step, decay), KEEL_OK) << g_last_error;
      ASSERT_EQ(api()->adamw_update(backend_.handle, params.data(), grads.data(), m.data(), v.data(),
                                    static_cast<int64_t>(n), lr, beta1, beta2, eps, decay ? weight_decay : 0.0,
                                    grad_scale, step),
                KEEL_OK)
          << g_last_error;
    }
    const std::string what = decay ? "with decay" : "without decay";
    expect_same_bits(params, plugin_params, "params " + what);
    expect_same_bits(m, plugin.state[0], "m " + what);
    expect_same_bits(v, plugin.state[1], "v " + what);
  }
}

TEST_P(BackendCpuOptimizer, SgdUpdateEqualsTheSgdPluginBitForBit) {
  const size_t n = GetParam();
  const auto* sgd = optimizer_api(KEEL_SGD_PLUGIN_PATH);
  ASSERT_NE(sgd, nullptr);
  struct Variant {
    const char* config;
    double momentum, dampening, weight_decay;
    bool nesterov;
  };
  const Variant variants[] = {
      {R"({"weight_decay": 0.01})", 0.0, 0.0, 0.01, false},
      {R"({"momentum": 0.9, "dampening": 0.1, "weight_decay": 0.01})", 0.9, 0.1, 0.01, false},
      {R"({"momentum": 0.9, "nesterov": true})", 0.9, 0.0, 0.0, true},
  };
  for (const Variant& variant : variants) {
    PluginOptimizer plugin(sgd, variant.config, n);
    ASSERT_EQ(plugin.status, KEEL_OK) << variant.config << ": " << g_last_error;
    std::vector<float> plugin_params = random_floats(n, 50), params = plugin_params;
    std::vector<float> buffer(n, 0.0f);
    for (int64_t step = 1; step <= 3; ++step) {
      const std::vector<float> grads = random_floats(n, 51 + static_cast<uint32_t>(step));
      const float lr = 0.05f, grad_scale = 0.75f;
      ASSERT_EQ(plugin.step(plugin_params, grads, lr, grad_scale, step, true), KEEL_OK) << g_last_error;
      ASSERT_EQ(api()->sgd_update(backend_.handle, params.data(), grads.data(),
                                  variant.momentum > 0 ? buffer.data() : nullptr, static_cast<int64_t>(n), lr,
                                  variant.momentum, variant.dampening, variant.nesterov ? 1 : 0,
                                  variant.weight_decay, grad_scale, step),
                KEEL_OK)
          << g_last_error;
    }
    expect_same_bits(params, plugin_params, std::string("params, ") + variant.config);
    if (variant.momentum > 0)
      expect_same_bits(buffer, plugin.state[0], std::string("momentum buffer, ") + variant.config);
  }
}

INSTANTIATE_TEST_SUITE_P(Sizes, BackendCpuOptimizer, ::testing::Values(size_t{1000}, size_t{40000}));

TEST(BackendCpuOptimizerArguments, AZeroStepOrAMissingBufferIsRefused) {
  Backend backend(R"({"peak_tflops": 1})");
  ASSERT_EQ(backend.status, KEEL_OK) << g_last_error;
  std::vector<float> p(4, 1.0f), g(4, 1.0f), m(4), v(4);
  EXPECT_EQ(api()->adamw_update(backend.handle, p.data(), g.data(), m.data(), v.data(), 4, 1e-3f, 0.9, 0.95, 1e-8,
                                0.0, 1.0f, 0),
            KEEL_ERR_INVALID_ARGUMENT);
  EXPECT_NE(g_last_error.find("adamw_update: step is 1-based, found 0"), std::string::npos) << g_last_error;
  EXPECT_EQ(api()->sgd_update(backend.handle, p.data(), g.data(), nullptr, 4, 0.1f, 0.9, 0.0, 0, 0.0, 1.0f, 1),
            KEEL_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(p, std::vector<float>(4, 1.0f)) << "nothing is written on error";
}

}  // namespace
