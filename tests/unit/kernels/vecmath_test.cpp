// The vectorised exp and tanh every softmax and GELU relies on, against libm in double.
#include "cpu/vecmath.h"

#include "reference.h"

namespace {

TEST(Vecmath, ExpRelativeErrorBelow2e7) {
  double worst = 0, worst_x = 0;
  for (float x = -87.0f; x <= 88.0f; x += 0.00731f) {
    const double rel = std::fabs(keel::cpu::exp_approx(x) - std::exp(double(x))) / std::exp(double(x));
    if (rel > worst) worst = rel, worst_x = x;
  }
  EXPECT_LT(worst, 2e-7) << "at x = " << worst_x;
  EXPECT_TRUE(std::isnan(keel::cpu::exp_approx(NAN)));
  EXPECT_LT(keel::cpu::exp_approx(-1e30f), 1.3e-38f);  // very negative: ~0, no garbage
  EXPECT_GE(keel::cpu::exp_approx(-1e30f), 0.0f);
}

TEST(Vecmath, TanhAbsoluteErrorBelow2e7) {
  double worst = 0, worst_x = 0;
  for (float x = -20.0f; x <= 20.0f; x += 0.000913f) {
    const double err = std::fabs(keel::cpu::tanh_approx(x) - std::tanh(double(x)));
    if (err > worst) worst = err, worst_x = x;
  }
  EXPECT_LT(worst, 2e-7) << "at x = " << worst_x;
  EXPECT_EQ(keel::cpu::tanh_approx(1e30f), 1.0f);
  EXPECT_EQ(keel::cpu::tanh_approx(-1e30f), -1.0f);
}

TEST(Vecmath, ExpShiftedSumHandlesTails) {
  for (int64_t n : {1, 7, 8, 9, 37}) {
    auto x = keel_test::random_floats(n, 1, -5.0f, 5.0f);
    std::vector<float> out(n + 1, 42.0f);  // one guard element past the end
    const float sum = keel::cpu::exp_shifted_sum(out.data(), x.data(), 1.5f, n);
    double want_sum = 0;
    for (int64_t i = 0; i < n; ++i) {
      const double e = std::exp(double(x[i]) - 1.5);
      want_sum += e;
      EXPECT_NEAR(out[i], e, 3e-7 * e) << "n = " << n << ", i = " << i;
    }
    EXPECT_NEAR(sum, want_sum, 1e-6 * want_sum) << "n = " << n;
    EXPECT_EQ(out[n], 42.0f) << "wrote past the end, n = " << n;
  }
}

// The cross-entropy's two passes: the denominator alone, and the gradient written from zero or
// added to what is there (in place over the logits, too); tails, and nothing past the end.
TEST(Vecmath, ExpShiftedTotalAndScaledHandleTailsAndAliasing) {
  for (int64_t n : {1, 7, 8, 9, 37}) {
    const auto x = keel_test::random_floats(n, 2, -5.0f, 5.0f);
    double want_sum = 0;
    for (int64_t i = 0; i < n; ++i) want_sum += std::exp(double(x[i]) - 0.5);
    EXPECT_NEAR(keel::cpu::exp_shifted_total(x.data(), 0.5f, n), want_sum, 1e-6 * want_sum) << "n = " << n;

    auto base = keel_test::random_floats(n + 1, 3);
    base[n] = 42.0f;  // guard
    auto added = base, fresh = base, in_place = x;
    in_place.push_back(42.0f);
    keel::cpu::exp_shifted_scaled(added.data(), x.data(), 0.5f, -0.25f, n, /*from_zero=*/false);
    keel::cpu::exp_shifted_scaled(fresh.data(), x.data(), 0.5f, -0.25f, n, /*from_zero=*/true);
    keel::cpu::exp_shifted_scaled(in_place.data(), in_place.data(), 0.5f, -0.25f, n, /*from_zero=*/true);
    for (int64_t i = 0; i < n; ++i) {
      const double g = -0.25 * std::exp(double(x[i]) - 0.5);
      EXPECT_NEAR(added[i], base[i] + g, 1e-6) << "n = " << n << ", i = " << i;
      EXPECT_NEAR(fresh[i], g, 3e-7 * std::fabs(g)) << "n = " << n << ", i = " << i;
      EXPECT_EQ(in_place[i], fresh[i]) << "n = " << n << ", i = " << i;
    }
    EXPECT_EQ(added[n], 42.0f);
    EXPECT_EQ(fresh[n], 42.0f);
    EXPECT_EQ(in_place[n], 42.0f);
  }
}

}  // namespace
