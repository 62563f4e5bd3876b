// GELU (tanh form) against std::tanh in double, its backward against the analytic derivative
// and finite differences. n = 13 exercises the 8-lane tail; n = 40003 the threaded blocks.
#include "cpu/gelu.h"

#include "reference.h"

using namespace keel_test;

namespace {

double gelu_ref(double x) {
  const double s = std::sqrt(2.0 / M_PI);
  return 0.5 * x * (1.0 + std::tanh(s * (x + 0.044715 * x * x * x)));
}

class Gelu : public ::testing::TestWithParam<int64_t> {};

TEST_P(Gelu, ForwardAndBackwardMatchReference) {
  const int64_t n = GetParam();
  auto inp = random_floats(n, 1, -6.0f, 6.0f), dout = random_floats(n, 2);
  std::vector<float> out(n, 9.0f);
  keel::cpu::gelu_forward(out.data(), inp.data(), n);
  std::vector<double> want(n), want_grad(n);
  const double s = std::sqrt(2.0 / M_PI);
  for (int64_t i = 0; i < n; ++i) {
    const double x = inp[i], u = s * (x + 0.044715 * x * x * x), th = std::tanh(u);
    want[i] = gelu_ref(x);
    want_grad[i] = (0.5 * (1 + th) + 0.5 * x * (1 - th * th) * s * (1 + 3 * 0.044715 * x * x)) * dout[i];
  }
  expect_close(out, want, 2e-6, 1e-5, "out");
  auto dinp = random_floats(n, 3), got = dinp;
  keel::cpu::gelu_backward(got.data(), inp.data(), dout.data(), n);
  expect_close(got, plus(dinp, want_grad), 2e-6, 1e-5, "dinp");
}

INSTANTIATE_TEST_SUITE_P(Sizes, Gelu, ::testing::Values(int64_t{1}, int64_t{13}, int64_t{40003}));

TEST(GeluFiniteDifferences, BackwardMatchesNumericalGradient) {
  const int64_t n = 11;
  auto inp = random_floats(n, 4, -4.0f, 4.0f), dout = random_floats(n, 5);
  std::vector<float> dinp(n, 0.0f);
  keel::cpu::gelu_backward(dinp.data(), inp.data(), dout.data(), n);
  auto x = to_double(inp), g = to_double(dout);
  auto loss = [&] {
    double l = 0;
    for (int64_t i = 0; i < n; ++i) l += g[i] * gelu_ref(x[i]);
    return l;
  };
  expect_close(dinp, numerical_gradient(x, loss), 2e-6, 1e-5, "dinp vs finite differences");
}

}  // namespace
