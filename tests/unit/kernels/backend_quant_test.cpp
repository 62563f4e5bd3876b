// The cpu backend's quantization ops. Fake quantization (QAT): against torchao's symmetric
// per-group rule written here in double (int8 per channel, int4 in groups of 32, at fp32 and
// bf16, in place). NF4 (QLoRA's frozen base): keel_support/common/nf4.hpp's quantizer and the cpu backend's
// nf4_dequantize_dt against a reference written here from the QLoRA paper's published table
// (bitsandbytes' create_normal_map values, typed in again below) and torchao's double
// quantization, in double: each weight's code is its nearest table value after dividing by its
// 64-block's absmax; the absmaxes less their mean, in groups of 256, scaled so the group's
// largest maps to 128, rounded half to even, clamped to int8. The codes and scales must be equal,
// and the dequantized weights equal the reference's within fp32 rounding, at fp32 and bf16.
#include <keel_support/common/nf4.hpp>

#include <algorithm>
#include <cmath>
#include <utility>
#include <random>
#include <vector>

#include "backend_plugin.h"
#include "bf16_reference.h"
#include "reference.h"

using namespace keel_test;

namespace {

constexpr keel_dtype kFp32{KEEL_DTYPE_FLOAT, 32, 1};
constexpr keel_dtype kBf16{KEEL_DTYPE_BFLOAT, 16, 1};

const double kPublished[16] = {-1.0,
                               -0.6961928009986877,
                               -0.5250730514526367,
                               -0.39491748809814453,
                               -0.28444138169288635,
                               -0.18477343022823334,
                               -0.09105003625154495,
                               0.0,
                               0.07958029955625534,
                               0.16093020141124725,
                               0.24611230194568634,
                               0.33791524171829224,
                               0.44070982933044434,
                               0.5626170039176941,
                               0.7229568362236023,
                               1.0};

struct Reference {
  std::vector<int> codes;
  std::vector<int> scales;
  std::vector<double> factors, values;
  double mean = 0;
};

Reference reference_nf4(const std::vector<float>& w) {
  Reference r;
  const size_t blocks = w.size() / 64;
  std::vector<float> absmax(blocks);
  for (size_t b = 0; b < blocks; ++b) {
    float m = 0;
    for (size_t i = 0; i < 64; ++i) m = std::max(m, std::fabs(w[b * 64 + i]));
    absmax[b] = m;
    for (size_t i = 0; i < 64; ++i) {
      const double x = m > 0 ? double(float(w[b * 64 + i] / m)) : 0.0;  // the division in fp32, as stored
      int best = 0;
      for (int k = 1; k < 16; ++k)
        if (std::fabs(x - double(float(kPublished[k]))) < std::fabs(x - double(float(kPublished[best])))) best = k;
      r.codes.push_back(best);
    }
  }
  double sum = 0;
  for (float m : absmax) sum += m;
  const float mean = float(sum / double(blocks));
  r.mean = mean;
  for (size_t g = 0; g * 256 < blocks; ++g) {
    float largest = 0;
    for (size_t b = g * 256; b < std::min(blocks, g * 256 + 256); ++b) largest = std::max(largest, std::fabs(absmax[b] - mean));
    const float factor = 256.0f / (2.0f * largest);
    for (size_t b = g * 256; b < std::min(blocks, g * 256 + 256); ++b)
      r.scales.push_back(int(std::max(-128.0f, std::min(127.0f, std::nearbyint((absmax[b] - mean) * factor)))));
    r.factors.push_back(1.0f / factor);
  }
  for (size_t i = 0; i < w.size(); ++i) {
    const size_t b = i / 64;
    const double block_absmax = double(float(float(r.scales[b]) * float(r.factors[b / 256]) + mean));
    r.values.push_back(double(float(kPublished[r.codes[i]])) * block_absmax);
  }
  return r;
}

class BackendCpuQuant : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_EQ(backend_.status, KEEL_OK) << g_last_error;
    ASSERT_TRUE(api()->nf4_dequantize_dt) << "the cpu backend fills nf4_dequantize_dt (0.19)";
  }
  void* h() { return backend_.handle; }
  Backend backend_{R"({"peak_tflops": 1})"};
};

