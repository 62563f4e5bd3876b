// The cpu backend's dropout (backend.h dropout_dt, LoRA's adapter dropout) against the rule as the
// header states it, written again here from that text (SplitMix64 step by step, the 24-bit uniform, keep when u >= p, x · float(1 / (1 - p))): equal bits at fp32,
// in place and out of place; a tensor-parallel piece (col_offset) equals its columns of the whole
// row's mask; bf16 equals the fp32 result rounded; the kept share is 1 - p within 5 standard
// deviations; p outside [0, 1) is refused by name.
#include <cmath>
#include <cstdint>
#include <vector>

#include "backend_plugin.h"
#include "bf16_reference.h"
#include "reference.h"

using namespace keel_test;

namespace {

constexpr keel_dtype kFp32{KEEL_DTYPE_FLOAT, 32, 1};
constexpr keel_dtype kBf16{KEEL_DTYPE_BFLOAT, 16, 1};

uint64_t mix(uint64_t z) {  // backend.h's splitmix64, step by step
  uint64_t a = z + 0x9E3779B97F4A7C15ull;
  uint64_t b = (a ^ (a >> 30)) * 0xBF58476D1CE4E5B9ull;
  uint64_t c = (b ^ (b >> 27)) * 0x94D049BB133111EBull;
  return c ^ (c >> 31);
}

std::vector<float> reference_dropout(const std::vector<float>& x, int64_t rows, int64_t cols, int64_t col_offset,
                                     uint64_t seed, float p) {
  std::vector<float> out(x.size());
  const float scale = float(1.0 / (1.0 - double(p)));
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) {
      const uint64_t key = (uint64_t(r) << 32) | uint64_t(col_offset + c);
      const double u = double(mix(seed ^ mix(key)) >> 40) / 16777216.0;
      out[size_t(r * cols + c)] = u >= double(p) ? x[size_t(r * cols + c)] * scale : 0.0f;
    }
  return out;
}

class BackendCpuDropout : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_EQ(backend_.status, KEEL_OK) << g_last_error;
    ASSERT_TRUE(api()->dropout_dt) << "the cpu backend fills dropout_dt (0.19)";
  }
  void* h() { return backend_.handle; }
  Backend backend_{R"({"peak_tflops": 1})"};
};

TEST_F(BackendCpuDropout, EqualsTheHeadersRuleInPlaceAndOut) {
  const int64_t rows = 37, cols = 70;
  const uint64_t seed = 0x1234567890ABCDEFull;
  const auto x = random_floats(rows * cols, 3, -1.0f, 1.0f);
  for (float p : {0.0f, 0.1f, 0.5f}) {
    const auto want = reference_dropout(x, rows, cols, 0, seed, p);
    std::vector<float> out(x.size());
    ASSERT_EQ(api()->dropout_dt(h(), kFp32, out.data(), x.data(), rows, cols, 0, seed, p), KEEL_OK) << g_last_error;
    EXPECT_EQ(out, want) << "p " << p;
    std::vector<float> in_place(x);
    ASSERT_EQ(api()->dropout_dt(h(), kFp32, in_place.data(), in_place.data(), rows, cols, 0, seed, p), KEEL_OK);
    EXPECT_EQ(in_place, want) << "p " << p;
  }
  std::vector<float> other(x.size()), first(x.size());
  ASSERT_EQ(api()->dropout_dt(h(), kFp32, first.data(), x.data(), rows, cols, 0, seed, 0.5f), KEEL_OK);
  ASSERT_EQ(api()->dropout_dt(h(), kFp32, other.data(), x.data(), rows, cols, 0, seed + 1, 0.5f), KEEL_OK);
  EXPECT_NE(first, other) << "another seed draws another mask";
}

TEST_F(BackendCpuDropout, APieceOfTheRowEqualsThoseColumnsOfTheWhole) {
  const int64_t rows = 9, cols = 48, piece = 16;
  const uint64_t seed = 77;
  const auto x = random_floats(rows * cols, 4, -1.0f, 1.0f);
  std::vector<float> whole(x.size());
  ASSERT_EQ(api()->dropout_dt(h(), kFp32, whole.data(), x.data(), rows, cols, 0, seed, 0.3f), KEEL_OK);
  for (int64_t k = 0; k < cols / piece; ++k) {
    std::vector<float> in(size_t(rows * piece)), out(in.size());
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t c = 0; c < piece; ++c) in[size_t(r * piece + c)] = x[size_t(r * cols + k * piece + c)];
    ASSERT_EQ(api()->dropout_dt(h(), kFp32, out.data(), in.data(), rows, piece, k * piece, seed, 0.3f), KEEL_OK);
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t c = 0; c < piece; ++c)
        ASSERT_EQ(out[size_t(r * piece + c)], whole[size_t(r * cols + k * piece + c)]) << r << "," << k * piece + c;
  }
}

TEST_F(BackendCpuDropout, KeepsOneMinusPAndRoundsOnceAtBf16) {
  const int64_t rows = 200, cols = 500;
  const float p = 0.2f;
  std::vector<float> ones(size_t(rows * cols), 1.0f), out(ones.size());
  ASSERT_EQ(api()->dropout_dt(h(), kFp32, out.data(), ones.data(), rows, cols, 0, 5, p), KEEL_OK);
  double kept = 0;
  for (float v : out) kept += v != 0.0f;
  const double n = double(out.size()), sigma = std::sqrt(n * p * (1 - p));
  EXPECT_NEAR(kept, n * (1 - p), 5 * sigma);
  const auto b = bf16_values(rows * cols, 6, -1.0f, 1.0f);
  std::vector<float> out32(size_t(rows * cols));
  std::vector<uint16_t> out16(out32.size());
  ASSERT_EQ(api()->dropout_dt(h(), kFp32, out32.data(), b.f.data(), rows, cols, 0, 9, p), KEEL_OK);
  ASSERT_EQ(api()->dropout_dt(h(), kBf16, out16.data(), b.h.data(), rows, cols, 0, 9, p), KEEL_OK);
  expect_close(widen(out16), to_double(out32), 0.0, 1.0 / 256, "dropout at bf16");
  EXPECT_EQ(api()->dropout_dt(h(), kFp32, out32.data(), b.f.data(), rows, cols, 0, 9, 1.0f), KEEL_ERR_INVALID_ARGUMENT);
  EXPECT_NE(g_last_error.find("p 1.000000 is outside [0, 1)"), std::string::npos) << g_last_error;
}

}  // namespace
