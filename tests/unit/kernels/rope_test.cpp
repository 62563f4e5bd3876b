// RoPE against a reference that turns each pair as a complex number, (a + ib)·e^{iθ}, with
// angles from double-precision frequencies; the backward against finite differences and as the
// forward's inverse; columns outside the turned heads untouched (a fused qkv row's v part); the
// inverse frequencies against theta^(−2i/D) and Llama 3's scaling against its three regimes.
#include "cpu/rope.h"

#include <keel_support/model/rope_frequencies.hpp>

#include <complex>

#include "reference.h"

using namespace keel_test;

namespace {

constexpr double kTheta = 10000.0;

// Turns heads [first, first + heads·D) of every row of x (double) by position·freq.
std::vector<double> rope_ref(std::vector<double> x, int64_t B, int64_t T, int64_t heads, int64_t D, int64_t stride,
                             int64_t first, int64_t position0) {
  for (int64_t row = 0; row < B * T; ++row)
    for (int64_t h = 0; h < heads; ++h)
      for (int64_t i = 0; i < D / 2; ++i) {
        const double frequency = std::pow(kTheta, -2.0 * double(i) / double(D));
        const double angle = double(position0 + row % T) * frequency;
        double* a = &x[row * stride + first + h * D + i];
        double* b = a + D / 2;
        const std::complex<double> turned = std::complex<double>(*a, *b) * std::polar(1.0, angle);
        *a = turned.real();
        *b = turned.imag();
      }
  return x;
}

std::vector<float> frequencies(int64_t D) {
  std::vector<float> inv_freq(D / 2);
  keel_support::rope_inverse_frequencies(inv_freq.data(), D, kTheta, keel_support::RopeScaling{});
  return inv_freq;
}

struct Case {
  int64_t B, T, heads, D, position0;
};
void PrintTo(const Case& c, std::ostream* os) {
  *os << "B=" << c.B << ",T=" << c.T << ",heads=" << c.heads << ",D=" << c.D << ",position0=" << c.position0;
}
class Rope : public ::testing::TestWithParam<Case> {};

// The k part of a qkv row (q: `heads` heads, k: the same, v: the same): only k turns.
TEST_P(Rope, TurnsOnlyItsHeadsLikeComplexMultiplication) {
  const auto [B, T, heads, D, position0] = GetParam();
  const int64_t C = heads * D, stride = 3 * C, first = C;
  const std::vector<float> inv_freq = frequencies(D);
  auto qkv = random_floats(B * T * stride, 1, -2.0f, 2.0f), got = qkv;
  keel::cpu::rope_forward(got.data(), inv_freq.data(), B, T, heads, D, stride, first, position0);
  // Positions up to ~100 radians: the fp32 angle carries ~1e-5 absolute error there.
  expect_close(got, rope_ref(to_double(qkv), B, T, heads, D, stride, first, position0), 2e-5, 1e-5, "turned qkv");
  for (int64_t row = 0; row < B * T; ++row)
    for (int64_t c = 0; c < stride; ++c)
      if (c < first || c >= first + C) ASSERT_EQ(got[row * stride + c], qkv[row * stride + c]) << "row " << row << " col " << c;
  keel::cpu::rope_backward(got.data(), inv_freq.data(), B, T, heads, D, stride, first, position0);
  expect_close(got, to_double(qkv), 1e-5, 1e-5, "backward after forward (the turn's inverse)");
}

INSTANTIATE_TEST_SUITE_P(Shapes, Rope,
                         ::testing::Values(Case{1, 1, 1, 2, 0}, Case{2, 7, 3, 10, 0}, Case{3, 97, 4, 64, 0},
                                           Case{1, 5, 2, 6, 90}));

TEST(RopeFiniteDifferences, BackwardMatchesNumericalGradient) {
  const int64_t B = 2, T = 3, heads = 2, D = 4, stride = heads * D;
  const std::vector<float> inv_freq = frequencies(D);
  auto x = random_floats(B * T * stride, 2), dout = random_floats(B * T * stride, 3);
  std::vector<float> dx = dout;
  keel::cpu::rope_backward(dx.data(), inv_freq.data(), B, T, heads, D, stride, 0, 0);
  auto xd = to_double(x), g = to_double(dout);
  auto loss = [&] { return dot(g, rope_ref(xd, B, T, heads, D, stride, 0, 0)); };
  expect_close(dx, numerical_gradient(xd, loss), 1e-5, 1e-5, "dx vs finite differences");
}

TEST(RopeFrequencies, UnscaledAreThetaToTheMinusTwoIOverD) {
  for (int64_t D : {2, 10, 64, 128}) {
    const std::vector<float> inv_freq = frequencies(D);
    std::vector<double> want(D / 2);
    for (int64_t i = 0; i < D / 2; ++i) want[i] = std::pow(kTheta, -2.0 * double(i) / double(D));
    expect_close(inv_freq, want, 0.0, 1e-6, "inv_freq D=" + std::to_string(D));
  }
}

// Llama 3.1's rope_scaling (factor 8, low 1, high 4, original context 8192): wavelengths under
// 2048 keep their frequency, those over 8192 are divided by 8, and those between are
// interpolated, moving monotonically from one regime to the other.
TEST(RopeFrequencies, Llama3ScalingKeepsShortWavesDividesLongOnesAndInterpolatesBetween) {
  const int64_t D = 128;
  keel_support::RopeScaling scaling;
  scaling.factor = 8.0;
  scaling.low_freq_factor = 1.0;
  scaling.high_freq_factor = 4.0;
  scaling.original_max_position = 8192.0;
  std::vector<float> plain = frequencies(D), scaled(D / 2);
  keel_support::rope_inverse_frequencies(scaled.data(), D, 500000.0, scaling);
  keel_support::rope_inverse_frequencies(plain.data(), D, 500000.0, keel_support::RopeScaling{});
  int kept = 0, divided = 0, between = 0;
  double previous_ratio = 1.0;
  for (int64_t i = 0; i < D / 2; ++i) {
    const double wavelength = 2 * M_PI / plain[i], ratio = double(scaled[i]) / plain[i];
    if (wavelength < 2048.0) {
      EXPECT_EQ(scaled[i], plain[i]) << "i " << i;
      ++kept;
    } else if (wavelength > 8192.0) {
      EXPECT_NEAR(ratio, 1.0 / 8.0, 1e-6) << "i " << i;
      ++divided;
    } else {
      const double smooth = (8192.0 / wavelength - 1.0) / 3.0;
      EXPECT_NEAR(ratio, (1 - smooth) / 8.0 + smooth, 1e-6) << "i " << i;
      EXPECT_GT(ratio, 1.0 / 8.0 - 1e-9);
      EXPECT_LT(ratio, 1.0 + 1e-9);
      ++between;
    }
    EXPECT_LE(ratio, previous_ratio + 1e-9) << "the scale only falls as the wavelength grows, at i " << i;
    previous_ratio = ratio;
  }
  EXPECT_GT(kept, 0);
  EXPECT_GT(divided, 0);
  EXPECT_GT(between, 0) << "all three regimes are exercised";
}

}  // namespace