// 300 blocks: two scale groups, the second partial; normal weights with one block of zeros and
// one of a single large value.
TEST_F(BackendCpuQuant, CodesScalesAndValuesEqualThePublishedTablesReference) {
  const int64_t n = 300 * 64;
  std::mt19937 rng(11);
  std::normal_distribution<float> normal(0.0f, 0.02f);
  std::vector<float> w(n);
  for (float& x : w) x = normal(rng);
  std::fill(w.begin() + 64 * 5, w.begin() + 64 * 6, 0.0f);
  w[64 * 9 + 3] = 0.5f;
  const Reference want = reference_nf4(w);
  const keel_support::Nf4Tensor q = keel_support::nf4_quantize(w.data(), n);

  size_t code_mismatches = 0;
  for (int64_t i = 0; i < n; ++i) {
    const int code = i % 2 == 0 ? q.codes[size_t(i / 2)] >> 4 : q.codes[size_t(i / 2)] & 15;
    code_mismatches += code != want.codes[size_t(i)];
  }
  EXPECT_EQ(code_mismatches, 0u);
  ASSERT_EQ(q.block_scales.size(), want.scales.size());
  for (size_t b = 0; b < want.scales.size(); ++b) EXPECT_EQ(int(q.block_scales[b]), want.scales[b]) << "block " << b;
  ASSERT_EQ(q.scale_factors.size(), 2u);
  for (size_t g = 0; g < 2; ++g) EXPECT_EQ(double(q.scale_factors[g]), want.factors[g]) << "group " << g;
  EXPECT_EQ(double(q.scale_mean), want.mean);
  EXPECT_EQ(q.bytes(), n / 2 + n / 64 + 2 * 4 + 4);  // about 4.13 bits a weight

  std::vector<float> out(n);
  ASSERT_EQ(api()->nf4_dequantize_dt(h(), kFp32, out.data(), q.codes.data(), q.block_scales.data(),
                                     q.scale_factors.data(), q.scale_mean, n),
            KEEL_OK)
      << g_last_error;
  expect_close(out, want.values, 0.0, 1e-6, "dequantized weights");
  for (int64_t i = 64 * 5; i < 64 * 6; ++i) EXPECT_EQ(want.codes[size_t(i)], 7) << "a zero block's code is 0.0's";
  std::vector<uint16_t> out16(n);
  ASSERT_EQ(api()->nf4_dequantize_dt(h(), kBf16, out16.data(), q.codes.data(), q.block_scales.data(),
                                     q.scale_factors.data(), q.scale_mean, n),
            KEEL_OK)
      << g_last_error;
  expect_close(widen(out16), to_double(out), 0.0, 1.0 / 256, "dequantized at bf16");
  // The quantization error: within half the widest gap of the table times the block's absmax.
  double worst = 0;
  for (int64_t i = 0; i < n; ++i) worst = std::max(worst, std::fabs(double(out[i]) - w[i]));
  EXPECT_LT(worst, 0.5 * (1.0 - 0.7229568362236023) * 0.5 * 1.01);
}

// A tensor whose length is no multiple of 64 (a tensor-parallel piece of a 100-row weight): the
// last block, 19 weights, and the odd last code, as the reference pads them.
TEST_F(BackendCpuQuant, APartialLastBlockEqualsTheReference) {
  const int64_t n = 2 * 64 + 19;
  std::vector<float> w(n);
  std::mt19937 rng(12);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  for (float& x : w) x = normal(rng);
  const keel_support::Nf4Tensor q = keel_support::nf4_quantize(w.data(), n);
  ASSERT_EQ(q.codes.size(), size_t(74));
  ASSERT_EQ(q.block_scales.size(), size_t(3));
  std::vector<float> padded(w);
  padded.resize(3 * 64, 0.0f);  // zeros change no absmax
  const Reference want = reference_nf4(padded);
  std::vector<float> out(n);
  ASSERT_EQ(api()->nf4_dequantize_dt(h(), kFp32, out.data(), q.codes.data(), q.block_scales.data(),
                                     q.scale_factors.data(), q.scale_mean, n),
            KEEL_OK)
      << g_last_error;
  // The padded reference's mean is over the same three absmaxes, so everything agrees.
  expect_close(out, std::vector<double>(want.values.begin(), want.values.begin() + n), 0.0, 1e-6, "partial block");
}

