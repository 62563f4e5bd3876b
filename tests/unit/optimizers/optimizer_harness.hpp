// Drives one optimizer plugin over host arrays the way a strategy would (params, grads, zeroed
// state slots from describe), and compares results with a reference, naming the worst element.
#pragma once

#include <gtest/gtest.h>
#include <keel/backend.h>
#include <keel/optimizer.h>

#include <cmath>
#include <stdexcept>
#include <string>
#include <vector>

#include "plugin_test_support.hpp"

namespace keel_test {

class OptimizerHarness {
 public:
  OptimizerHarness(const keel_optimizer_api& api, const std::string& config_json, std::vector<float> initial_params)
      : params(std::move(initial_params)), api_(api), host_(make_test_host()) {
    if (api_.create(&host_, config_json.c_str(), "optimizer", &optimizer_) != KEEL_OK)
      throw std::runtime_error("create failed: " + last_error());
    info.struct_size = sizeof(info);
    if (api_.describe(optimizer_, &info) != KEEL_OK) throw std::runtime_error("describe failed: " + last_error());
    state.assign(static_cast<size_t>(info.n_state_slots), std::vector<float>(params.size(), 0.0f));
  }
  OptimizerHarness(const OptimizerHarness&) = delete;
  OptimizerHarness& operator=(const OptimizerHarness&) = delete;
  ~OptimizerHarness() { api_.destroy(optimizer_); }

  keel_status step(const std::vector<float>& grads, float lr, float grad_scale, int64_t step_number,
                   bool apply_weight_decay, keel_device device = {KEEL_DEVICE_CPU, 0},
                   const keel_backend_api* backend = nullptr, void* backend_obj = nullptr) {
    std::vector<float*> state_ptrs;
    for (auto& slot : state) state_ptrs.push_back(slot.data());
    keel_optimizer_step_args args{};
    args.struct_size = sizeof(args);
    args.device = device;
    args.params = params.data();
    args.grads = grads.data();
    args.state = state_ptrs.empty() ? nullptr : state_ptrs.data();
    args.n = static_cast<int64_t>(params.size());
    args.lr = lr;
    args.grad_scale = grad_scale;
    args.step = step_number;
    args.apply_weight_decay = apply_weight_decay ? 1 : 0;
    args.backend = backend;
    args.backend_obj = backend_obj;
    return api_.step(optimizer_, &args);
  }

  keel_optimizer_info info{};
  std::vector<float> params;
  std::vector<std::vector<float>> state;

 private:
  const keel_optimizer_api& api_;
  keel_host host_;
  void* optimizer_ = nullptr;
};

// A backend with only the fused updates (backend.h 0.8), which record their arguments and leave
// the arrays alone: what an optimizer hands the backend when host code cannot read its memory.
struct RecordingUpdates {
  int calls = 0;
  float *params = nullptr, *m = nullptr, *v = nullptr;
  const float* grads = nullptr;
  int64_t n = 0, step = 0;
  float lr = 0, grad_scale = 0;
  double beta1 = 0, beta2 = 0, eps = 0, weight_decay = 0, momentum = 0, dampening = 0;
  int32_t nesterov = -1;

  static keel_status adamw(void* obj, float* params, const float* grads, float* m, float* v, int64_t n, float lr,
                           double beta1, double beta2, double eps, double weight_decay, float grad_scale,
                           int64_t step) {
    auto& r = *static_cast<RecordingUpdates*>(obj);
    ++r.calls;
    r.params = params, r.grads = grads, r.m = m, r.v = v, r.n = n, r.lr = lr, r.beta1 = beta1, r.beta2 = beta2;
    r.eps = eps, r.weight_decay = weight_decay, r.grad_scale = grad_scale, r.step = step;
    return KEEL_OK;
  }
  static keel_status sgd(void* obj, float* params, const float* grads, float* momentum_buffer, int64_t n, float lr,
                         double momentum, double dampening, int32_t nesterov, double weight_decay, float grad_scale,
                         int64_t step) {
    auto& r = *static_cast<RecordingUpdates*>(obj);
    ++r.calls;
    r.params = params, r.grads = grads, r.m = momentum_buffer, r.n = n, r.lr = lr, r.momentum = momentum;
    r.dampening = dampening, r.nesterov = nesterov, r.weight_decay = weight_decay, r.grad_scale = grad_scale;
    r.step = step;
    return KEEL_OK;
  }
  static keel_backend_api table() {
    keel_backend_api api{};
    api.struct_size = sizeof(api);
    api.adamw_update = adamw;
    api.sgd_update = sgd;
    return api;
  }
};

// |actual - expected| <= abs_tol + rel_tol * |expected| for every element; on failure reports
// how many elements are off and the worst one.
inline void expect_all_close(const std::vector<float>& actual, const std::vector<double>& expected, double abs_tol,
                             double rel_tol, const std::string& what) {
  ASSERT_EQ(actual.size(), expected.size()) << what;
  size_t n_off = 0, worst = 0;
  double worst_excess = -1;
  for (size_t i = 0; i < actual.size(); ++i) {
    const double error = std::fabs(actual[i] - expected[i]);
    const double excess = error - (abs_tol + rel_tol * std::fabs(expected[i]));
    if (excess > 0) ++n_off;
    if (excess > worst_excess || std::isnan(error)) worst_excess = excess, worst = i;
  }
  EXPECT_EQ(n_off, 0u) << what << ": " << n_off << " of " << actual.size() << " elements off; worst [" << worst
                       << "] = " << actual[worst] << ", expected " << expected[worst] << " (abs_tol " << abs_tol
                       << ", rel_tol " << rel_tol << ")";
}

// The largest |a - b| over two arrays: used to show a setting changed the result at all.
inline double max_abs_difference(const std::vector<float>& a, const std::vector<double>& b) {
  double largest = 0;
  for (size_t i = 0; i < a.size(); ++i) largest = std::fmax(largest, std::fabs(a[i] - b[i]));
  return largest;
}

}  // namespace keel_test
