// swiglu_forward/backward against silu written from std::exp in double, and the backward
// against finite differences. N·F = 40003 rows-times-columns exercises the threaded path.
#include "cpu/swiglu.h"

#include "reference.h"

using namespace keel_test;

namespace {

double silu_ref(double g) { return g / (1.0 + std::exp(-g)); }

std::vector<double> swiglu_ref(const std::vector<double>& gate_up, int64_t N, int64_t F) {
  std::vector<double> out(N * F);
  for (int64_t n = 0; n < N; ++n)
    for (int64_t i = 0; i < F; ++i) out[n * F + i] = silu_ref(gate_up[n * 2 * F + i]) * gate_up[n * 2 * F + F + i];
  return out;
}

struct Case {
  int64_t N, F;
};
void PrintTo(const Case& c, std::ostream* os) { *os << "N=" << c.N << ",F=" << c.F; }
class Swiglu : public ::testing::TestWithParam<Case> {};

TEST_P(Swiglu, ForwardAndBackwardMatchReference) {
  const auto [N, F] = GetParam();
  // Gates far into both tails: σ must neither overflow nor lose the sign.
  auto gate_up = random_floats(N * 2 * F, 1, -30.0f, 30.0f), dout = random_floats(N * F, 2);
  std::vector<float> out(N * F, 7.0f);
  keel::cpu::swiglu_forward(out.data(), gate_up.data(), N, F);
  auto x = to_double(gate_up);
  expect_close(out, swiglu_ref(x, N, F), 1e-6, 1e-5, "out");
  std::vector<double> want(N * 2 * F);
  for (int64_t n = 0; n < N; ++n)
    for (int64_t i = 0; i < F; ++i) {
      const double g = x[n * 2 * F + i], u = x[n * 2 * F + F + i], s = 1.0 / (1.0 + std::exp(-g));
      want[n * 2 * F + i] = dout[n * F + i] * u * (s + g * s * (1 - s));
      want[n * 2 * F + F + i] = dout[n * F + i] * silu_ref(g);
    }
  auto dgate_up = random_floats(N * 2 * F, 3), got = dgate_up;
  keel::cpu::swiglu_backward(got.data(), dout.data(), gate_up.data(), N, F);
  expect_close(got, plus(dgate_up, want), 1e-5, 1e-5, "dgate_up");
}

INSTANTIATE_TEST_SUITE_P(Sizes, Swiglu, ::testing::Values(Case{1, 1}, Case{5, 13}, Case{137, 292}));

TEST(SwigluFiniteDifferences, BackwardMatchesNumericalGradient) {
  const int64_t N = 3, F = 4;
  auto gate_up = random_floats(N * 2 * F, 4, -4.0f, 4.0f), dout = random_floats(N * F, 5);
  std::vector<float> dgate_up(N * 2 * F, 0.0f);
  keel::cpu::swiglu_backward(dgate_up.data(), dout.data(), gate_up.data(), N, F);
  auto x = to_double(gate_up), g = to_double(dout);
  auto loss = [&] { return dot(g, swiglu_ref(x, N, F)); };
  expect_close(dgate_up, numerical_gradient(x, loss), 1e-5, 1e-5, "dgate_up vs finite differences");
}

}  // namespace