TEST_F(BackendCpuQuant, ANullPointerIsRefused) {
  std::vector<float> out(64);
  EXPECT_EQ(api()->nf4_dequantize_dt(h(), kFp32, out.data(), nullptr, nullptr, nullptr, 0.0f, 64),
            KEEL_ERR_INVALID_ARGUMENT);
  EXPECT_NE(g_last_error.find("nf4_dequantize_dt"), std::string::npos) << g_last_error;
}

// torchao's get_group_qparams_symmetric and fake quantization, in double: scale = amax /
// ((qmax - qmin) / 2) floored at FLT_EPSILON, q = clamp(round half to even (x · (1 / scale))), as
// quantize_affine computes it.
std::vector<double> reference_fake_quantize(const std::vector<float>& x, int64_t group, int bits) {
  const double qmin = -std::ldexp(1.0, bits - 1), qmax = std::ldexp(1.0, bits - 1) - 1;
  std::vector<double> out(x.size());
  for (size_t g = 0; g < x.size(); g += size_t(group)) {
    float amax = 0;
    for (int64_t i = 0; i < group; ++i) amax = std::max(amax, std::fabs(x[g + i]));
    const float scale = std::max(float(amax / float((qmax - qmin) / 2)), 1.1920928955078125e-07f);
    for (int64_t i = 0; i < group; ++i) {
      const double q = std::nearbyint(double(x[g + i] * (1.0f / scale)));  // in fp32, as torch's
      out[g + i] = std::max(qmin, std::min(qmax, q)) * double(scale);
    }
  }
  return out;
}

TEST_F(BackendCpuQuant, FakeQuantizeEqualsTorchaosRule) {
  const int64_t rows = 5, cols = 96;
  auto w = random_floats(rows * cols, 13, -0.3f, 0.3f);
  std::fill(w.begin() + cols, w.begin() + cols + 32, 0.0f);  // a zero group: the scale's floor
  for (auto [group, bits] : {std::pair<int64_t, int>{cols, 8}, {32, 4}}) {
    const auto want = reference_fake_quantize(w, group, bits);
    std::vector<float> out(w.size());
    ASSERT_EQ(api()->fake_quantize_dt(h(), kFp32, out.data(), w.data(), rows, cols, group, bits), KEEL_OK) << g_last_error;
    expect_close(out, want, 0.0, 1e-7, "fake_quantize bits " + std::to_string(bits));
    std::vector<float> in_place(w);
    ASSERT_EQ(api()->fake_quantize_dt(h(), kFp32, in_place.data(), in_place.data(), rows, cols, group, bits), KEEL_OK);
    EXPECT_EQ(in_place, out);
    // Each group holds at most 2^bits distinct values.
    for (int64_t g = 0; g < rows * cols; g += group) {
      std::vector<float> distinct(out.begin() + g, out.begin() + g + group);
      std::sort(distinct.begin(), distinct.end());
      EXPECT_LE(std::unique(distinct.begin(), distinct.end()) - distinct.begin(), 1 << bits);
    }
  }
  const auto b = bf16_values(rows * cols, 14, -0.3f, 0.3f);
  std::vector<float> out32(rows * cols);
  std::vector<uint16_t> out16(rows * cols);
  ASSERT_EQ(api()->fake_quantize_dt(h(), kFp32, out32.data(), b.f.data(), rows, cols, 32, 4), KEEL_OK);
  ASSERT_EQ(api()->fake_quantize_dt(h(), kBf16, out16.data(), b.h.data(), rows, cols, 32, 4), KEEL_OK);
  expect_close(widen(out16), to_double(out32), 0.0, 1.0 / 256, "fake_quantize at bf16");
  EXPECT_EQ(api()->fake_quantize_dt(h(), kFp32, out32.data(), b.f.data(), rows, cols, 40, 4), KEEL_ERR_INVALID_ARGUMENT);
  EXPECT_NE(g_last_error.find("group 40 does not divide"), std::string::npos) << g_last_error;
}

