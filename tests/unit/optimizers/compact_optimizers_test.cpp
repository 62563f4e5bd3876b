// adamw8bit and adafactor (plugins/optimizer-compact) through their C tables, as a strategy
// calls them: packed sizes, the exchange form (unpack then pack gives back the bits; a packed
// state decodes to the fp32 rule's moments within one quantisation step), refusals.
// Their updates against PyTorch: tests/python/compact_optimizers_vs_torch.py.
#include <gtest/gtest.h>
#include <keel/optimizer.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "plugin_test_support.hpp"

namespace {

using keel_test::LoadedPlugin;

struct Packed {
  const keel_optimizer_api& api;
  void* obj = nullptr;
  keel_optimizer_info info{};
  keel_host host = keel_test::make_test_host();
  Packed(const keel_optimizer_api& table, const char* config) : api(table) {
    EXPECT_EQ(api.create(&host, config, "optimizer", &obj), KEEL_OK) << keel_test::last_error();
    info.struct_size = sizeof(info);
    EXPECT_EQ(api.describe(obj, &info), KEEL_OK);
  }
  ~Packed() { api.destroy(obj); }

  std::vector<unsigned char> zero_state(const keel_optimizer_range& range) const {
    int64_t bytes = -1;
    EXPECT_EQ(api.packed_state_bytes(obj, &range, &bytes), KEEL_OK) << keel_test::last_error();
    return std::vector<unsigned char>(size_t(std::max<int64_t>(bytes, 0)), 0);
  }
  keel_status step(std::vector<float>& params, const std::vector<float>& grads, std::vector<unsigned char>& state,
                   const keel_optimizer_range& range, int64_t t) const {
    keel_optimizer_step_args args{};
    args.struct_size = sizeof(args);
    args.device = keel_device{KEEL_DEVICE_CPU, 0};
    args.params = params.data();
    args.grads = grads.data();
    args.n = range.n;
    args.lr = 1e-2f;
    args.grad_scale = 1.0f;
    args.step = t;
    args.apply_weight_decay = 1;
    args.packed_state = state.data();
    args.range = range;
    return api.step(obj, &args);
  }
  std::vector<std::vector<float>> unpack(const keel_optimizer_range& range, const std::vector<unsigned char>& state) const {
    std::vector<std::vector<float>> slots(size_t(info.n_state_slots), std::vector<float>(size_t(range.n)));
    std::vector<float*> arrays;
    for (auto& slot : slots) arrays.push_back(slot.data());
    EXPECT_EQ(api.unpack_state(obj, &range, state.data(), arrays.data()), KEEL_OK) << keel_test::last_error();
    return slots;
  }
  std::vector<unsigned char> pack(const keel_optimizer_range& range, const std::vector<std::vector<float>>& slots) const {
    std::vector<unsigned char> state = zero_state(range);
    std::vector<const float*> arrays;
    for (auto& slot : slots) arrays.push_back(slot.data());
    EXPECT_EQ(api.pack_state(obj, &range, arrays.data(), state.data()), KEEL_OK) << keel_test::last_error();
    return state;
  }
};

keel_param_spec matrix_spec(int64_t rows, int64_t cols) {
  keel_param_spec spec{};
  spec.struct_size = sizeof(spec);
  spec.name = "w";
  spec.ndim = 2;
  spec.global_shape[0] = spec.local_shape[0] = rows;
  spec.global_shape[1] = spec.local_shape[1] = cols;
  spec.tp_dim = -1;
  return spec;
}

std::vector<float> normal(size_t n, float scale, uint32_t seed) {
  std::mt19937 bits(seed);
  std::normal_distribution<float> draw(0.0f, scale);
  std::vector<float> out(n);
  for (float& x : out) x = draw(bits);
  return out;
}

TEST(CompactOptimizers, Adamw8bitHoldsTwoBytesAnElementAndItsExchangeFormRoundTripsBitForBit) {
  LoadedPlugin plugin(KEEL_COMPACT_PLUGIN_PATH, KEEL_KIND_OPTIMIZER, "adamw8bit");
  Packed opt(plugin.api<keel_optimizer_api>(), R"({"lr": 1e-2, "weight_decay": 0.1})");
  EXPECT_EQ(opt.info.flags, uint32_t(KEEL_OPTIMIZER_PACKED_STATE));
  EXPECT_EQ(opt.info.n_state_slots, 2);
  const int64_t n = 5000;  // two whole blocks of 2048 and a part
  const keel_param_spec spec = matrix_spec(50, 100);
  const keel_optimizer_range range{sizeof(keel_optimizer_range), n, &spec, 0};
  std::vector<unsigned char> state = opt.zero_state(range);
  EXPECT_EQ(int64_t(state.size()), 2 * n + 3 * 2 * 4);
  std::vector<float> params = normal(size_t(n), 0.02f, 1);
  for (int64_t t = 1; t <= 5; ++t) {
    const std::vector<float> grads = normal(size_t(n), 1e-3f * float(t), 100 + uint32_t(t));
    ASSERT_EQ(opt.step(params, grads, state, range, t), KEEL_OK) << keel_test::last_error();
    const auto decoded = opt.unpack(range, state);
    EXPECT_EQ(opt.pack(range, decoded), state) << "step " << t << ": unpack then pack changed the packed bytes";
  }
  // Each block's largest magnitude decodes to exactly the block's absmax (the packed buffer
  // starts with the blocks' absmax of m, then of v): why unpack then pack is exact.
  const auto decoded = opt.unpack(range, state);
  for (int64_t b = 0; b < 3; ++b) {
    const int64_t first = b * 2048, last = std::min<int64_t>(n, first + 2048);
    for (int slot = 0; slot < 2; ++slot) {
      float absmax = 0.0f, stored = 0.0f;
      for (int64_t i = first; i < last; ++i) absmax = std::max(absmax, std::fabs(decoded[size_t(slot)][size_t(i)]));
      std::memcpy(&stored, state.data() + (size_t(slot) * 3 + size_t(b)) * sizeof(float), sizeof(float));
      EXPECT_GT(stored, 0.0f);
      EXPECT_EQ(absmax, stored) << "block " << b << ", moment " << slot;
    }
  }
}

TEST(CompactOptimizers, Adamw8bitMomentsStayWithinOneCodeOfTheFp32Rule) {
  LoadedPlugin plugin(KEEL_COMPACT_PLUGIN_PATH, KEEL_KIND_OPTIMIZER, "adamw8bit");
  Packed opt(plugin.api<keel_optimizer_api>(), R"({"lr": 1e-2, "betas": [0.9, 0.95], "weight_decay": 0})");
  const int64_t n = 3000;
  const keel_optimizer_range range{sizeof(keel_optimizer_range), n, nullptr, 0};
  std::vector<unsigned char> state = opt.zero_state(range);
  std::vector<float> params(size_t(n), 0.5f);
  const std::vector<float> grads = normal(size_t(n), 1.0f, 7);
  ASSERT_EQ(opt.step(params, grads, state, range, 1), KEEL_OK) << keel_test::last_error();
  const auto decoded = opt.unpack(range, state);
  for (int64_t b = 0; b < 2; ++b) {
    const int64_t first = b * 2048, last = std::min<int64_t>(n, first + 2048);
    double absmax = 0.0;
    for (int64_t i = first; i < last; ++i) absmax = std::max(absmax, std::fabs(0.1 * grads[size_t(i)]));
    for (int64_t i = first; i < last; ++i) {
      const double exact = 0.1 * grads[size_t(i)];  // m after one step from zero
      EXPECT_NEAR(decoded[0][size_t(i)], exact, absmax * 0.9 / 64 / 2 + 1e-7 * absmax) << "element " << i;
    }
  }
}

TEST(CompactOptimizers, AdafactorKeepsRowAndColumnStatisticsAndTheirExchangeFormRoundTrips) {
  LoadedPlugin plugin(KEEL_COMPACT_PLUGIN_PATH, KEEL_KIND_OPTIMIZER, "adafactor");
  Packed opt(plugin.api<keel_optimizer_api>(), R"({"lr": 1e-2, "beta1": 0.9})");
  EXPECT_EQ(opt.info.flags, uint32_t(KEEL_OPTIMIZER_PACKED_STATE | KEEL_OPTIMIZER_WHOLE_TENSORS));
  EXPECT_EQ(opt.info.n_state_slots, 3);
  const keel_param_spec spec = matrix_spec(30, 70);
  const int64_t n = 30 * 70;
  const keel_optimizer_range range{sizeof(keel_optimizer_range), n, &spec, 0};
  std::vector<unsigned char> state = opt.zero_state(range);
  EXPECT_EQ(int64_t(state.size()), 4 * (30 + 70 + n));  // rows, columns, and m for beta1
  std::vector<float> params = normal(size_t(n), 0.05f, 3);
  const std::vector<float> before = params;
  const std::vector<float> grads = normal(size_t(n), 1e-2f, 4);
  ASSERT_EQ(opt.step(params, grads, state, range, 1), KEEL_OK) << keel_test::last_error();
  EXPECT_NE(params, before);
  const auto slots = opt.unpack(range, state);
  // Step 1: beta2_t = 1 - 1^-0.8 = 0, so the statistics are the row and column means of g² + eps1.
  for (int64_t i = 0; i < 30; ++i) {
    double row = 0.0;
    for (int64_t j = 0; j < 70; ++j) row += double(grads[size_t(i * 70 + j)]) * grads[size_t(i * 70 + j)] + 1e-30;
    for (int64_t j = 0; j < 70; ++j) EXPECT_NEAR(slots[0][size_t(i * 70 + j)], row / 70, 1e-6 * row / 70);
  }
  for (int64_t j = 0; j < 70; ++j) {
    double col = 0.0;
    for (int64_t i = 0; i < 30; ++i) col += double(grads[size_t(i * 70 + j)]) * grads[size_t(i * 70 + j)] + 1e-30;
    for (int64_t i = 0; i < 30; ++i) EXPECT_NEAR(slots[1][size_t(i * 70 + j)], col / 30, 1e-6 * col / 30);
  }
  EXPECT_EQ(opt.pack(range, slots), state);
}

TEST(CompactOptimizers, AdafactorRefusesAPartOfATensor) {
  LoadedPlugin plugin(KEEL_COMPACT_PLUGIN_PATH, KEEL_KIND_OPTIMIZER, "adafactor");
  Packed opt(plugin.api<keel_optimizer_api>(), "{}");
  const keel_param_spec spec = matrix_spec(4, 8);
  const keel_optimizer_range part{sizeof(keel_optimizer_range), 16, &spec, 8};
  int64_t bytes = 0;
  EXPECT_EQ(opt.api.packed_state_bytes(opt.obj, &part, &bytes), KEEL_ERR_INVALID_ARGUMENT);
  EXPECT_NE(keel_test::last_error().find("elements [8, 24) of 32, and this optimizer updates whole tensors"),
            std::string::npos)
      << keel_test::last_error();
  const keel_optimizer_range no_spec{sizeof(keel_optimizer_range), 32, nullptr, 0};
  EXPECT_EQ(opt.api.packed_state_bytes(opt.obj, &no_spec, &bytes), KEEL_ERR_INVALID_ARGUMENT);
}

TEST(CompactOptimizers, AStepFromAStrategyBuiltBefore012IsRefused) {
  LoadedPlugin plugin(KEEL_COMPACT_PLUGIN_PATH, KEEL_KIND_OPTIMIZER, "adamw8bit");
  Packed opt(plugin.api<keel_optimizer_api>(), "{}");
  std::vector<float> params(8, 1.0f), grads(8, 0.5f), m(8), v(8);
  float* state[2] = {m.data(), v.data()};
  keel_optimizer_step_args args{};
  args.struct_size = offsetof(keel_optimizer_step_args, packed_state);  // 0.8's size
  args.device = keel_device{KEEL_DEVICE_CPU, 0};
  args.params = params.data();
  args.grads = grads.data();
  args.state = state;
  args.n = 8;
  args.lr = 1e-3f;
  args.grad_scale = 1.0f;
  args.step = 1;
  EXPECT_EQ(opt.api.step(opt.obj, &args), KEEL_ERR_UNIMPLEMENTED);
  EXPECT_NE(keel_test::last_error().find("built against an older ABI"), std::string::npos) << keel_test::last_error();
  EXPECT_EQ(params, std::vector<float>(8, 1.0f));
}

TEST(CompactOptimizers, BadConfigsAreRefusedWithTheirPath) {
  LoadedPlugin plugin(KEEL_COMPACT_PLUGIN_PATH, KEEL_KIND_OPTIMIZER, "adafactor");
  const auto& api = plugin.api<keel_optimizer_api>();
  keel_host host = keel_test::make_test_host();
  EXPECT_EQ(api.validate_config(&host, R"({"relative_step": true})", "optimizer"), KEEL_ERR_INVALID_CONFIG);
  EXPECT_NE(keel_test::last_error().find("optimizer.relative_step: only false is supported"), std::string::npos)
      << keel_test::last_error();
  EXPECT_EQ(api.validate_config(&host, R"({"eps": [1e-30]})", "optimizer"), KEEL_ERR_INVALID_CONFIG);
  EXPECT_NE(keel_test::last_error().find("optimizer.eps: expected an array of two numbers"), std::string::npos)
      << keel_test::last_error();
  EXPECT_EQ(api.validate_config(&host, R"({"decay_rate": 0.5})", "optimizer"), KEEL_ERR_INVALID_CONFIG);
  EXPECT_EQ(api.validate_config(&host, R"({"beta1": null, "lr": 0.01})", "optimizer"), KEEL_OK) << keel_test::last_error();
}

}  // namespace
