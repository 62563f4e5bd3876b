// rmsnorm_forward/backward against a double reference; the backward reference goes through the
// explicit Jacobian of the normalisation (not the kernel's closed form), and against finite
// differences.
#include "cpu/rmsnorm.h"

#include "reference.h"

using namespace keel_test;

namespace {

constexpr float kEps = 1e-6f;

std::vector<double> rmsnorm_ref(const std::vector<double>& x, const std::vector<double>& w, int64_t N, int64_t C,
                                std::vector<double>* rstd = nullptr) {
  std::vector<double> out(N * C);
  for (int64_t n = 0; n < N; ++n) {
    double sq = 0;
    for (int64_t i = 0; i < C; ++i) sq += x[n * C + i] * x[n * C + i];
    const double s = 1.0 / std::sqrt(sq / C + double(kEps));
    for (int64_t i = 0; i < C; ++i) out[n * C + i] = x[n * C + i] * s * w[i];
    if (rstd) (*rstd)[n] = s;
  }
  return out;
}

struct Case {
  int64_t N, C;
};
void PrintTo(const Case& c, std::ostream* os) { *os << "N=" << c.N << ",C=" << c.C; }
class Rmsnorm : public ::testing::TestWithParam<Case> {};

TEST_P(Rmsnorm, ForwardAndBackwardMatchReference) {
  const auto [N, C] = GetParam();
  auto inp = random_floats(N * C, 1, -2.0f, 3.0f), weight = random_floats(C, 2), dout = random_floats(N * C, 4);
  std::vector<float> out(N * C), rstd(N);
  keel::cpu::rmsnorm_forward(out.data(), rstd.data(), inp.data(), weight.data(), N, C, kEps);
  std::vector<double> want_rstd(N);
  auto x = to_double(inp), w = to_double(weight), g = to_double(dout);
  expect_close(out, rmsnorm_ref(x, w, N, C, &want_rstd), 1e-5, 1e-5, "out");
  expect_close(rstd, want_rstd, 1e-6, 1e-5, "rstd");

  // Reference backward: dx_j = Σ_i g_i w_i ∂(x_i s)/∂x_j, ∂(x_i s)/∂x_j = s δ_ij − s³ x_i x_j / C.
  std::vector<double> want_dx(N * C), want_dw(C);
  for (int64_t n = 0; n < N; ++n) {
    const double s = want_rstd[n];
    for (int64_t j = 0; j < C; ++j) {
      double dx = 0;
      for (int64_t i = 0; i < C; ++i)
        dx += g[n * C + i] * w[i] * (s * (i == j) - s * s * s * x[n * C + i] * x[n * C + j] / C);
      want_dx[n * C + j] = dx;
      want_dw[j] += g[n * C + j] * x[n * C + j] * s;
    }
  }
  auto dinp = random_floats(N * C, 5), dweight = random_floats(C, 6);
  auto got_dinp = dinp, got_dweight = dweight;
  keel::cpu::rmsnorm_backward(got_dinp.data(), got_dweight.data(), dout.data(), inp.data(), weight.data(), rstd.data(),
                              N, C);
  expect_close(got_dinp, plus(dinp, want_dx), 1e-4, 1e-4, "dinp");
  expect_close(got_dweight, plus(dweight, want_dw), 1e-4, 1e-4, "dweight");
}

// Odd sizes, and one above the threading threshold (per-thread partial dweight).
INSTANTIATE_TEST_SUITE_P(Sizes, Rmsnorm, ::testing::Values(Case{7, 13}, Case{1, 1}, Case{2001, 37}));

TEST(RmsnormFiniteDifferences, BackwardMatchesNumericalGradient) {
  const int64_t N = 3, C = 5;
  auto inp = random_floats(N * C, 8, -2.0f, 2.0f), weight = random_floats(C, 9), dout = random_floats(N * C, 11);
  std::vector<float> out(N * C), rstd(N), dinp(N * C), dweight(C);
  keel::cpu::rmsnorm_forward(out.data(), rstd.data(), inp.data(), weight.data(), N, C, kEps);
  keel::cpu::rmsnorm_backward(dinp.data(), dweight.data(), dout.data(), inp.data(), weight.data(), rstd.data(), N, C);
  auto x = to_double(inp), w = to_double(weight), g = to_double(dout);
  auto loss = [&] { return dot(g, rmsnorm_ref(x, w, N, C)); };
  expect_close(dinp, numerical_gradient(x, loss), 1e-4, 1e-4, "dinp vs finite differences");
  expect_close(dweight, numerical_gradient(w, loss), 1e-5, 1e-5, "dweight vs finite differences");
}

}  // namespace