// torchao's _choose_qparams_per_token_asymmetric and per-token fake quantization, step by step in
// fp32 as torch computes them: the range widened to hold 0, the zero point from whichever end
// errs less, clamped then rounded.
std::vector<double> reference_fake_quantize_tokens(const std::vector<float>& x, int64_t cols, int bits) {
  const float qmin = -std::ldexp(1.0f, bits - 1), qmax = std::ldexp(1.0f, bits - 1) - 1;
  std::vector<double> out(x.size());
  for (size_t r = 0; r < x.size(); r += size_t(cols)) {
    const auto [lo_it, hi_it] = std::minmax_element(x.begin() + long(r), x.begin() + long(r) + cols);
    const float min_val_neg = std::min(*lo_it, 0.0f), max_val_pos = std::max(*hi_it, 0.0f);
    const float scale = std::max((max_val_pos - min_val_neg) / float(qmax - qmin), 1.1920928955078125e-07f);
    const float descaled_min = min_val_neg / scale, descaled_max = max_val_pos / scale;
    const float zero_point_from_min_error = qmin + descaled_min, zero_point_from_max_error = qmax + descaled_max;
    float zero_point = zero_point_from_min_error + zero_point_from_max_error > 0 ? qmin - descaled_min
                                                                                 : qmax - descaled_max;
    zero_point = std::nearbyint(std::min(std::max(zero_point, qmin), qmax));
    for (int64_t i = 0; i < cols; ++i) {
      const float q = std::min(std::max(std::nearbyint(x[r + i] * (1.0f / scale)) + zero_point, qmin), qmax);
      out[r + i] = double((q - zero_point) * scale);
    }
  }
  return out;
}

TEST_F(BackendCpuQuant, FakeQuantizeTokensEqualsTorchaosPerTokenRule) {
  const int64_t rows = 6, cols = 80;
  auto x = random_floats(rows * cols, 15, -0.4f, 1.2f);
  std::fill(x.begin(), x.begin() + cols, 0.0f);                            // all zero: the scale's floor
  for (int64_t i = 0; i < cols; ++i) x[size_t(cols + i)] = std::fabs(x[size_t(cols + i)]) + 0.1f;  // all positive
  for (int64_t i = 0; i < cols; ++i) x[size_t(2 * cols + i)] = -std::fabs(x[size_t(2 * cols + i)]);  // all negative
  const auto want = reference_fake_quantize_tokens(x, cols, 8);
  std::vector<float> out(x.size());
  ASSERT_EQ(api()->fake_quantize_tokens_dt(h(), kFp32, out.data(), x.data(), rows, cols, 8), KEEL_OK) << g_last_error;
  expect_close(out, want, 0.0, 0.0, "fake_quantize_tokens");
  std::vector<float> in_place(x);
  ASSERT_EQ(api()->fake_quantize_tokens_dt(h(), kFp32, in_place.data(), in_place.data(), rows, cols, 8), KEEL_OK);
  EXPECT_EQ(in_place, out);
  for (int64_t r = 0; r < rows; ++r) {  // each row: at most 256 levels, each value within half a step
    const auto [lo, hi] = std::minmax_element(x.begin() + r * cols, x.begin() + (r + 1) * cols);
    const double step = std::max(double(std::max(*hi, 0.0f) - std::min(*lo, 0.0f)) / 255.0, 1.2e-7);
    std::vector<float> distinct(out.begin() + r * cols, out.begin() + (r + 1) * cols);
    for (int64_t i = 0; i < cols; ++i) EXPECT_LE(std::fabs(out[size_t(r * cols + i)] - x[size_t(r * cols + i)]), step);
    std::sort(distinct.begin(), distinct.end());
    EXPECT_LE(std::unique(distinct.begin(), distinct.end()) - distinct.begin(), 256);
  }
  const auto b = bf16_values(rows * cols, 16, -0.3f, 0.9f);
  std::vector<float> out32(rows * cols);
  std::vector<uint16_t> out16(rows * cols);
  ASSERT_EQ(api()->fake_quantize_tokens_dt(h(), kFp32, out32.data(), b.f.data(), rows, cols, 8), KEEL_OK);
  ASSERT_EQ(api()->fake_quantize_tokens_dt(h(), kBf16, out16.data(), b.h.data(), rows, cols, 8), KEEL_OK);
  expect_close(widen(out16), to_double(out32), 0.0, 1.0 / 256, "fake_quantize_tokens at bf16");
  EXPECT_EQ(api()->fake_quantize_tokens_dt(h(), kFp32, out32.data(), b.f.data(), rows, cols, 9), KEEL_ERR_INVALID_ARGUMENT);
  EXPECT_NE(g_last_error.find("bits 9 is outside 2..8"), std::string::npos) << g_last_error;
}

}  // namespace
