// The adamw plugin's vectorised, multi-threaded update gives the same bits as the plain scalar
// fp32 rule element by element. Parity and resume tests compare runs bit for bit, so a build
// flag or loop change that lets the compiler fuse a multiply-add, reorder an expression, or
// use an approximate reciprocal or square root must fail here, not later as a drifting loss.
// Lengths cover the vector remainder, the serial path below the parallel threshold and the
// parallel one above it; starts one float past an aligned address cover unaligned ranges.
// This file is built with -ffp-contract=off so the reference itself is never fused.
#include <gtest/gtest.h>
#include <keel/optimizer.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>
#include <tuple>
#include <vector>

#include "plugin_test_support.hpp"
#include "random_arrays.hpp"

namespace keel_test {
namespace {

struct Hyper {
  double beta1 = 0.9, beta2 = 0.95, eps = 1e-8, weight_decay = 0.1;
};

// torch.optim.AdamW's single-tensor rule in fp32, one element at a time, in the order the
// plugin's header documents; per-call scalars are formed in double and cast once.
void scalar_adamw(const Hyper& h, float* p, const float* grads, float* m, float* v, int64_t n, float lr,
                  float grad_scale, int64_t step, bool decay) {
  const double t = static_cast<double>(step);
  const float step_size = static_cast<float>(lr / (1.0 - std::pow(h.beta1, t)));
  const float bias_correction2_sqrt = static_cast<float>(std::sqrt(1.0 - std::pow(h.beta2, t)));
  const float decay_factor = decay ? static_cast<float>(1.0 - lr * h.weight_decay) : 1.0f;
  const float one_minus_beta1 = static_cast<float>(1.0 - h.beta1);
  const float beta2 = static_cast<float>(h.beta2);
  const float one_minus_beta2 = static_cast<float>(1.0 - h.beta2);
  const float eps = static_cast<float>(h.eps);
  for (int64_t i = 0; i < n; ++i) {
    const float g = grads[i] * grad_scale;
    const float m_i = m[i] + one_minus_beta1 * (g - m[i]);
    const float v_i = beta2 * v[i] + one_minus_beta2 * g * g;
    m[i] = m_i;
    v[i] = v_i;
    const float denom = std::sqrt(v_i) / bias_correction2_sqrt + eps;
    p[i] = p[i] * decay_factor - step_size * m_i / denom;
  }
}

// Index of the first element whose bits differ, or -1.
int64_t first_bit_difference(const float* a, const float* b, int64_t n) {
  for (int64_t i = 0; i < n; ++i)
    if (std::memcmp(&a[i], &b[i], sizeof(float)) != 0) return i;
  return -1;
}

// Gradients spanning many magnitudes and signs, with exact zeros, so rounding differences in
// any term (g², the sqrt, the division) show up somewhere.
std::vector<float> varied_gradients(size_t n, uint32_t seed) {
  std::vector<float> grads = random_normal(n, seed);
  for (size_t i = 0; i < n; ++i) {
    grads[i] *= std::ldexp(1.0f, static_cast<int>(i % 23) - 14);
    if (i % 31 == 0) grads[i] = 0.0f;
  }
  return grads;
}

// Runs `steps` plugin steps over arrays that start `offset` floats into their buffers and the
// scalar rule over copies, then compares params, m and v bit for bit after every step.
void expect_bitwise_equal(int64_t n, int64_t offset, bool decay) {
  SCOPED_TRACE("n = " + std::to_string(n) + ", offset = " + std::to_string(offset) + ", decay = " +
               std::to_string(decay));
  LoadedPlugin plugin(KEEL_ADAMW_PLUGIN_PATH, KEEL_KIND_OPTIMIZER, "adamw");
  const auto& api = plugin.api<keel_optimizer_api>();
  keel_host host = make_test_host();
  void* optimizer = nullptr;
  const char* config = R"({"plugin": "adamw", "lr": 1e-2, "betas": [0.9, 0.95], "eps": 1e-8, "weight_decay": 0.1})";
  ASSERT_EQ(api.create(&host, config, "optimizer", &optimizer), KEEL_OK) << last_error();
  const Hyper hyper;

  const size_t size = static_cast<size_t>(n + offset);
  std::vector<float> params = random_normal(size, 7), m(size, 0.0f), v(size, 0.0f);
  std::vector<float> ref_params = params, ref_m = m, ref_v = v;
  const float lrs[] = {1e-2f, 7e-3f, 3e-3f};
  const float grad_scales[] = {1.0f, 0.37f, 1.0f};
  for (int64_t step = 1; step <= 3; ++step) {
    const std::vector<float> grads = varied_gradients(size, 100 + static_cast<uint32_t>(step));
    float* state[2] = {m.data() + offset, v.data() + offset};
    keel_optimizer_step_args args{};
    args.struct_size = sizeof(args);
    args.device = keel_device{KEEL_DEVICE_CPU, 0};
    args.params = params.data() + offset;
    args.grads = grads.data() + offset;
    args.state = state;
    args.n = n;
    args.lr = lrs[step - 1];
    args.grad_scale = grad_scales[step - 1];
    args.step = step;
    args.apply_weight_decay = decay ? 1 : 0;
    ASSERT_EQ(api.step(optimizer, &args), KEEL_OK) << last_error();
    scalar_adamw(hyper, ref_params.data() + offset, grads.data() + offset, ref_m.data() + offset,
                 ref_v.data() + offset, n, args.lr, args.grad_scale, step, decay);
    for (auto [what, actual, expected] : {std::tuple{"params", &params, &ref_params}, std::tuple{"m", &m, &ref_m},
                                          std::tuple{"v", &v, &ref_v}}) {
      const int64_t at = first_bit_difference(actual->data(), expected->data(), static_cast<int64_t>(size));
      EXPECT_EQ(at, -1) << what << " after step " << step << " differs from the scalar fp32 rule at element "
                        << at << ": plugin " << (at >= 0 ? (*actual)[at] : 0.0f) << ", scalar "
                        << (at >= 0 ? (*expected)[at] : 0.0f);
    }
  }
  api.destroy(optimizer);
}

TEST(AdamwBitwise, ShortRangesMatchScalarRule) {
  for (int64_t n : {1, 7, 8, 19, 1000}) expect_bitwise_equal(n, 0, true);
}

TEST(AdamwBitwise, UnalignedRangesMatchScalarRule) {
  for (int64_t n : {13, 1001}) expect_bitwise_equal(n, 1, true);
}

TEST(AdamwBitwise, RangeWithoutDecayMatchesScalarRule) { expect_bitwise_equal(1003, 3, false); }

TEST(AdamwBitwise, ParallelRangeMatchesScalarRule) {
  // Above the plugin's 2^15-element threshold the loop is split across OpenMP threads.
  expect_bitwise_equal((int64_t(1) << 17) + 5, 1, true);
}

}  // namespace
}  // namespace keel_test
